"""Agent stream parsers on streams recorded from the real CLIs (tests/fixtures/streams), and their
token accounting: one event per line, nothing dropped, usage counted once, final totals from the
CLI's own running totals."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from resenv.engine.agents.claude_code import parse_claude_line
from resenv.engine.agents.api_errors import hopeless
from resenv.engine.agents.codex import parse_codex_line, parse_rollout_line
from resenv.engine.agents.command import CommandAgent
from resenv.engine.agents.transcript import EVENT_TYPES, RAW_CAP
from resenv.engine.agents.usage import Usage, UsageLedger
from resenv.engine.sandbox.base import OutputLine
from resenv.engine.sandbox.lines import LineSplitter
from resenv.engine.spec import Price

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
PRICES = {
    "claude-sonnet-4-5": Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0, date="2025-09-29"),
    "gpt-5-codex": Price(input=1.25, cached_input=0.125, cache_write=0.0, output=10.0, date="2025-09-23"),
}


def lines_of(name: str) -> list[OutputLine]:
    """Whole lines, as the agent session hands them to parsers (it restores lines the sandbox cut
    at 16 KiB from the raw log; see test_agent_session.py)."""
    splitter = LineSplitter(max_bytes=1 << 26)
    raw = splitter.feed((STREAMS / f"{name}.jsonl").read_bytes()) + splitter.flush()
    return [OutputLine("stdout", n, r.text(), r.nbytes, r.truncated) for n, r in enumerate(raw, 1)]


def parse_all(name: str) -> list[list[dict]]:
    parse = parse_claude_line if name.startswith("claude") else parse_codex_line
    return [parse(line) for line in lines_of(name)]


def flat(name: str) -> list[dict]:
    return [event for events in parse_all(name) for event in events]


def ledger_after(name: str, model: str | None = None) -> tuple[UsageLedger, list[dict]]:
    ledger = UsageLedger(default_model=model, prices=PRICES)
    completions = []
    for event in flat(name):
        if ledger.observe(event):
            completions.append(event)
    return ledger, completions


ALL = sorted(path.stem for path in STREAMS.glob("*.jsonl") if not path.stem.endswith(".rollout"))


@pytest.mark.parametrize("name", ALL)
def test_every_line_gives_known_events_and_nothing_is_dropped(name: str) -> None:
    per_line = parse_all(name)
    for line, events in zip(lines_of(name), per_line):
        # an API streaming event's content delta is the one line kept only in the raw log
        assert events or '"type":"stream_event"' in line.text, line.text[:200]
    for events in per_line:
        for event in events:
            assert event["type"] in EVENT_TYPES
            json.dumps(event)  # storable
    unknown = [e for events in per_line for e in events if e["type"] == "unknown"]
    if name == "codex-legacy":
        assert [e["reason"] for e in unknown] == ["legacy msg type 'background_event'"]
    else:
        assert unknown == [], "recorded streams hold no shape the parsers do not know"


def types(name: str) -> list[str]:
    return [event["type"] for event in flat(name)]


def test_claude_setup_transcript() -> None:
    events = flat("claude-setup")
    assert events[0]["type"] == "session" and events[0]["model"] == "claude-sonnet-4-5"
    assert events[0]["version"] == "2.1.332"
    calls = [e for e in events if e["type"] == "tool_call"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [c["command"] for c in calls][:2] == ["ls repo && cat repo/main.py",
                                                   "python3 -m venv env && env/bin/python -m pip --version"]
    assert len(calls) == len(results) == 6
    by_id = {r["id"]: r for r in results}
    exit_codes = [by_id[c["id"]]["exit_code"] for c in calls]
    assert exit_codes == [0, 0, 0, 0, 3, 0]
    assert by_id[calls[4]["id"]]["is_error"] is True and "something failed" in by_id[calls[4]["id"]]["output"]
    assert [e["text"] for e in events if e["type"] == "thinking"] == ["The repository is small; look at it first."]
    assert types("claude-setup")[-1] == "completion"
    done = events[-1]
    assert (done["status"], done["subtype"], done["is_error"], done["num_turns"]) == ("success", "success", False, 7)


def test_claude_usage_is_exact_per_message_before_the_result() -> None:
    """Each message id repeats its usage on every content block line (output_tokens a placeholder
    of 1): counted once; the streamed message_delta brings the message's real output count, so the
    running total is exact before `result` comes, which then replaces it with the same figures."""
    events = flat("claude-setup")
    ledger = UsageLedger(prices=PRICES)
    for event in events[:-1]:  # everything but the result
        ledger.observe(event)
    message_ids = {e["message_id"] for e in events if e.get("message_id")}
    assert len(message_ids) == 6 and len(ledger.messages) == 6
    served = Usage(input=1660, cached_input=16000, cache_write=2220, output=530, reasoning=0)  # scripts.SETUP
    assert ledger.totals()["usage"] == served
    assert ledger.observe(events[-1]) is True
    final = ledger.totals()
    assert final["usage"] == served
    [spend] = final["models"]
    assert spend["model"] == "claude-sonnet-4-5" and spend["cost_source"] == "prices:claude-sonnet-4-5@2025-09-29"
    expected = (1660 * 3.0 + 16000 * 0.3 + 2220 * 3.75 + 530 * 15.0) / 1e6
    assert final["cost_usd"] == pytest.approx(expected)


def served_after(name: str, upto: int) -> Usage:
    """What the model had served when a stream is cut after line `upto`: the sum of the messages
    whose message_delta (their end) came by then, plus the input of those that had only started."""
    total = Usage()
    started: dict[str, Usage] = {}
    for line in lines_of(name)[:upto]:
        data = json.loads(line.text)
        event = data.get("event") or {}
        if data.get("type") == "stream_event" and event.get("type") == "message_start":
            usage = event["message"]["usage"]
            started[event["message"]["id"]] = Usage(usage["input_tokens"], usage["cache_read_input_tokens"],
                                                    usage["cache_creation_input_tokens"], usage["output_tokens"])
        if data.get("type") == "stream_event" and event.get("type") == "message_delta":
            begun = started.pop(data["api_message_id"])
            total = total + Usage(begun.input, begun.cached_input, begun.cache_write, event["usage"]["output_tokens"])
    for begun in started.values():
        total = total + begun
    return total


def test_a_claude_stream_cut_anywhere_counts_what_was_served() -> None:
    """A stream stopped before `result` (a budget kill, a crash) counts exactly what the API served
    up to that line: no placeholder undercount, no double count."""
    lines = lines_of("claude-setup")
    for upto in range(1, len(lines)):
        ledger = UsageLedger(prices=PRICES)
        for line in lines[:upto]:
            for event in parse_claude_line(line):
                ledger.observe(event)
        assert ledger.totals()["usage"] == served_after("claude-setup", upto), upto


def test_claude_cost_without_a_configured_price() -> None:
    """Live: the shipped price table prices each message as it ends; at the end the CLI's own cost
    replaces the estimate, which is kept beside it."""
    events = flat("claude-setup")
    ledger = UsageLedger()
    for event in events[:-1]:
        ledger.observe(event)
    [live] = ledger.totals()["models"]
    assert live["cost_source"] == "table:claude-sonnet-4-5@2025-09-29"
    assert live["cost_usd"] == pytest.approx((1660 * 3.0 + 16000 * 0.3 + 2220 * 3.75 + 530 * 15.0) / 1e6)
    ledger.observe(events[-1])
    [spend] = ledger.totals()["models"]
    assert spend["cost_source"] == "reported"
    assert spend["cost_usd"] == pytest.approx(events[-1]["cost_usd"])
    assert spend["estimate_usd"] == pytest.approx(live["cost_usd"])  # list prices: the same figure


def api_errors(name: str) -> list[dict]:
    return [e for e in flat(name) if e["type"] == "error" and e["category"] == "model_api"]


def test_claude_api_errors_retries_and_error_results() -> None:
    retry = flat("claude-retry")
    retries = api_errors("claude-retry")
    assert [(e["status"], e["api_kind"], e["attempt"], e["retry"], e["fatal"]) for e in retries] == [
        (529, "server", 1, True, False), (529, "server", 2, True, False), (None, "connection", 1, True, False)]
    assert retry[-1]["type"] == "completion" and retry[-1]["status"] == "success" and "api_error" not in retry[-1]

    for name, status, kind, retried in (("claude-auth-failure", 401, "auth", 2), ("claude-server-error", 500, "server", 2),
                                        ("claude-forbidden", 403, "auth", 0)):
        errors = api_errors(name)
        assert [e["status"] for e in errors] == [status] * (retried + 1), name
        assert all(e["api_kind"] == kind for e in errors) and [e["fatal"] for e in errors] == [False] * retried + [True]
        done = flat(name)[-1]
        # is_error with subtype success: an API error, not a success
        assert (done["type"], done["subtype"], done["is_error"], done["status"]) == ("completion", "success", True, "error")
        assert done["api_error"]["status"] == status and done["api_error"]["api_kind"] == kind
        ledger, _ = ledger_after(name)
        assert ledger.totals()["tokens"] == 0  # the synthetic error message carries no usage
    assert hopeless(api_errors("claude-auth-failure")[0]) and not hopeless(api_errors("claude-server-error")[0])


def test_a_synthetic_message_that_is_no_api_error_is_text() -> None:
    text = ('{"type":"assistant","message":{"id":"x","model":"<synthetic>","role":"assistant","content":'
            '[{"type":"text","text":"No response requested."}]}}')
    [event] = parse_claude_line(OutputLine("stdout", 1, text, len(text), False))
    assert event["type"] == "message" and event["synthetic"] is True and event["text"] == "No response requested."


def test_claude_max_turns_and_permission_denial() -> None:
    done = flat("claude-max-turns")[-1]
    assert (done["subtype"], done["status"], done["terminal_reason"]) == ("error_max_turns", "error", "max_turns")
    assert done["errors"] == ["Reached maximum number of turns (2)"]
    denied = flat("claude-permission-denied")
    [error] = [e for e in denied if e["type"] == "error"]
    assert error["category"] == "permission_denied" and error["tool"] == "Bash"
    [result] = [e for e in denied if e["type"] == "tool_result"]
    assert result["denied"] is True and result["is_error"] is True and result["exit_code"] is None
    assert denied[-1]["permission_denials"] == 1 and denied[-1]["denied_tools"] == ["Bash"]
    assert denied[-1]["status"] == "success"


def test_claude_big_output_and_invalid_utf8_are_kept() -> None:
    """Claude Code persists a 4.8 MB output to a file and sends a preview, on a 33 kB line (longer
    than the 16 KiB the sandbox hands to on_line: restored from the raw log)."""
    assert max(line.nbytes for line in lines_of("claude-big-output")) > 16384
    events = flat("claude-big-output")
    results = [e for e in events if e["type"] == "tool_result"]
    assert "Output too large" in results[0]["output"] and results[0]["exit_code"] == 0
    assert "\ufffd" in results[1]["output"]


def test_codex_setup_transcript_and_thread_usage() -> None:
    events = flat("codex-setup")
    assert events[0]["type"] == "session"
    warning = events[1]
    assert warning["type"] == "error" and warning["category"] == "warning" and warning["fatal"] is False
    results = [e for e in events if e["type"] == "tool_result"]
    assert sorted(r["exit_code"] for r in results) == [0, 0, 0, 0, 0, 3]
    failed = [r for r in results if r["exit_code"] == 3][0]
    assert failed["status"] == "failed" and failed["output"] == "something failed\n"
    ledger, completions = ledger_after("codex-setup", model="gpt-5-codex")
    assert [c["subtype"] for c in completions] == ["turn.completed"]
    total = ledger.totals()
    # turn.completed: input 17660 INCLUDING 16000 cached; output 530 including 40 reasoning
    assert total["usage"] == Usage(input=1660, cached_input=16000, cache_write=0, output=530, reasoning=40)
    assert total["cost_usd"] == pytest.approx((1660 * 1.25 + 16000 * 0.125 + 530 * 10.0) / 1e6)
    assert total["models"][0]["model"] == "gpt-5-codex"


def test_codex_without_a_price_has_an_unknown_cost() -> None:
    ledger, _ = ledger_after("codex-setup", model="some-unpriced-model")
    total = ledger.totals()
    assert total["unpriced"] == ["some-unpriced-model"] and total["cost_usd"] == 0.0
    assert total["models"][0]["cost_usd"] is None


def test_codex_without_a_configured_price_uses_the_shipped_table() -> None:
    ledger = UsageLedger(default_model="gpt-5-codex")
    for event in flat("codex-setup"):
        ledger.observe(event)
    [spend] = ledger.totals()["models"]
    assert spend["cost_source"] == "table:gpt-5-codex@2025-09-23"
    assert spend["cost_usd"] == pytest.approx((1660 * 1.25 + 16000 * 0.125 + 530 * 10.0) / 1e6)


def test_codex_reconnects_are_harmless_and_failures_end_the_turn() -> None:
    retry = flat("codex-retry")
    reconnects = api_errors("codex-retry")
    assert len(reconnects) == 2 and all(e["retry"] and not e["fatal"] for e in reconnects)
    assert {e["api_kind"] for e in reconnects} == {"connection"}
    assert retry[-1]["type"] == "completion" and retry[-1]["status"] == "success"
    for name, status, kind in (("codex-auth-failure", 401, "auth"), ("codex-forbidden", 403, "auth"),
                               ("codex-server-error", None, "server"), ("codex-quota", 429, "quota"),
                               ("codex-dropped", None, "connection")):
        errors = api_errors(name)
        assert errors and [e["fatal"] for e in errors] == [False] * (len(errors) - 1) + [True], name
        assert {(e["status"], e["api_kind"]) for e in errors} == {(status, kind)}, name
        done = flat(name)[-1]
        assert (done["type"], done["subtype"], done["status"]) == ("completion", "turn.failed", "error")
        assert (done["api_error"]["status"], done["api_error"]["api_kind"]) == (status, kind)
    assert hopeless(api_errors("codex-auth-failure")[0]) and not hopeless(api_errors("codex-quota")[0])


def test_a_codex_error_that_is_not_the_api_is_the_agents_and_fatal() -> None:
    text = '{"type":"error","message":"sandbox error: could not apply patch"}'
    [event] = parse_codex_line(OutputLine("stdout", 1, text, len(text), False))
    assert (event["category"], event["fatal"], event["retry"]) == ("agent", True, False)


def rollout_events() -> list[dict]:
    """The usage events of Codex's session log (its turn context aside)."""
    return [e for e in map(parse_rollout_line, (STREAMS / "codex-setup.rollout.jsonl").read_text().splitlines())
            if e and e["type"] == "usage"]


