"""`resenv run --display tui`: the engine in a background thread with its own asyncio loop, the
dashboard in the main thread; they share nothing but the store (and a stop request)."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.wording import counted

if TYPE_CHECKING:
    from ..engine.attempt import AttemptOutcome


class QueueDisplay:
    """The engine's Display for the dashboard: messages are queued for the UI to show as notices."""

    def __init__(self) -> None:
        self.messages: deque[tuple[str, str]] = deque()
        self.state: str | None = None

    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None:
        self.messages.append(("information", f"engine started: {counted(total, 'job')} · db {db} · data {data_dir}"))

    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None:
        """The dashboard sees every job through the store; nothing to do here."""

    def message(self, text: str) -> None:
        self.messages.append(("warning", text))

    def finished(self, state: str) -> None:
        self.state = state


class EngineThread(threading.Thread):
    """Runs `Engine.execute()` in its own event loop; `stop()` is the dashboard's Ctrl-C."""

    def __init__(self, db_path: Path, run_id: str, *, jobs_limit: int | None = None) -> None:
        from ..engine.run.scheduler import Engine  # only `resenv run --display tui` needs the engine

        super().__init__(name="resenv-engine", daemon=False)
        self.run_id = run_id
        self.display = QueueDisplay()
        self.engine = Engine(db_path, run_id, self.display, jobs_limit=jobs_limit, install_signals=False)
        self.state: str | None = None
        self.error: BaseException | None = None
        self.stop_requested = False

    def run(self) -> None:
        try:
            self.state = asyncio.run(self.engine.execute())
        except BaseException as error:  # reported by the dashboard and re-raised by the CLI
            self.error = error

    def stop(self) -> None:
        self.stop_requested = True
        self.engine.request_stop()
