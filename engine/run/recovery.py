"""Replay the raw logs of an interrupted attempt so the store has what the attempt would have kept.

Raw bytes reach the log file before their event is queued, so after a crash the file can hold lines
the DB never got. Lines are numbered per stream; whatever is past the highest stored number goes
again, with the same splitting rules, through the attempt's output budget (what is left of its head,
then each stream's tail and a count of the lines left out: engine/output.py), so nothing the attempt
would have stored is lost, nothing is stored twice, and a flood in a raw log costs no more than it
did live. Logs are read in blocks, a line at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..agents.transcript import unknown
from ..attempt import EventSink
from .lifecycle import log_kind
from ..output import HEAD_BYTES, TAIL_BYTES, OutputBudget, iter_lines

STREAMS = ("stdout", "stderr")


def replay_attempt_logs(
    logs_dir: Path, attempt_id: int, log_names: set[str], stored: dict[tuple[int, str, str], int],
    sink: EventSink, adapter: Any, budget: OutputBudget | None = None,
) -> int:
    """Emit the lines of the attempt's raw logs past what the store has; returns how many were added.

    `log_names` are the logs the attempt's `command` events announced: a tier re-run shares its
    logs folder with the attempt whose state it probes, and must not claim that attempt's lines.
    `budget`: the attempt's output budget as far as it was spent (default: a whole one).
    """
    if not logs_dir.is_dir():
        return 0
    budget = budget if budget is not None else OutputBudget(sink, HEAD_BYTES, TAIL_BYTES)
    added = 0
    for path in sorted(logs_dir.iterdir()):
        if path.suffix.lstrip(".") not in STREAMS or path.stem not in log_names:
            continue
        log_name, stream = path.stem, path.suffix.lstrip(".")
        kind = log_kind(log_name)
        done = stored.get((attempt_id, log_name, stream)) or 0
        parse = (lambda line: _parsed(adapter, line)) if kind == "transcript" and adapter is not None else None
        gate = budget.command(log_name, kind, {"replayed": True})
        for line in iter_lines(path):
            if line.line_no <= done:
                continue
            gate.line(line, parse(line) if parse is not None else None)
            added += 1
        gate.finish()
        added -= gate.omitted_lines
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
