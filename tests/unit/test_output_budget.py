"""The output budget (engine/output.py): what of a command's lines becomes events, with small budgets."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from resenv.engine.output import ROW_OVERHEAD, OutputBudget, iter_lines
from resenv.engine.run.recovery import replay_attempt_logs
from resenv.engine.sandbox.base import OutputLine
from resenv.engine.store.db import dumps


class Writer:
    """Stands in for the store writer: keeps what it is given, can say it is behind."""

    def __init__(self) -> None:
        self.busy = False


class Sink:
    """Stands in for lifecycle.EventSink: numbers events and returns their JSON size."""

    def __init__(self) -> None:
        self.writer = Writer()
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, data: dict[str, Any]) -> int:
        self.events.append((kind, data))
        return len(dumps(data))

    def lines(self, stream: str = "stdout") -> list[dict[str, Any]]:
        return [d for k, d in self.events if k in ("output", "transcript") and d["stream"] == stream]

    def omitted(self, final: bool = True) -> list[dict[str, Any]]:
        return [d for k, d in self.events if k == "omitted" and d["final"] is final]


def line(number: int, text: str = "x", stream: str = "stdout", nbytes: int | None = None) -> OutputLine:
    size = len(text.encode()) if nbytes is None else nbytes
    return OutputLine(stream, number, text, size, size > len(text.encode()))


def stored_cost(sink: Sink) -> int:
    return sum(len(dumps(d)) + ROW_OVERHEAD for k, d in sink.events if k in ("output", "transcript"))


def test_small_output_is_stored_whole_and_live() -> None:
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=10_000, tail_bytes=2_000).command("probe-1", "output")
    for number in range(1, 6):
        gate.line(line(number, f"line {number}"))
        assert len(sink.lines()) == number  # stored as it comes, not when the command ends
    gate.finish()
    assert [d["text"] for d in sink.lines()] == [f"line {n}" for n in range(1, 6)]
    assert sink.lines()[0] == {"log": "probe-1", "stream": "stdout", "line_no": 1, "text": "line 1", "nbytes": 6,
                               "truncated": False}
    assert not sink.omitted()


def test_a_flood_keeps_a_head_a_tail_and_counts_what_is_between() -> None:
    sink = Sink()
    budget = OutputBudget(sink, head_bytes=4_000, tail_bytes=1_000)
    gate = budget.command("agent", "transcript")
    total = 50_000
    for number in range(1, total + 1):
        gate.line(line(number, "x"))
    assert len(sink.lines()) < 40  # the head only, while the command runs
    gate.finish()
    numbers = [d["line_no"] for d in sink.lines()]
    head = [n for i, n in enumerate(numbers) if n == i + 1]
    tail = numbers[len(head):]
    assert tail == list(range(total - len(tail) + 1, total + 1)) and len(tail) > 2
    [counter] = sink.omitted()
    assert counter == {"log": "agent", "stream": "stdout", "lines": total - len(numbers), "bytes": 2 * (total - len(numbers)),
                       "first_line_no": len(head) + 1, "last_line_no": tail[0] - 1, "final": True,
                       "reason": "output budget"}
    # the counter comes before the tail it precedes
    kinds = [k for k, _ in sink.events]
    assert kinds.index("omitted") == len(head)
    assert stored_cost(sink) <= 4_000 + 1_000 + 300
    assert budget.omitted_lines == counter["lines"]


def test_the_head_is_per_attempt_and_the_tail_per_command_and_stream() -> None:
    sink = Sink()
    budget = OutputBudget(sink, head_bytes=3_000, tail_bytes=1_000)
    agent = budget.command("agent", "transcript")
    for number in range(1, 1001):
        agent.line(line(number, "agent says"))
        agent.line(line(number, "agent warns", stream="stderr"))
    agent.finish()
    # the next command finds the head spent: its short output is stored whole, at its end
    probe = budget.command("probe-2", "output")
    for number in range(1, 4):
        probe.line(line(number, f"probe {number}"))
    assert not [d for _, d in sink.events if d.get("log") == "probe-2"]
    probe.finish()
    assert [d["text"] for _, d in sink.events if d.get("log") == "probe-2"] == ["probe 1", "probe 2", "probe 3"]
    counters = {d["stream"]: d for d in sink.omitted()}
    assert set(counters) == {"stdout", "stderr"}  # each stream its own tail and count
    agent_lines = [d for d in sink.lines("stdout") + sink.lines("stderr") if d["log"] == "agent"]
    assert {d["stream"] for d in agent_lines if d["line_no"] == 1000} == {"stdout", "stderr"}


def test_parsed_events_are_stored_within_the_budget_and_every_line_is_parsed() -> None:
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=2_000, tail_bytes=500).command("agent", "transcript")
    parsed = 0
    for number in range(1, 2001):
        parsed += 1
        gate.line(line(number, "{}"), [{"type": "usage", "input": 10, "output": 1}])
    gate.finish()
    assert parsed == 2000
    stored = sink.lines()
    assert stored[0] == {"log": "agent", "stream": "stdout", "line_no": 1, "type": "usage", "input": 10, "output": 1}
    assert len(stored) < 60 and sink.omitted()[0]["lines"] == 2000 - len(stored)


def test_an_event_with_a_huge_string_is_cut() -> None:
    sink = Sink()
    gate = OutputBudget(sink).command("agent", "transcript")
    gate.line(line(1, "x" * 100, nbytes=50_000_000), [{"type": "output", "text": "y" * 10_000_000}])
    gate.finish()
    [event] = sink.lines()
    assert len(event["text"]) == 16_384 and event["text_chars"] == 10_000_000


def test_lines_wait_while_the_store_is_busy_and_go_in_order_once_it_caught_up() -> None:
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=100_000, tail_bytes=1_000).command("agent", "transcript")
    gate.line(line(1, "before"))
    sink.writer.busy = True
    for number in range(2, 6):
        gate.line(line(number, f"held {number}"))
    assert [d["line_no"] for d in sink.lines()] == [1]
    sink.writer.busy = False
    gate.line(line(6, "after"))
    assert [d["line_no"] for d in sink.lines()] == [1, 2, 3, 4, 5, 6]
    gate.finish()
    assert not sink.omitted()


def test_what_a_busy_store_cannot_hold_is_counted_as_left_for_that_reason() -> None:
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=100_000, tail_bytes=1_000).command("agent", "transcript")
    sink.writer.busy = True
    for number in range(1, 1001):
        gate.line(line(number, "x"))
    gate.finish()
    [counter] = sink.omitted()
    assert counter["reason"] == "store busy" and counter["lines"] + len(sink.lines()) == 1000
    assert sink.lines()[-1]["line_no"] == 1000


def test_progress_counts_while_a_flood_goes_on(monkeypatch) -> None:
    from resenv.engine import output

    now = [1000.0]
    monkeypatch.setattr(output.time, "monotonic", lambda: now[0])
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=500, tail_bytes=500).command("agent", "transcript")
    for number in range(1, 3001):
        if number % 1000 == 0:
            now[0] += output.PROGRESS_S
        gate.line(line(number, "x"))
    progress = sink.omitted(final=False)
    assert len(progress) == 3 and progress[0]["lines"] < progress[1]["lines"] < progress[2]["lines"]
    gate.finish()
    assert sink.omitted()[0]["lines"] >= progress[-1]["lines"]


def test_a_zero_budget_stores_nothing_but_the_counts() -> None:
    sink = Sink()
    gate = OutputBudget(sink, head_bytes=0, tail_bytes=0).command("agent", "transcript")
    for number in range(1, 11):
        gate.line(line(number, "x"))
    gate.finish()
    assert sink.lines() == [] and sink.omitted()[0]["lines"] == 10


def write_log(path: Path, count: int) -> None:
    with path.open("wb") as handle:
        for start in range(0, count, 100_000):
            handle.write(b"".join(b"line %d\n" % n for n in range(start + 1, min(count, start + 100_000) + 1)))


def test_iter_lines_splits_like_the_sandbox(tmp_path: Path) -> None:
    log = tmp_path / "probe-1.stderr"
    log.write_bytes(b"a\r\nb 10%\rb 20%\nno end")
    assert [(ln.stream, ln.line_no, ln.text, ln.nbytes) for ln in iter_lines(log)] == [
        ("stderr", 1, "a", 1), ("stderr", 2, "b 20%", 11), ("stderr", 3, "no end", 6)]


def test_a_replayed_flood_is_bounded_and_read_a_line_at_a_time(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    total = 100_000
    write_log(logs / "agent.stdout", total)
    sink = Sink()
    budget = OutputBudget(sink, head_bytes=20_000, tail_bytes=2_000)
    tracemalloc.start()
    try:
        added = replay_attempt_logs(logs, 7, {"agent"}, {(7, "agent", "stdout"): 10}, sink, None, budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20
    stored = sink.lines()
    assert added == len(stored) and stored[0]["line_no"] == 11 and stored[0]["replayed"] is True
    assert stored[-1]["line_no"] == total and stored[-1]["text"] == f"line {total}"
    [counter] = sink.omitted()
    assert counter["lines"] == total - 10 - len(stored) and counter["replayed"] is True
    assert stored_cost(sink) <= 20_000 + 2_000 + 500


def test_a_replay_continues_a_spent_budget(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_log(logs / "agent.stdout", 100)
    sink = Sink()
    added = replay_attempt_logs(logs, 7, {"agent"}, {}, sink, None, OutputBudget(sink, head_bytes=-5, tail_bytes=100_000))
    assert added == 100 and not sink.omitted()  # what fits in the tail is all stored, at the end


def test_store_events_keep_their_json_shape() -> None:
    sink = Sink()
    gate = OutputBudget(sink).command("agent", "transcript", {"replayed": True})
    gate.line(line(1, "a"), [{"type": "message", "text": "hi", "log": "agent"}])
    gate.finish()
    assert json.loads(dumps(sink.lines()[0])) == {"log": "agent", "stream": "stdout", "line_no": 1, "replayed": True,
                                                   "type": "message", "text": "hi"}


def test_the_cost_of_a_held_back_line_is_its_json_size() -> None:
    from resenv.engine.output import _json_size

    for value in ["x", "", 'a"b', "a\\b", "tab\there", "\x00\x01", "ünïcödé", "日本", "\u2028", "\ud800", 10**30,
                  {"type": "output", "stream": "stdout", "text": "x"}, {}, {"a": {}},
                  {"a": None, "b": True, "c": False, "d": 12, "e": -3, "f": 1.5, "g": [1, 2, {"h": "i"}]}]:
        assert _json_size(value) == len(dumps(value)), value


def test_an_event_with_huge_nested_values_is_bounded() -> None:
    sink = Sink()
    gate = OutputBudget(sink).command("agent", "transcript")
    nested = {"type": "tool_call", "input": {"files": ["z" * 1000] * 5000}}
    many = {"type": "status", **{f"k{i}": "w" * 16_000 for i in range(20)}}
    gate.line(line(1, "{}"), [nested])
    gate.line(line(2, "{}"), [many])
    gate.finish()
    first, second = sink.lines()
    assert len(dumps(first)) < 70_000 and first["type"] == "tool_call" and isinstance(first["input"], str)
    assert len(dumps(second)) < 70_000 and second["type"] == "unknown" and second["raw_chars"] > 300_000