def test_codex_s_session_log_names_the_model_when_none_is_configured() -> None:
    """No `model:` in the agent's entry: the turn context of Codex's own log names it, so the live
    cost is priced (and a dollar budget can see it)."""
    ledger = UsageLedger()
    for text in (STREAMS / "codex-setup.rollout.jsonl").read_text().splitlines():
        if (event := parse_rollout_line(text)) is not None:
            ledger.observe(event)
    [spend] = ledger.totals()["models"]
    assert spend["model"] == "gpt-5-codex" and spend["cost_source"] == "table:gpt-5-codex@2025-09-23"


def test_codex_usage_records_come_before_the_tools_run() -> None:
    """Codex's session log: a token_usage_record right after each response (the thread's running
    total), then a token_count after the response's tools ran, with the same total."""
    events = rollout_events()
    records = [e for e in events if "response_id" in e]
    assert len(records) == 6 and len(events) == 12
    ledger = UsageLedger(default_model="gpt-5-codex")
    ledger.observe(records[0])
    assert ledger.totals()["usage"] == Usage(input=1000, cached_input=0, output=100, reasoning=30)
    ledger.observe(records[-1])
    assert ledger.totals()["usage"] == Usage(input=1660, cached_input=16000, output=530, reasoning=40)


def test_a_codex_stream_cut_before_the_turn_ends_counts_from_its_session_log() -> None:
    lines = [line for line in lines_of("codex-setup") if "turn.completed" not in line.text]
    ledger = UsageLedger(default_model="gpt-5-codex")
    for line in lines:
        for event in parse_codex_line(line):
            ledger.observe(event)
    assert ledger.totals()["tokens"] == 0  # the --json stream alone: nothing
    for event in rollout_events()[:5]:  # cut after the third response's record
        ledger.observe(event)
    assert ledger.totals()["usage"] == Usage(input=1000 + 200 + 150, cached_input=3000 + 3100, output=100 + 60 + 50,
                                             reasoning=30)


