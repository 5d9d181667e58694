"""Bounded output: what of a job's command output becomes events, and capped reads of raw logs.

Every byte a command prints goes to its raw log file (the sandbox writes it before anything else).
Lines become events in the store only as far as the attempt's **output budget** allows
(`defaults.output` in benchmark.yaml; `OutputBudget`):

* **head**: lines become events as they come, live, until the attempt has stored ``head_bytes`` of
  them over all its commands (the stored size of an event: its JSON plus `ROW_OVERHEAD`, what a row
  and its index entries take beyond the JSON);
* **tail**: after that each stream of each command keeps its last ``tail_bytes`` of lines in memory
  (as the events they will be) and stores them when the command ends;
* lines an agent's parser makes no event of (an API's streaming deltas, whose content the agent's
  next lines repeat whole) are only in the raw log, counted in one ``omitted`` event per stream
  when the command ends;
* everything in between is **only in the raw log**: an ``omitted`` event per stream says how many
  lines and bytes (and which line numbers) were left out. While a flood goes on a progress count
  (``final: false``) is stored at most every `PROGRESS_S`; the ``final: true`` one comes when the
  command ends, just before its tail. `resenv show` and the dashboard say
  "… 12,345 lines (13.0 MB) only in the raw log".

An agent's transcript is parsed line by line whatever the budget (usage, tokens, cost, token and
dollar budgets and completion come from every line, see ``agents/session.py``): the budget limits
what is stored, never what is parsed. A parsed event's strings longer than `EVENT_STRING_CAP` are cut
and an event stays under about `EVENT_MAX` of JSON (adapters cap their fields already; this is the net
under them).

**Back-pressure: load shedding, not a paused pump.** The store writer's queue has a byte bound
(``StoreWriter.busy``). While the writer is over it, lines are held back in the same per-stream tail
buffers instead of becoming events (and stored in order once it has caught up), so what a busy store
costs is at most those buffers; what overflows them is counted as omitted like any other line left
out. Control and state writes (phases, attempts, tier results, usage, controls, counters) are never
held back or dropped. The sandbox's pump never stops reading a pipe, so the agent is never blocked
and no waiting is charged to (or has to be taken off) its timeout, on any sandbox kind: pausing the
pump would stall the agent in its ``write``, that stall would have to be subtracted from every exec's
clock on process, SSH, docker and Slurm sandboxes alike (a Slurm job writes its log on a shared file
system that no pump can pause at all), and the raw log that classification, resume and the raw-log
tab read would lag behind the process. With the budget a flood costs the engine a line split and a
counter per line, so reading keeps up with the pipe, and nothing an agent prints can grow the queue
beyond (jobs running) × (head + tails).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .agents.transcript import TEXT_CAP, cap_fields
from .sandbox.base import OutputLine
from .sandbox.lines import LineSplitter
from .store.db import dumps

HEAD_BYTES = 4 * 2**20
"""Default bytes of an attempt's output lines stored as they come (`defaults.output.head_bytes`)."""
TAIL_BYTES = 256 * 2**10
"""Default bytes of the last lines of each command's stream stored when it ends (`tail_bytes`)."""
ROW_OVERHEAD = 128
"""What one event costs in the DB beyond its JSON: the row (run id, kind, ids, time) and its index
entries; counted so that a flood of one-byte lines is charged what it really costs."""
PROGRESS_S = 10.0
EVENT_STRING_CAP = 2 * TEXT_CAP
EVENT_MAX = 64 * 1024
OUTPUT_KINDS = ("output", "transcript")


def event_cost(payload_chars: int) -> int:
    return payload_chars + ROW_OVERHEAD


def limits_of(bench: Any) -> tuple[int, int]:
    """(head_bytes, tail_bytes) from a benchmark's ``defaults.output`` (the defaults when absent)."""
    spec = getattr(getattr(bench, "defaults", None), "output", None)
    return (int(getattr(spec, "head_bytes", HEAD_BYTES)), int(getattr(spec, "tail_bytes", TAIL_BYTES)))


