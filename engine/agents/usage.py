"""Token accounting and pricing for LLM agents: what a job spent, in tokens and dollars.

Normalized token counts (one `Usage`) split a model's input the way prices do, so that the four
input/output fields never overlap and their sum is every token the model processed:

* ``input``: uncached input tokens (billed at the input price);
* ``cached_input``: input tokens read from the prompt cache (cache hits);
* ``cache_write``: input tokens written to the prompt cache (Anthropic's cache creation);
* ``output``: output tokens, reasoning/thinking included (billed at the output price);
* ``reasoning``: the part of ``output`` spent on reasoning — informational, never added again.

Vendors count differently; the adapters convert: Anthropic reports the three input kinds apart
(``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``); OpenAI/Codex
report ``input_tokens`` *including* ``cached_input_tokens`` (and ``cache_write_input_tokens`` when
present), and ``output_tokens`` including ``reasoning_output_tokens``.

`UsageLedger` keeps one attempt's usage from three kinds of reports and never counts one twice:

* **per message** (Claude's ``assistant`` lines): every content block of one API message is a line
  of its own that repeats the message's usage; each message id counts once (its largest report: the
  streamed ``output_tokens`` there is a placeholder that only grows);
* **deltas** (a legacy Codex per-request ``token_count``, a command agent's ``usage`` lines): added;
* **cumulative** snapshots (Claude's ``result``: the process's running totals; Codex's
  ``turn.completed``: the thread's running total): replace the previous snapshot.

A model's total is its latest snapshot plus the messages and deltas seen after it: a snapshot is
authoritative when it comes (it has the real output counts, and it covers every estimate before it,
even one filed under another spelling of the model's name), and the running estimate keeps the
figure live before it comes (budgets are enforced on it).

Costs, per model, first that applies (a price matches the exact model name, else the longest key
that prefixes it, so ``claude-sonnet-4-5`` prices ``claude-sonnet-4-5-20250929``):

1. ``defaults.prices`` of the benchmark (USD per million tokens, with the date the price was read):
   the user's word rules, live and final (source ``prices:<key>@<date>``);
2. the cost the CLI itself reported at the end (Claude's ``costUSD``; source ``reported``): it
   reconciles the live estimate (the estimate is kept beside it as ``estimate_usd``);
3. the list prices resenv ships (`price_table`; source ``table:<key>@<date>``): the live estimate;
   matched by exact name or a dated/``-latest`` variant only (`find_listed_price`);
4. else unknown (None): never shown as 0, and a dollar budget cannot see it (the session warns).
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .price_table import PRICE_TABLE

FIELDS = ("input", "cached_input", "cache_write", "output", "reasoning")


@dataclass
class Usage:
    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0

    @property
    def tokens(self) -> int:
        """Every token the model processed (reasoning is inside output)."""
        return self.input + self.cached_input + self.cache_write + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.cached_input + other.cached_input,
                     self.cache_write + other.cache_write, self.output + other.output,
                     self.reasoning + other.reasoning)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.input - other.input, self.cached_input - other.cached_input,
                     self.cache_write - other.cache_write, self.output - other.output,
                     self.reasoning - other.reasoning)

    def maximum(self, other: Usage) -> Usage:
        return Usage(max(self.input, other.input), max(self.cached_input, other.cached_input),
                     max(self.cache_write, other.cache_write), max(self.output, other.output),
                     max(self.reasoning, other.reasoning))

    def as_dict(self) -> dict[str, int]:
        return {"input": self.input, "cached_input": self.cached_input, "cache_write": self.cache_write,
                "output": self.output, "reasoning": self.reasoning}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        data = data or {}
        return cls(*(_int(data.get(f)) for f in FIELDS))

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in FIELDS)


MAX_TOKENS = 10**12
"""A count above this is not a count (no run comes near it) but a hostile value: it is clamped, so it
can never overflow SQLite's 64-bit integers and stop the run's store."""


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return min(max(0, value), MAX_TOKENS)
    if isinstance(value, float) and math.isfinite(value):
        return min(max(0, int(value)), MAX_TOKENS)
    return 0


def _dollars(value: Any) -> float | None:
    """A reported cost, if it is one: a finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


# -- vendor shapes -> Usage ----------------------------------------------------------------------