def test_codex_thread_usage_is_a_running_total_not_a_delta() -> None:
    """Two turn.completed lines of one thread: the second REPLACES the first."""
    first = '{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":400,"output_tokens":50}}'
    second = ('{"type":"turn.completed","usage":{"input_tokens":2500,"cached_input_tokens":1400,'
              '"output_tokens":90,"reasoning_output_tokens":30}}')
    ledger = UsageLedger(default_model="m")
    for n, text in enumerate([first, second], 1):
        for event in parse_codex_line(OutputLine("stdout", n, text, len(text), False)):
            ledger.observe(event)
    assert ledger.totals()["usage"] == Usage(input=1100, cached_input=1400, cache_write=0, output=90, reasoning=30)


def test_codex_legacy_envelope() -> None:
    events = flat("codex-legacy")
    assert events[0] == {"type": "session", "session_id": "f47e4fde-f03b-498c-9abb-be8247bbd7a9",
                         "model": "codex-mini-latest"}
    call = next(e for e in events if e["type"] == "tool_call")
    assert call["command"] == "bash -lc 'python3 -m venv env'"
    result = next(e for e in events if e["type"] == "tool_result")
    assert (result["exit_code"], result["is_error"], result["output"]) == (2, True, "boom\n")
    ledger, completions = ledger_after("codex-legacy")
    assert ledger.default_model == "codex-mini-latest"  # from session_configured
    # two flat token_count lines are per-request deltas: added
    assert ledger.totals()["usage"] == Usage(input=2904, cached_input=1900, cache_write=0, output=100, reasoning=64)
    assert completions[0]["result"] == "Done."