class OutputBudget:
    """The output budget of one attempt; `command()` gives each command its gate."""

    def __init__(self, sink: Any, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> None:
        self.sink = sink  # lifecycle.EventSink: emit(kind, data) -> queued JSON size (or None)
        self.head_left = head_bytes
        self.tail_bytes = tail_bytes
        self.stored = 0  # bytes of line events stored (head and tails)
        self.omitted_lines = 0
        self.omitted_bytes = 0

    @property
    def open(self) -> bool:
        """Whether a line may become an event now: head left, and a store that keeps up."""
        return self.head_left > 0 and not getattr(self.sink.writer, "busy", False)

    def command(self, log: str, kind: str, extra: dict[str, Any] | None = None) -> CommandOutput:
        return CommandOutput(self, log, kind, extra)

    def emit(self, kind: str, data: dict[str, Any], head: bool) -> None:
        size = self.sink.emit(kind, data)
        cost = event_cost(size if isinstance(size, int) else len(dumps(data)))
        self.stored += cost
        if head:
            self.head_left -= cost


class CommandOutput:
    """The gate between one command's ``on_line`` and the store (see the module docstring).

    Call `line` for every line, in order, with the events it was parsed into (None: a plain line,
    stored as ``text``/``nbytes``/``truncated``), then `finish` once when the command ended."""

    def __init__(self, budget: OutputBudget, log: str, kind: str, extra: dict[str, Any] | None = None) -> None:
        self.budget = budget
        self.log = log
        self.kind = kind
        self.extra = extra or {}
        self.streams: dict[str, _StreamGate] = {}
        self.finished = False

    def line(self, line: OutputLine, events: list[dict[str, Any]] | None = None) -> None:
        gate = self.streams.get(line.stream)
        if gate is None:
            gate = self.streams[line.stream] = _StreamGate(self, line.stream)
        gate.offer(line, events)

    def finish(self) -> None:
        """The command ended: store each stream's final count of omitted lines, then its tail."""
        if self.finished:
            return
        self.finished = True
        for gate in self.streams.values():
            gate.finish()

    @property
    def omitted_lines(self) -> int:
        return sum(gate.lines for gate in self.streams.values())

    # -- storing ------------------------------------------------------------------------------
    def store(self, line: OutputLine, events: list[dict[str, Any]] | None, head: bool) -> None:
        base = {"log": self.log, "stream": line.stream, "line_no": line.line_no, **self.extra}
        if events is None:
            self.budget.emit(self.kind, {**base, "text": line.text, "nbytes": line.nbytes,
                                         "truncated": line.truncated}, head)
            return
        for event in events:
            self.budget.emit(self.kind, {**base, **_bounded(event)}, head)

    def cost(self, line: OutputLine, events: list[dict[str, Any]] | None) -> int:
        """What storing the line would cost: its events' JSON as the store will encode it (counted
        without encoding where that is exact: this runs for every line of a flood)."""
        fixed = len(self.log) + 64 + ROW_OVERHEAD
        if events is None:
            return fixed + _json_size(line.text)
        return sum(fixed + _json_size(event) for event in events)


class _StreamGate:
    """One stream of one command: head, held-back tail, and what was left out between them."""

    def __init__(self, owner: CommandOutput, stream: str) -> None:
        self.owner = owner
        self.stream = stream
        self.ring: deque[tuple[OutputLine, list[dict[str, Any]] | None, int]] = deque()
        self.ring_bytes = 0
        self.lines = 0  # left out: only in the raw log
        self.bytes = 0
        self.first: int | None = None
        self.last: int | None = None
        self.busy_lines = 0  # of those, left out because the store was behind (not the budget)
        self.next_progress = time.monotonic() + PROGRESS_S
        self.quiet_lines = 0  # lines the parser made no event of (an API stream's deltas): raw log only
        self.quiet_bytes = 0

    def offer(self, line: OutputLine, events: list[dict[str, Any]] | None) -> None:
        owner, budget = self.owner, self.owner.budget
        if events is not None and not events:
            self.quiet_lines += 1
            self.quiet_bytes += line.nbytes + 1
            return
        if not self.ring and budget.open:
            owner.store(line, events, head=True)
            return
        cost = owner.cost(line, events)
        self.ring.append((line, events, cost))
        self.ring_bytes += cost
        while self.ring and budget.open:  # the store caught up: what was held back goes first
            held, held_events, held_cost = self.ring.popleft()
            self.ring_bytes -= held_cost
            owner.store(held, held_events, head=True)
        limit = budget.tail_bytes
        while self.ring_bytes > limit and self.ring:
            dropped, _, dropped_cost = self.ring.popleft()
            self.ring_bytes -= dropped_cost
            self._omit(dropped, budget)

    def _omit(self, line: OutputLine, budget: OutputBudget) -> None:
        self.lines += 1
        self.bytes += line.nbytes + 1
        if self.first is None:
            self.first = line.line_no
        self.last = line.line_no
        if budget.head_left > 0:
            self.busy_lines += 1
        if (now := time.monotonic()) >= self.next_progress:
            self.next_progress = now + PROGRESS_S
            self._count(final=False)

    def _count(self, final: bool) -> None:
        data = {"log": self.owner.log, "stream": self.stream, "lines": self.lines, "bytes": self.bytes,
                "first_line_no": self.first, "last_line_no": self.last, "final": final,
                "reason": "store busy" if self.busy_lines == self.lines else "output budget"}
        if self.busy_lines and self.busy_lines != self.lines:
            data["store_busy_lines"] = self.busy_lines
        self.owner.budget.sink.emit("omitted", data | self.owner.extra)

    def finish(self) -> None:
        budget = self.owner.budget
        if self.quiet_lines:
            self.owner.budget.sink.emit("omitted", {
                "log": self.owner.log, "stream": self.stream, "lines": self.quiet_lines, "bytes": self.quiet_bytes,
                "final": True, "reason": "no event: the parser keeps such lines (streaming deltas) in the raw log only",
            } | self.owner.extra)
        if self.lines:
            self._count(final=True)
            budget.omitted_lines += self.lines
            budget.omitted_bytes += self.bytes
        while self.ring:
            line, events, _ = self.ring.popleft()
            self.owner.store(line, events, head=False)
        self.ring_bytes = 0


def _json_size(value: Any) -> int:
    """len(dumps(value)) for the flat values events are made of, computed without encoding; anything
    else (nested values, strings with characters JSON escapes) is encoded."""
    if isinstance(value, str):
        return len(value) + 2 if value.isprintable() and '"' not in value and "\\" not in value else len(dumps(value))
    if isinstance(value, dict):
        size = 2 + 2 * len(value) - (1 if value else 0)  # braces, colons and commas
        for key, item in value.items():
            size += _json_size(key) + _json_size(item)
        return size
    if value is None or isinstance(value, bool):
        return 4 if value is not False else 5
    if isinstance(value, int):
        return len(str(value))
    return len(dumps(value))


def _bounded(event: dict[str, Any]) -> dict[str, Any]:
    """A parsed event as it may be stored: at most about `EVENT_MAX` of JSON. Adapters cap their
    fields; this is the net under them (long strings cut, large nested values replaced by their capped
    JSON, and an event still too large kept as its capped JSON text)."""
    event = _capped(event)
    size = _json_size(event)
    if size <= EVENT_MAX:
        return event
    event = cap_fields(event)
    if _json_size(event) <= EVENT_MAX:
        return event
    return {"type": "unknown", "raw": dumps(event)[:TEXT_CAP], "raw_chars": size, "reason": "event too large"}


def _capped(event: dict[str, Any]) -> dict[str, Any]:
    """The event, with top-level strings longer than `EVENT_STRING_CAP` cut to `TEXT_CAP` (and
    ``<key>_chars`` saying how long they were)."""
    for value in event.values():
        if isinstance(value, str) and len(value) > EVENT_STRING_CAP:
            break
    else:
        return event
    out: dict[str, Any] = {}
    for key, value in event.items():
        if isinstance(value, str) and len(value) > EVENT_STRING_CAP:
            out[key] = value[:TEXT_CAP]
            out[f"{key}_chars"] = len(value)
        else:
            out[key] = value
    return out


# -- replay -----------------------------------------------------------------------------------------

def iter_lines(path: Path) -> Iterator[OutputLine]:
    """The lines of a raw log, split exactly as the sandbox split them while it streamed; read in
    blocks, one line at a time (a raw log can be far bigger than memory)."""
    splitter = LineSplitter()
    stream = path.suffix.lstrip(".")
    number = 0
    with path.open("rb") as handle:
        while chunk := handle.read(64 * 1024):  # a chunk's lines are held at once: keep it small
            for raw in splitter.feed(chunk):
                number += 1
                yield OutputLine(stream, number, raw.text(), raw.nbytes, raw.truncated)
    for raw in splitter.flush():
        number += 1
        yield OutputLine(stream, number, raw.text(), raw.nbytes, raw.truncated)