def from_anthropic(usage: Mapping[str, Any] | None) -> Usage:
    """Anthropic Messages usage (``input_tokens`` excludes cache reads and writes)."""
    usage = usage or {}
    details = usage.get("output_tokens_details") if isinstance(usage.get("output_tokens_details"), dict) else {}
    return Usage(
        input=_int(usage.get("input_tokens")),
        cached_input=_int(usage.get("cache_read_input_tokens")),
        cache_write=_int(usage.get("cache_creation_input_tokens")),
        output=_int(usage.get("output_tokens")),
        reasoning=_int(details.get("thinking_tokens")),
    )


def from_claude_model_usage(entry: Mapping[str, Any]) -> Usage:
    """One model of Claude Code's ``modelUsage`` (camelCase, same split as the Messages API)."""
    return Usage(
        input=_int(entry.get("inputTokens")),
        cached_input=_int(entry.get("cacheReadInputTokens")),
        cache_write=_int(entry.get("cacheCreationInputTokens")),
        output=_int(entry.get("outputTokens")),
        reasoning=_int(entry.get("thinkingTokens")),
    )


def from_openai(usage: Mapping[str, Any] | None) -> Usage:
    """OpenAI / Codex usage: input includes cached input (and cache writes); output includes reasoning.

    Accepts the Codex exec names (``cached_input_tokens``, ``reasoning_output_tokens``) and the
    Responses API names (``input_tokens_details.cached_tokens``,
    ``output_tokens_details.reasoning_tokens``); absent fields count 0.
    """
    usage = usage or {}
    in_details = usage.get("input_tokens_details") if isinstance(usage.get("input_tokens_details"), dict) else {}
    out_details = usage.get("output_tokens_details") if isinstance(usage.get("output_tokens_details"), dict) else {}
    total_in = _int(usage.get("input_tokens"))
    cached = _int(usage.get("cached_input_tokens", in_details.get("cached_tokens")))
    written = _int(usage.get("cache_write_input_tokens", in_details.get("cache_write_tokens")))
    return Usage(
        input=max(0, total_in - cached - written),
        cached_input=cached,
        cache_write=written,
        output=_int(usage.get("output_tokens")),
        reasoning=_int(usage.get("reasoning_output_tokens", out_details.get("reasoning_tokens"))),
    )


# -- prices --------------------------------------------------------------------------------------