def test_codex_legacy_cumulative_token_count_replaces() -> None:
    lines = [
        '{"id":"1","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"output_tokens":10}}}}',
        '{"id":"1","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":300,"cached_input_tokens":50,'
        '"output_tokens":30}}}}',
        '{"id":"1","msg":{"type":"token_count","info":null}}',
    ]
    ledger = UsageLedger(default_model="m")
    for n, text in enumerate(lines, 1):
        for event in parse_codex_line(OutputLine("stdout", n, text, len(text), False)):
            ledger.observe(event)
    assert ledger.totals()["usage"] == Usage(input=250, cached_input=50, output=30)


# -- tolerance --------------------------------------------------------------------------------------

GARBAGE = [
    ("", "output"),
    ("plain text from the CLI", "output"),
    ("{not json", "unknown"),
    ("[1, 2, 3]", "unknown"),
    ('{"type": "brand_new_event", "x": 1}', "unknown"),
    ('{"no_type": true}', "unknown"),
    ('"a json string"', "output"),
    ("{\"type\": \"assistant\", \"message\": \"not an object\"}", "unknown"),
    ("\ufffd\ufffd binary \ufffd", "output"),
]


@pytest.mark.parametrize("parse", [parse_claude_line, parse_codex_line], ids=["claude", "codex"])
@pytest.mark.parametrize("text,kind", GARBAGE)
def test_parsers_tolerate_anything(parse, text: str, kind: str) -> None:
    events = parse(OutputLine("stdout", 1, text, len(text.encode()), False))
    assert len(events) == 1 and events[0]["type"] == kind
    if kind == "unknown":
        assert events[0]["raw"] == text


