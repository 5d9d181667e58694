"""Replay the raw logs of an interrupted attempt so the store has every line it printed.

Raw bytes reach the log file before their event is queued, so after a crash the file can hold lines
the DB never got. Lines are numbered per stream; whatever is past the highest stored number is
emitted again with the same splitting rules, so nothing is lost and nothing is stored twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .agents.transcript import unknown
from .lifecycle import EventSink, log_kind
from .sandbox.base import OutputLine
from .sandbox.lines import LineSplitter

STREAMS = ("stdout", "stderr")


def read_lines(path: Path) -> list[OutputLine]:
    """Split a raw log exactly as the sandbox did while it streamed."""
    splitter = LineSplitter()
    stream = path.suffix.lstrip(".")
    raw = []
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            raw.extend(splitter.feed(chunk))
    raw.extend(splitter.flush())
    return [
        OutputLine(stream=stream, line_no=number, text=line.text(), nbytes=line.nbytes, truncated=line.truncated)
        for number, line in enumerate(raw, start=1)
    ]


def replay_attempt_logs(
    logs_dir: Path, attempt_id: int, log_names: set[str], stored: dict[tuple[int, str, str], int],
    sink: EventSink, adapter: Any,
) -> int:
    """Emit the lines of the attempt's raw logs past what the store has; returns how many were added.

    `log_names` are the logs the attempt's `command` events announced: a tier re-run shares its
    logs folder with the attempt whose state it probes, and must not claim that attempt's lines.
    """
    if not logs_dir.is_dir():
        return 0
    added = 0
    for path in sorted(logs_dir.iterdir()):
        if path.suffix.lstrip(".") not in STREAMS or path.stem not in log_names:
            continue
        log_name, stream = path.stem, path.suffix.lstrip(".")
        kind = log_kind(log_name)
        done = stored.get((attempt_id, log_name, stream)) or 0
        for line in read_lines(path)[done:]:
            base = {"log": log_name, "stream": stream, "line_no": line.line_no, "replayed": True}
            if kind == "transcript" and adapter is not None:
                for event in _parsed(adapter, line):
                    sink.emit(kind, {**base, **event})
            else:
                sink.emit(kind, {**base, "text": line.text, "nbytes": line.nbytes, "truncated": line.truncated})
            added += 1
    return added


def _parsed(adapter: Any, line: OutputLine) -> list[dict[str, Any]]:
    """The adapter's events for a replayed line; what the agent printed is hostile, so a parser that
    raises, or answers with something other than a list of objects, keeps the line as `unknown`
    (as the live session does) and the resume goes on."""
    try:
        events = adapter.parse(line)
        if isinstance(events, list) and all(isinstance(event, dict) for event in events):
            return events
        problem = f"parser answered {type(events).__name__}"
    except Exception as error:  # noqa: BLE001 - one bad line must not stop a resume
        problem = f"parser error: {type(error).__name__}: {error}"
    return [unknown(line.text, problem)]
