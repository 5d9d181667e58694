"""The model prices resenv ships: USD per million tokens, per model, with the date each took effect.

Why ship prices: a dollar budget must hold while the agent runs, and the CLIs report a cost only
when they finish (Claude Code) or never (Codex). Live cost is each message's usage times the price
here; a price in the benchmark's ``defaults.prices`` overrides it (a negotiated rate, a proxy, a
model this table does not know), and Claude Code's own final cost reconciles the estimate when it
comes (see `usage.UsageLedger`).

These are the vendors' published list prices for standard (non-batch) use: input, cache reads
(``cached_input``), cache writes (Anthropic's 5-minute writes; OpenAI bills none) and output,
reasoning included in output. Long-context surcharges are not modelled: the CLI's own figure
corrects them at the end. A model name matches its exact key or that key with a date or ``-latest``
after it (``claude-sonnet-4-5`` prices ``claude-sonnet-4-5-20250929``), never a mere prefix: a model
this table does not list has an unknown cost, not a neighbour's (`usage.find_listed_price`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ListPrice:
    input: float
    cached_input: float
    cache_write: float
    output: float
    date: str  # when this list price took effect


def _anthropic(base_in: float, base_out: float, date: str) -> ListPrice:
    """Anthropic prices cache reads at 0.1x and 5-minute cache writes at 1.25x the input price."""
    return ListPrice(base_in, round(base_in * 0.1, 6), round(base_in * 1.25, 6), base_out, date)


def _openai(base_in: float, cached: float, base_out: float, date: str) -> ListPrice:
    return ListPrice(base_in, cached, 0.0, base_out, date)


PRICE_TABLE: dict[str, ListPrice] = {
    "claude-opus-4-5": _anthropic(5.0, 25.0, "2025-11-24"),
    "claude-opus-4-1": _anthropic(15.0, 75.0, "2025-08-05"),
    "claude-opus-4": _anthropic(15.0, 75.0, "2025-05-22"),
    "claude-sonnet-4-5": _anthropic(3.0, 15.0, "2025-09-29"),
    "claude-sonnet-4": _anthropic(3.0, 15.0, "2025-05-22"),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0, "2025-02-24"),
    "claude-haiku-4-5": _anthropic(1.0, 5.0, "2025-10-15"),
    "claude-3-5-haiku": _anthropic(0.8, 4.0, "2024-11-04"),
    "gpt-5.1-codex-mini": _openai(0.25, 0.025, 2.0, "2025-11-13"),
    "gpt-5.1-codex": _openai(1.25, 0.125, 10.0, "2025-11-13"),
    "gpt-5.1": _openai(1.25, 0.125, 10.0, "2025-11-13"),
    "gpt-5-codex": _openai(1.25, 0.125, 10.0, "2025-09-23"),
    "gpt-5-mini": _openai(0.25, 0.025, 2.0, "2025-08-07"),
    "gpt-5-nano": _openai(0.05, 0.005, 0.4, "2025-08-07"),
    "gpt-5": _openai(1.25, 0.125, 10.0, "2025-08-07"),
    "gpt-4.1": _openai(2.0, 0.5, 8.0, "2025-04-14"),
    "o4-mini": _openai(1.1, 0.275, 4.4, "2025-04-16"),
    "o3": _openai(2.0, 0.5, 8.0, "2025-06-10"),
}


__all__ = ["PRICE_TABLE", "ListPrice"]