@pytest.mark.parametrize("parse", [parse_claude_line, parse_codex_line], ids=["claude", "codex"])
def test_a_cut_line_is_kept_as_unknown_and_stderr_as_output(parse) -> None:
    cut = '{"type":"user","message":{"content":[{"type":"tool_result","content":"' + "x" * 20000
    [event] = parse(OutputLine("stdout", 1, cut[:16384], 5_000_000, True))
    assert event["type"] == "unknown" and len(event["raw"]) <= RAW_CAP and "cut" in event["reason"]
    [err] = parse(OutputLine("stderr", 1, "warning: something", 18, False))
    assert err == {"type": "output", "stream": "stderr", "text": "warning: something"}


def test_claude_unknown_content_block_and_subagent_lines() -> None:
    text = json.dumps({"type": "assistant", "parent_tool_use_id": "toolu_parent", "message": {
        "id": "msg_1", "model": "m", "usage": {"input_tokens": 5, "output_tokens": 1},
        "content": [{"type": "hologram", "data": 1}, {"type": "text", "text": "hi"}]}})
    events = parse_claude_line(OutputLine("stdout", 1, text, len(text), False))
    assert [e["type"] for e in events] == ["unknown", "message"]
    assert all(e["parent_id"] == "toolu_parent" and e["message_id"] == "msg_1" for e in events)


