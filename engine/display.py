"""How `resenv run` shows progress: a live bar on a terminal, plain lines elsewhere, or nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .lifecycle import AttemptOutcome
from .wording import counted

STATE_STYLE = {"done": "green", "error": "yellow", "cancelled": "dim"}


def outcome_text(outcome: AttemptOutcome) -> str:
    text = outcome.state
    if outcome.category:
        text += f"/{outcome.category}"
    if outcome.reason:
        text += f" ({outcome.reason})"
    return text


class PlainDisplay:
    """One line per finished job; on a TTY also a live progress bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stdout, highlight=False)
        self.progress: Progress | None = None
        self.task_id: Any = None

    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None:
        self.console.print(f"run {run_id}: {counted(total, 'job')}")
        self.console.print(f"  db:   {db}")
        self.console.print(f"  data: {data_dir}")
        if self.console.is_terminal:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=self.console, transient=True,
            )
            self.progress.start()
            self.task_id = self.progress.add_task(run_id, total=total)

    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None:
        style = STATE_STYLE.get(outcome.state, "")
        attempt = f" attempt {job['attempts']}" if job["attempts"] > 1 else ""
        self.console.print(f"[{style}]{job['key']}{attempt}: {outcome_text(outcome)}[/]" if style
                           else f"{job['key']}{attempt}: {outcome_text(outcome)}")
        if self.progress is not None:
            self.progress.advance(self.task_id)

    def message(self, text: str) -> None:
        self.console.print(text)

    def finished(self, state: str) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.console.print(f"run {state}")


class NoDisplay:
    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None: ...
    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None: ...
    def message(self, text: str) -> None: ...
    def finished(self, state: str) -> None: ...
