"""Every event the real CLIs' recorded streams give (tests/fixtures/streams, through the agent
parsers) and every event the agent session writes reads as one line in the transcript view, never
as the event's raw JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from resenv.engine.agents.claude_code import parse_claude_line
from resenv.engine.agents.codex import parse_codex_line
from resenv.engine.agents.transcript import EVENT_TYPES
from resenv.engine.sandbox.base import OutputLine
from resenv.engine.sandbox.lines import LineSplitter
from resenv.engine.results.eventtext import format_event
from resenv.tui.data import TRANSCRIPT_KINDS

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
ALL = sorted(path.stem for path in STREAMS.glob("*.jsonl") if not path.stem.endswith(".rollout"))
RAW_JSON = re.compile(r"""\{\s*["'](type|category|subtype|name|message|model|status)["']\s*:""")


def events_of(name: str) -> list[dict]:
    splitter = LineSplitter(max_bytes=1 << 26)
    raw = splitter.feed((STREAMS / f"{name}.jsonl").read_bytes()) + splitter.flush()
    parse = parse_claude_line if name.startswith("claude") else parse_codex_line
    return [event for n, r in enumerate(raw, 1) for event in parse(OutputLine("stdout", n, r.text(), r.nbytes, r.truncated))]


def assert_readable(kind: str, event: dict) -> list[str]:
    lines = format_event(kind, event)
    assert lines and all(isinstance(line, str) and line.strip() for line in lines), (kind, event)
    first = lines[0]
    if not (kind == "transcript" and event.get("type") == "unknown"):
        assert not first.lstrip().startswith("? "), f"{kind}/{event.get('type')} renders as raw JSON: {first}"
        assert not RAW_JSON.search(first), f"{kind}/{event.get('type')} renders as raw JSON: {first}"
        assert "\n" not in first
    return lines


@pytest.mark.parametrize("name", ALL)
def test_every_event_of_the_recorded_streams_is_one_readable_line(name: str) -> None:
    seen = set()
    for event in events_of(name):
        assert_readable("transcript", event)
        seen.add(event["type"])
    assert seen <= EVENT_TYPES


def test_every_event_type_the_parsers_know_has_its_own_line() -> None:
    produced = {event["type"] for name in ALL for event in events_of(name)}
    assert produced == EVENT_TYPES - {"output"}  # the fixtures cover every type but stderr's plain lines
    assert assert_readable("transcript", {"type": "output", "stream": "stderr", "text": "warn: x"}) == ["  │ warn: x"]
    assert format_event("transcript", events_of("claude-setup")[0])[0].startswith(
        "● session · model claude-sonnet-4-5 · 26 tools · v2.1.332 · bypassPermissions · cwd /tmp/")
    assert format_event("transcript", events_of("codex-setup")[0])[0].startswith("● session · id ")
    assert re.fullmatch(r"■ agent done: success · 7 turns · \d+\.\ds · \$0\.026",
                        format_event("transcript", events_of("claude-setup")[-1])[0])
    claude_failure = [format_event("transcript", e)[0] for e in events_of("claude-auth-failure")]
    infra = " · infrastructure: not the agent's failure"
    assert ("! model API auth 401: Failed to authenticate. API Error: 401 authentication_error · fatal" + infra
            in claude_failure)
    assert "! model API auth 401: authentication_failed · will retry 1/2" + infra in claude_failure
    assert re.match(r"! agent ended: error \(api_error\) · 1 turn · \d+\.\ds · \$0\.00 · API status 401",
                    claude_failure[-1]), claude_failure[-1]
    max_turns = format_event("transcript", events_of("claude-max-turns")[-1])[0]
    assert re.fullmatch(r"! agent ended: error \(error_max_turns\) · 3 turns · \d+\.\ds · \$0\.014 · "
                        r"Reached maximum number of turns \(2\)", max_turns), max_turns
    setup = [format_event("transcript", e)[0] for e in events_of("claude-setup")]
    assert "  · task started: run a shell command (local_bash)" in setup and "  · thinking ~11 tokens" in setup
    assert "∑ usage (delta) · in 2,804 · cached 1,000 · out 95 · reasoning 64" in \
        [format_event("transcript", e)[0] for e in events_of("codex-legacy")]


SESSION_EVENTS = {  # what engine/agents/session.py and the lifecycle write beside the transcript
    "budget": [{"name": "budget:tokens", "limit": 1000, "used": 1500},
               {"name": "budget:run_dollars", "limit": 5.0, "used": 5.0, "when": "before start"},
               {"name": "budget:dollars", "limit": 0.01, "used": 0.026, "stopped": False, "when": "after completion"}],
    "warning": [{"message": "no price for model 'x' in defaults.prices", "model": "x"}],
    "redacted": [{"files": 1, "paths": ["/w/a"]}, {"files": 3, "paths": [], "when": "resume"}],
    "agent_hung": [{"grace_s": 30, "message": "the agent was still running 30 s after it reported completion; killed"}],
    "agent_stopped": [{"reason": "model_api", "status": 401,
                       "message": "the model API refused the key; retrying cannot help"}],
    "agent_version": [{"agent": "claude", "kind": "claude-code", "argv": ["claude", "--version"], "version": "2.1.332",
                       "returncode": 0, "error": None},
                      {"agent": "claude", "argv": ["claude", "--version"], "version": None, "error": "OSError: boom"}],
    "agent_prompt": [{"text": "Build an environment for the repo in {repo}.", "sha256": "ab" * 32, "source": "builtin",
                      "from": None}],
    "integrity": [{"summary": "1 edited", "bytecode_caches_moved": 0, "findings": [{"kind": "edited", "path": "a.py"}]}],
    "error": [{"category": "model_api", "status": 529, "message": "overloaded", "retry": True, "fatal": False},
              {"category": "model_api", "status": 401, "message": "invalid x-api-key", "retry": False, "fatal": True},
              {"category": "secrets", "message": "agent 'a': secrets missing: KEY"},
              {"phase": "teardown", "message": "OSError: gone"}],
    "usage": [{"scope": "attempt", "input": 10, "output": 5, "tokens": 15, "cost_usd": 0.003, "models": []}],
}


@pytest.mark.parametrize("kind", sorted(SESSION_EVENTS))
def test_the_sessions_own_events_read_as_lines(kind: str) -> None:
    for event in SESSION_EVENTS[kind]:
        assert_readable(kind, event)
    if kind != "usage":  # usage is flushed every half second: the jobs table shows it, not the transcript
        assert kind in TRANSCRIPT_KINDS


def test_session_event_lines() -> None:
    line = lambda kind, index=0: format_event(kind, SESSION_EVENTS[kind][index])[0]  # noqa: E731
    assert line("budget") == "! budget tokens: used 1,500 of 1,000 · the agent was stopped"
    assert line("budget", 1) == "! budget run_dollars: used $5.00 of $5.00 before the agent started: it did not start"
    assert line("error") == ("! error model_api 529: overloaded · will retry · infrastructure: not the agent's failure")
    assert line("error", 1) == ("! error model_api 401: invalid x-api-key · fatal · infrastructure: not the agent's "
                                "failure")
    assert line("error", 3) == "! error error (teardown): OSError: gone"
    assert line("redacted", 1) == "  redacted secrets from 3 files (on resume)"
    assert line("agent_version") == "  agent claude version 2.1.332"
    assert line("agent_version", 1) == "⚠ agent claude version unknown: OSError: boom"
    assert line("usage") == "∑ usage (attempt) · in 10 · out 5 · 15 tokens · $0.0030"


def test_unknown_shapes_still_show_compactly() -> None:
    assert format_event("transcript", {"type": "unknown", "raw": '{"a": 1}', "reason": "why"}) == ['  ? (why) {"a": 1}']
    assert format_event("transcript", {"type": "brand_new", "answer": 42, "nested": {"x": 1}}) == ["  brand_new: answer 42"]
    assert format_event("brand_new_kind", {"what": "x"}) == ["  brand_new_kind: what x"]
    assert json.loads(format_event("transcript", {"type": "brand_new", "raw": '{"b": 2}'})[0][4:]) == {"b": 2}