# -- the command agent's jsonl mode ------------------------------------------------------------------


def command_agent(output: str = "jsonl") -> CommandAgent:
    spec = SimpleNamespace(output=output, env_from=(), env_file=None, prompt=None)
    return CommandAgent("cmd", spec)


def test_command_jsonl_keeps_unknown_types_verbatim() -> None:
    agent = command_agent()
    line = '{"type": "frobnicate", "payload": [1, 2]}'
    [event] = agent.parse(OutputLine("stdout", 1, line, len(line), False))
    assert event == {"type": "unknown", "raw": line, "reason": "type 'frobnicate'"}
    known = '{"type": "message", "text": "hello", "line_no": 99, "log": "evil"}'
    [event] = agent.parse(OutputLine("stdout", 2, known, len(known), False))
    assert event == {"type": "message", "text": "hello", "agent_line_no": 99, "agent_log": "evil"}
    [event] = agent.parse(OutputLine("stdout", 3, "not json", 8, False))
    assert event == {"type": "output", "stream": "stdout", "text": "not json"}
    usage = '{"type": "usage", "input": 10, "output": 5, "model": "m"}'
    [event] = agent.parse(OutputLine("stdout", 4, usage, len(usage), False))
    ledger = UsageLedger()
    ledger.observe(event)
    ledger.observe(event)  # deltas add up
    assert ledger.totals()["usage"] == Usage(input=20, output=10)


def test_command_text_mode_is_unchanged() -> None:
    [event] = command_agent("text").parse(OutputLine("stdout", 1, '{"type": "message"}', 19, False))
    assert event == {"type": "output", "stream": "stdout", "text": '{"type": "message"}'}