def find_price(model: str | None, prices: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(price key, Price) for a model: the exact name, else the longest key prefixing the name."""
    if not model or not prices:
        return None
    if model in prices:
        return model, prices[model]
    candidates = [key for key in prices if model.startswith(key)]
    if not candidates:
        return None
    key = max(candidates, key=len)
    return key, prices[key]


_VARIANT = re.compile(r"(?:-\d{8}|@\d{8}|-latest|-\d{4}-\d{2}-\d{2})$")


def find_listed_price(model: str | None, table: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(key, price) of resenv's list prices for a model: its exact name, or that name with a date or
    ``-latest`` after it. Never a mere prefix: ``gpt-5`` does not price ``gpt-5-pro``, nor ``o3``
    ``o3-pro`` (an unknown model's cost stays unknown rather than wrong)."""
    if not model:
        return None
    if model in table:
        return model, table[model]
    base = _VARIANT.sub("", model)
    return (base, table[base]) if base != model and base in table else None


def price_usage(usage: Usage, price: Any) -> float:
    """USD for `usage` at `price` (per million tokens; reasoning is inside output)."""
    return (usage.input * price.input + usage.cached_input * price.cached_input
            + usage.cache_write * price.cache_write + usage.output * price.output) / 1e6


# -- the ledger ----------------------------------------------------------------------------------


@dataclass
class ModelSpend:
    model: str | None
    usage: Usage
    cost_usd: float | None
    cost_source: str | None  # "prices:<key>@<date>" | "reported" | "table:<key>@<date>" | None
    estimate_usd: float | None = None  # the price-table estimate a reported cost replaced

    def as_dict(self) -> dict[str, Any]:
        out = {"model": self.model, **self.usage.as_dict(), "tokens": self.usage.tokens,
               "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
               "cost_source": self.cost_source}
        if self.estimate_usd is not None:
            out["estimate_usd"] = round(self.estimate_usd, 6)
        return out


@dataclass
class UsageLedger:
    """One attempt's token usage by model (see the module doc for the rules)."""

    default_model: str | None = None
    prices: Mapping[str, Any] = field(default_factory=dict)  # the benchmark's defaults.prices
    table: Mapping[str, Any] = field(default_factory=lambda: PRICE_TABLE)  # the shipped list prices
    messages: dict[str, tuple[str | None, Usage]] = field(default_factory=dict)
    deltas: dict[str | None, Usage] = field(default_factory=dict)
    snapshot: dict[str | None, Usage] = field(default_factory=dict)
    reported_cost: dict[str | None, float] = field(default_factory=dict)
    superseded: set[str] = field(default_factory=set)  # message ids a snapshot already covers
    version: int = 0  # bumps whenever a total may have changed
    _message_sum: dict[str | None, Usage] = field(default_factory=dict)  # sum of `messages` by model

    def model_for(self, model: Any) -> str | None:
        """The model a report names (a string, whatever the agent printed), else the default."""
        if model is None or model == "":
            return self.default_model
        return str(model)[:200]

    def message(self, message_id: str, model: str | None, usage: Usage) -> bool:
        """A per-message report (each id counts once, at its largest); True if it changed anything."""
        if message_id in self.superseded:
            return False
        known = self.messages.get(message_id)
        model = known[0] if known is not None and not model else self.model_for(model)
        merged = usage if known is None else known[1].maximum(usage)
        if known is not None and known[1] == merged:
            return False
        if known is not None:
            self._message_sum[known[0]] = self._message_sum[known[0]] - known[1]
        self.messages[message_id] = (model, merged)
        self._message_sum[model] = self._message_sum.get(model, Usage()) + merged
        self.version += 1
        return True

    def delta(self, model: str | None, usage: Usage) -> bool:
        if not usage:
            return False
        model = self.model_for(model)
        self.deltas[model] = self.deltas.get(model, Usage()) + usage
        self.version += 1
        return True

    def cumulative(self, by_model: Mapping[str | None, Usage], costs: Mapping[str | None, float] | None = None) -> bool:
        """A running-total snapshot: it replaces the previous snapshot and covers every estimate
        (message or delta) seen before it."""
        snapshot = {self.model_for(model): usage for model, usage in by_model.items()}
        self.snapshot = snapshot
        if costs is not None:
            self.reported_cost = {self.model_for(model): cost for model, cost in costs.items()}
        self.superseded.update(self.messages)
        self.messages.clear()
        self._message_sum.clear()
        self.deltas.clear()
        self.version += 1
        return True

    def observe(self, event: Mapping[str, Any]) -> bool:
        """Account one normalized transcript event (see `transcript`); True if it is a completion."""
        kind = event.get("type")
        if kind == "session" and event.get("model") and not self.default_model:
            self.default_model = str(event["model"])
        if kind == "completion":
            models = event.get("models")
            if isinstance(models, dict) and models:
                usages = {m: Usage.from_dict(u) for m, u in models.items() if isinstance(u, dict)}
                # A reported cost of 0 for tokens the CLI has no price for is not a price: unknown.
                costs = {m: cost for m, u in models.items() if isinstance(u, dict)
                         and (cost := _dollars(u.get("cost_usd"))) is not None and (cost > 0 or not usages[m])}
                self.cumulative(usages, costs)
            elif isinstance(event.get("usage"), dict):
                cost = _dollars(event.get("cost_usd"))
                costs = {None: cost} if cost is not None and cost > 0 else None
                self.cumulative({None: Usage.from_dict(event["usage"])}, costs)
            return True
        usage = event.get("usage")
        if isinstance(usage, dict) and event.get("message_id"):
            self.message(str(event["message_id"]), event.get("model"), Usage.from_dict(usage))
        if kind == "usage":
            scope = event.get("scope")
            models = event.get("models")
            if scope == "cumulative":
                if isinstance(models, dict) and models:
                    self.cumulative({m: Usage.from_dict(u) for m, u in models.items() if isinstance(u, dict)})
                else:
                    self.cumulative({event.get("model"): Usage.from_dict(event)})
            elif scope == "message" and event.get("message_id"):
                self.message(str(event["message_id"]), event.get("model"), Usage.from_dict(event))
            else:
                self.delta(event.get("model"), Usage.from_dict(event))
        return False

    def by_model(self) -> dict[str | None, ModelSpend]:
        usage_of: dict[str | None, Usage] = dict(self.snapshot)
        for model, usage in self._message_sum.items():
            usage_of[model] = usage_of.get(model, Usage()) + usage
        for model, usage in self.deltas.items():
            usage_of[model] = usage_of.get(model, Usage()) + usage
        out: dict[str | None, ModelSpend] = {}
        for model, usage in usage_of.items():
            cost, source, estimate = self._cost(model, usage)
            out[model] = ModelSpend(model, usage, cost, source, estimate)
        return out

    def _cost(self, model: str | None, usage: Usage) -> tuple[float | None, str | None, float | None]:
        """(cost, its source, the table estimate a reported cost replaced): see the module doc."""
        found = find_price(model, self.prices)
        if found is not None:
            key, price = found
            return price_usage(usage, price), f"prices:{key}@{price.date}", None
        listed = find_listed_price(model, self.table)
        estimate = price_usage(usage, listed[1]) if listed is not None else None
        if model in self.reported_cost:
            return self.reported_cost[model], "reported", estimate
        if listed is not None:
            return estimate, f"table:{listed[0]}@{listed[1].date}", None
        if not usage:
            return 0.0, None, None
        return None, None, None

    def summary(self) -> tuple[int, float]:
        """(tokens, dollars) so far, cheaply (unpriced models count 0 dollars): for budget checks."""
        tokens, cost = 0, 0.0
        for spend in self.by_model().values():
            tokens += spend.usage.tokens
            cost += spend.cost_usd or 0.0
        return tokens, cost

    def totals(self) -> dict[str, Any]:
        spends = self.by_model()
        usage = Usage()
        cost = 0.0
        unpriced = []
        for spend in spends.values():
            usage = usage + spend.usage
            if spend.cost_usd is None:
                unpriced.append(spend.model)
            else:
                cost += spend.cost_usd
        return {"usage": usage, "tokens": usage.tokens, "cost_usd": cost, "unpriced": unpriced,
                "models": [spend.as_dict() for spend in sorted(spends.values(), key=lambda s: str(s.model))]}


# -- run-wide spend ------------------------------------------------------------------------------


@dataclass
class RunSpend:
    """Dollars spent by a run: what earlier engines recorded plus this engine's live attempts."""

    baseline: float = 0.0
    live: dict[int, float] = field(default_factory=dict)  # attempt id -> its cost so far
    sessions: set[Any] = field(default_factory=set)  # live agent sessions (to stop on run_dollars)

    @property
    def total(self) -> float:
        return self.baseline + sum(self.live.values())


_RUNS: dict[str, RunSpend] = {}


def run_spend(run_id: str, db_path: Any | None) -> RunSpend:
    """This engine's `RunSpend` of a run; the first call reads what earlier engines spent."""
    spend = _RUNS.get(run_id)
    if spend is None:
        spend = RunSpend(baseline=_recorded_spend(run_id, db_path))
        _RUNS[run_id] = spend
    return spend


def _recorded_spend(run_id: str, db_path: Any | None) -> float:
    if db_path is None:
        return 0.0
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM usage WHERE run_id = ?", (run_id,)).fetchone()
        finally:
            conn.close()
        return float(row[0] or 0.0)
    except sqlite3.Error:
        return 0.0


def usage_row_sql(run_id: str, job_id: int, attempt_id: int, spend: ModelSpend) -> list[tuple[str, tuple]]:
    """Statements that keep one `usage` row per (attempt, model) equal to `spend` (update, else insert)."""
    now = time.time()
    u = spend.usage
    values = (now, u.input, u.cached_input, u.cache_write, u.output, u.reasoning, spend.cost_usd)
    update = ("UPDATE usage SET ts = ?, input_tokens = ?, cached_input_tokens = ?, cache_write_tokens = ?,"
              " output_tokens = ?, reasoning_tokens = ?, cost_usd = ? WHERE attempt_id = ? AND model IS ?",
              (*values, attempt_id, spend.model))
    insert = ("INSERT INTO usage (run_id, job_id, attempt_id, model, ts, input_tokens, cached_input_tokens,"
              " cache_write_tokens, output_tokens, reasoning_tokens, cost_usd)"
              " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS"
              " (SELECT 1 FROM usage WHERE attempt_id = ? AND model IS ?)",
              (run_id, job_id, attempt_id, spend.model, *values, attempt_id, spend.model))
    return [update, insert]


__all__ = [
    "FIELDS", "ModelSpend", "RunSpend", "Usage", "UsageLedger", "find_price", "from_anthropic",
    "from_claude_model_usage", "from_openai", "price_usage", "run_spend", "usage_row_sql",
]
