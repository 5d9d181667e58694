"""Attacks on an agent's accounting and on the model-API verdict, through what an agent can print or
write: hostile counts and costs, unknown model names, a forged running total in the CLI's own
session log, and errors of its own making dressed as the API's (see engine/agents/api_errors.py,
usage.py, session.py). The end-to-end cases run the real engine with stand-in CLIs replaying
recorded streams (tests/integration/test_agent_session.py has the harness)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from resenv.engine.agents.api_errors import hopeless
from resenv.engine.agents.claude_code import parse_claude_line
from resenv.engine.agents.codex import parse_codex_line
from resenv.engine.agents.session import _LogTail
from resenv.engine.agents.usage import MAX_TOKENS, Usage, UsageLedger, find_listed_price, from_openai
from resenv.engine.money import usd
from resenv.engine.sandbox.base import OutputLine

from ..integration.test_agent_session import STREAMS, claude_agent, events, fake_cli, run
from ..integration.test_engine_run import db_rows


def parse(parser, data: dict) -> list[dict]:
    text = json.dumps(data)
    return parser(OutputLine("stdout", 1, text, len(text), False))


def test_counts_beyond_any_run_are_clamped_never_overflowing_the_store() -> None:
    usage = from_openai({"input_tokens": 10**19, "output_tokens": 1e300, "cached_input_tokens": -5})
    assert usage.output == MAX_TOKENS and usage.input == MAX_TOKENS and usage.cached_input == 0
    assert Usage.from_dict({"input": float("nan"), "output": float("inf")}) == Usage()


def test_reported_costs_that_are_not_costs_are_ignored() -> None:
    for bogus in (float("nan"), -1e9, float("inf"), True, "1.0"):
        ledger = UsageLedger()
        ledger.observe({"type": "completion", "models": {"m": {"input": 10, "output": 1, "cost_usd": bogus}}})
        [spend] = ledger.totals()["models"]
        assert spend["cost_usd"] is None, bogus  # unknown, never NaN, negative or infinite
        assert math.isfinite(ledger.summary()[1])


def test_a_model_name_that_is_not_a_string_is_a_name() -> None:
    ledger = UsageLedger()
    [event] = parse(parse_claude_line, {"type": "stream_event", "api_message_id": "m1", "event": {
        "type": "message_start", "message": {"id": "m1", "model": 5, "usage": {"input_tokens": 10, "output_tokens": 1}}}})
    ledger.observe(event)
    assert [spend["model"] for spend in ledger.totals()["models"]] == ["5"]


@pytest.mark.parametrize("model, key", [
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"), ("claude-opus-4-20250514", "claude-opus-4"),
    ("gpt-5-codex", "gpt-5-codex"), ("claude-haiku-4-5-latest", "claude-haiku-4-5"),
    ("gpt-5-pro", None), ("o3-pro", None), ("gpt-4.1-nano", None), ("claude-opus-4-7", None),
])
def test_the_shipped_prices_never_price_a_neighbouring_model(model: str, key: str | None) -> None:
    from resenv.engine.agents.price_table import PRICE_TABLE

    found = find_listed_price(model, PRICE_TABLE)
    assert (found[0] if found else None) == key
    ledger = UsageLedger(default_model=model)
    ledger.observe({"type": "usage", "scope": "delta", "input": 1000})
    assert (ledger.totals()["models"][0]["cost_usd"] is None) == (key is None)


def test_a_running_total_that_goes_down_is_not_the_cli_s() -> None:
    """Codex's session log is a file of the agent's own HOME: a forged zero total written after a real
    one must not reset the count a budget is enforced on."""
    tail = _LogTail(Path("/nonexistent"), 0, lambda path: path)
    real = {"type": "usage", "scope": "cumulative", "input": 900_000, "output": 50_000}
    assert tail.advances(real)
    assert not tail.advances({"type": "usage", "scope": "cumulative", "input": 0, "output": 0})
    assert not tail.advances({"type": "usage", "scope": "cumulative", "input": 950_000, "output": 10})
    assert tail.advances({"type": "usage", "scope": "cumulative", "input": 950_000, "output": 60_000})


def test_a_request_the_api_rejected_as_malformed_is_the_agent_s_not_infrastructure() -> None:
    """A prompt that outgrew the context (400) is the agent's doing: never a free retry."""
    [claude] = parse(parse_claude_line, {
        "type": "assistant", "is_api_error_message": True, "api_error_status": 400, "error": "invalid_request",
        "message": {"id": "x", "model": "<synthetic>", "content": [{"type": "text", "text": "Prompt is too long"}]}})
    assert (claude["category"], claude["api_kind"], claude["fatal"]) == ("model_request", "bad_request", True)
    [codex] = parse(parse_codex_line, {"type": "error", "message": "unexpected status 400 Bad Request: context too long"})
    assert codex["category"] == "model_request" and not hopeless(codex)
    [credit] = parse(parse_claude_line, {
        "type": "assistant", "is_api_error_message": True, "api_error_status": 400, "error": "invalid_request",
        "message": {"id": "y", "model": "<synthetic>", "content": [
            {"type": "text", "text": "Your credit balance is too low to access the API"}]}})
    assert (credit["category"], credit["api_kind"]) == ("model_api", "quota")


def test_money_never_breaks_on_a_hostile_figure() -> None:
    assert usd(1e26) == "$1.00e+26" and usd(float("nan")) == "—"


def stream_with(tmp_path: Path, name: str, extra: list[dict], *, before_result: bool, base: str = "claude-setup") -> Path:
    lines = (STREAMS / f"{base}.jsonl").read_text().splitlines()
    added = [json.dumps(line) for line in extra]
    lines = lines[:-1] + added + lines[-1:] if before_result else lines + added
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_api_error_after_success_or_from_a_subagent_never_makes_the_attempt_infrastructure(tmp_path, cli_env) -> None:
    """A successful agent followed by a 401 line, and an agent whose subagent hit a 500 but which
    itself went on until its turns ran out: both are done (the agent's own results), judged, and not
    retried."""
    retry_401 = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10, "error_status": 401,
                 "error": "authentication_failed"}
    subagent_500 = {"type": "assistant", "parent_tool_use_id": "toolu_sub", "is_api_error_message": True,
                    "api_error_status": 500, "error": "server_error",
                    "message": {"id": "s1", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 500"}]}}
    after = stream_with(tmp_path, "after", [retry_401], before_result=False)
    sub = stream_with(tmp_path, "sub", [subagent_500], before_result=True, base="claude-max-turns")
    cli = fake_cli(tmp_path)
    agents = (claude_agent("after", cli, "claude-setup", REPLAY=str(after))
              + claude_agent("sub", cli, "claude-setup", REPLAY=str(sub)))
    db, run_id = run(tmp_path, cli_env, agents, "after", "sub")
    for job in db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,)):
        assert job["state"] == "done" and job["reason"] is None, job
        tries = db_rows(db, "SELECT category FROM attempts WHERE job_id = ?", (job["id"],))
        assert [t["category"] for t in tries] == [None], tries
    assert not events(db, run_id, "agent_stopped")
    assert len(db_rows(db, "SELECT * FROM tier_results WHERE run_id = ? AND tier = 'C1'", (run_id,))) == 2
