"""The baseline agent's command runner: events per command, budget cut-offs, and killing a
command's whole tree on timeout."""

from __future__ import annotations

import io
import json
import os
import time

from resenv.engine.agents.baseline_kit.runner import Events, Runner


def runner(budget_s=None, reserve_s=None):
    stream = io.StringIO()
    return Runner(Events(stream), budget_s, reserve_s), stream


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_command_events_with_output_and_exit_code():
    run, stream = runner()
    result = run.run("demo", ["sh", "-c", "echo one; echo two >&2; exit 3"])
    assert result.exit_code == 3 and not result.ok and not result.timed_out
    got = events(stream)
    assert [e["type"] for e in got] == ["tool_call", "output", "output", "tool_result"]
    assert got[0]["command"] == ["sh", "-c", "echo one; echo two >&2; exit 3"] and got[0]["step"] == "demo"
    assert {e["text"] for e in got[1:3]} == {"one", "two"}
    assert got[3]["exit_code"] == 3 and "one" in got[3]["output_tail"] and got[3]["id"] == got[0]["id"]


def test_unstartable_command_is_a_result():
    run, stream = runner()
    result = run.run("demo", ["/nonexistent/binary"])
    assert result.exit_code is None and "cannot start" in result.output
    assert events(stream)[-1]["type"] == "tool_result"


def test_quiet_command_streams_nothing_and_shows_display():
    run, stream = runner()
    run.run("scan", ["sh", "-c", "echo '{\"a\": 1}'"], display=["python", "<probe>"], quiet=True)
    got = events(stream)
    assert [e["type"] for e in got] == ["tool_call", "tool_result"]
    assert got[0]["command"] == ["python", "<probe>"]


def test_install_step_skipped_when_the_reserve_is_reached():
    run, stream = runner(budget_s=20, reserve_s=18)
    result = run.run("install:requirements", ["sh", "-c", "echo never"], install=True)
    assert result.skipped and not result.ok
    got = events(stream)
    assert [e["type"] for e in got] == ["error"] and got[0]["category"] == "budget"
    # a measurement step (not an install) may still use the reserve
    assert run.run("verify", ["true"]).ok


def test_timeout_kills_the_command_and_its_children(tmp_path):
    run, stream = runner()
    marker = tmp_path / "child.pid"
    started = time.monotonic()
    result = run.run("demo", ["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"], timeout=1.0)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 15
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        raise AssertionError("the grandchild survived the timeout")
    assert events(stream)[-1]["timed_out"] is True
