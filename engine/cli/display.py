"""How `resenv run` shows progress: plain lines (and a live bar on a terminal), or nothing.

The plain display tails the store rather than being called from inside the engine. Every phase
change, tier verdict, attempt end and output line is already an event the engine records, in the
order it happens, with secrets redacted (engine/run/lifecycle.py `EventSink`); reading those back is one
small reader here instead of display calls threaded through the scheduler, the attempt lifecycle
and the tier runner, and what it prints is exactly what the store holds — what `resenv show` and
the dashboard will read later, never something the store did not get. The price is a lag of at most
`POLL_S`, which a person watching a run does not notice. The heartbeat's "last output line" is the
latest stored output event for the same reason: a raw log may still hold a secret (a Slurm job's is
redacted only after its command ends), an event never does.

Off a terminal it prints plain lines only, no control codes; on one, a progress bar (jobs finished
of all, jobs running now) stays under the lines. When the run ends it prints the closing summary
(engine/results/summary.py), interrupted or cancelled runs included.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..results.eventtext import format_event
from ..attempt import AttemptOutcome
from ..outcomes import state_text
from ..store.db import StoreError, connect
from ..results.summary import summary_lines
from ..results.views import GLYPHS, tier_glyphs, tier_log, tier_reason
from ..wording import counted, duration, fold

POLL_S = 0.5
"""How often the display reads what the engine has committed."""
HEARTBEAT_S = 30.0
"""A phase of a job that printed no line for this long gets a heartbeat line (`RESENV_HEARTBEAT_S`)."""
STATE_STYLE = {"done": "green", "error": "yellow", "cancelled": "dim"}
FINISHED = {"done", "error", "cancelled"}


class PipeSafeConsole(Console):
    """A console that goes quiet when its reader goes away (`resenv run | head -3`).

    Rich's default answer to a broken pipe is `SystemExit(1)` from whichever thread printed, which
    would stop the engine mid-run and leave it `interrupted`. A display must never end the benchmark
    it shows: this one stops printing and points every standard stream that writes into the same
    broken pipe at the null device (what Python's notes on SIGPIPE advise), so that later writes,
    click's included, and the interpreter's last flush go nowhere instead of raising, and the run
    finishes and exits with its own status."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        broken = _identity(self.file)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for stream in {id(s): s for s in (self.file, sys.stdout, sys.stderr) if s is not None}.values():
                if broken is not None and _identity(stream) == broken:
                    os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def _identity(stream: Any) -> tuple[int, int] | None:
    """(device, inode) of the file behind `stream`, or None for one without a file descriptor."""
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def heartbeat_interval() -> tuple[float, str | None]:
    """`RESENV_HEARTBEAT_S` when it is a positive number of seconds, else `HEARTBEAT_S` and the line
    that says why the value was not taken."""
    text = os.environ.get("RESENV_HEARTBEAT_S")
    if text is None:
        return HEARTBEAT_S, None
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if seconds > 0 and seconds != float("inf"):
        return seconds, None
    return HEARTBEAT_S, f"RESENV_HEARTBEAT_S={text!r} is not a positive number of seconds: heartbeats every {HEARTBEAT_S:g} s"


def shorten(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters: cut at the last word boundary when that
    keeps most of it, else at a character, with `…` where it was cut."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if text[width - 1] != " " and space >= width // 2:  # not mid-word, unless the word is most of it
        cut = cut[:space]
    return cut.rstrip() + "…"


def readable(kind: str, data: dict[str, Any]) -> str | None:
    """An output event as the line a person reads: a command's line as it is, unless it is one whole
    JSON object (machine output: a probe's answer says nothing to a person); a command the engine
    started as `$ argv` (the heartbeat of a quiet pyright then says what runs, not an older line); an
    agent's event as the dashboard's transcript shows it (`$ pip install numpy`, `› [verify] …`),
    its last line."""
    if kind == "output":
        text = data.get("text")
        return None if isinstance(text, str) and _json_object(text) else text
    if kind == "command":
        argv = data.get("argv")
        return "$ " + " ".join(Path(str(argv[0])).name if i == 0 else str(a) for i, a in enumerate(argv)) \
            if isinstance(argv, list) and argv else None
    shown = format_event(kind, data)
    if not shown:
        return None
    return shown[-1].strip().removeprefix("│").strip() or None


def _json_object(text: str) -> bool:
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return False
    try:
        return isinstance(json.loads(stripped), dict)
    except ValueError:
        return False


@dataclass
class JobWatch:
    """What the display knows of one running attempt: where it runs, its phase, its tier verdicts so
    far, its last output line, and when it last printed a line."""

    where: str = ""  # host, and its GPUs: `local:0,1`
    phase: str | None = None
    phase_since: float = 0.0
    last_line_at: float = 0.0
    last_output: str | None = None
    tiers: dict[str, str | None] = field(default_factory=dict)


class PlainDisplay:
    """Plain lines per phase, tier verdict and attempt end, heartbeats, a bar on a TTY, a summary."""

    def __init__(self, console: Console | None = None, *, heartbeat_s: float | None = None,
                 poll_s: float = POLL_S) -> None:
        self.console = console or PipeSafeConsole(file=sys.stdout, highlight=False)
        self.heartbeat_s, self.heartbeat_problem = heartbeat_interval()
        if heartbeat_s is not None:
            self.heartbeat_s, self.heartbeat_problem = heartbeat_s, None
        self.poll_s = poll_s
        self.progress: Progress | None = None
        self.task_id: Any = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.tail: StoreTail | None = None
        self.thread: threading.Thread | None = None

    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None:
        self.run_id, self.db = run_id, db
        self.say(f"run {run_id}: {counted(total, 'job')}")
        self.say(f"  db:   {db}")
        self.say(f"  data: {data_dir}")
        if self.heartbeat_problem:
            self.say(self.heartbeat_problem)
        if self.console.is_terminal:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=self.console, transient=True,
            )
            self.progress.start()
            self.task_id = self.progress.add_task(run_id, total=total)
        try:
            self.tail = StoreTail(db, run_id, self)
        except (StoreError, sqlite3.Error) as error:  # the engine reports a failing store itself
            self.say(f"progress lines unavailable: {error}")
            return
        self.thread = threading.Thread(target=self._follow, name="plain-display", daemon=True)
        self.thread.start()

    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None:
        """Nothing to do: the job's end line comes from its `job_state` event in the store."""

    def message(self, text: str) -> None:
        self.say(text)

    def finished(self, state: str) -> None:
        """The run's end is recorded: print what is left of its events, then the summary."""
        self.close()
        if self.tail is not None:
            try:
                self.tail.poll()
            except sqlite3.Error:  # what is left of the lines; the summary below says how the run went
                pass
            self.tail.close()
        if self.progress is not None:
            self.progress.stop()
        try:
            lines = summary_lines(self.db, self.run_id)
        except (StoreError, sqlite3.Error) as error:
            lines = [f"run {state} (no summary: {error})"]
        for line in lines:
            self.say(line)

    def close(self) -> None:
        """Stop following the store (idempotent); `finished` does it, and so may a caller whose
        engine raised before the run ended."""
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    # -- what the tail calls ----------------------------------------------------------------
    def say(self, text: str | Text) -> None:
        """One line as it is: never wrapped or cut by the console (callers fold long ones between
        words, so a path stays whole and can be copied), no markup."""
        with self.lock:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    @property
    def width(self) -> int:
        """The width lines are folded to: the terminal's, or 80 off a terminal."""
        return self.console.width

    def counts(self, finished: int, running: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task_id, completed=finished,
                                 description=f"{self.run_id} · {running} running")

    def _follow(self) -> None:
        assert self.tail is not None
        while not self.stop.wait(self.poll_s):
            try:
                self.tail.poll()
            except sqlite3.Error:  # the store is busy or failing: the engine says so; try again
                continue
            except Exception as error:  # a fault of the display must never stop the run: say it, stop here
                self.say(f"progress lines stopped: {type(error).__name__}: {error} (the run goes on; see the summary)")
                return


class StoreTail:
    """Reads the run's new events from the store and turns them into the display's lines."""

    def __init__(self, db: Path, run_id: str, display: PlainDisplay) -> None:
        self.conn = connect(db, readonly=True)
        self.run_id = run_id
        self.display = display
        self.keys = {row["id"]: row["key"] for row in self.conn.execute(
            "SELECT id, key FROM jobs WHERE run_id = ?", (run_id,))}
        # Only what happens from now on: a resumed run does not print its past again.
        self.last_event = self.conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
        self.last_phase = self.conn.execute(
            "SELECT COALESCE(MAX(p.id), 0) FROM phases p JOIN attempts a ON a.id = p.attempt_id"
            " WHERE a.run_id = ?", (run_id,)).fetchone()[0]
        self.watching: dict[int, JobWatch] = {}  # by attempt id
        self.paused_since: float | None = None  # while the run is paused: since when (this display saw it)
        self.paused_line_at = 0.0
        self.attempts: dict[int, tuple[int, int]] = {}  # attempt id -> (job id, number)

    def close(self) -> None:
        self.conn.close()

    def poll(self, now: float | None = None) -> None:
        """Print the lines for what was committed since the last poll, then any heartbeats due."""
        upto = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM events WHERE run_id = ?",
                                 (self.run_id,)).fetchone()[0]
        items: list[tuple[float, Callable[[], None]]] = []
        for row in self.conn.execute(
            "SELECT job_id, attempt_id, ts, kind, data FROM events WHERE run_id = ? AND id > ? AND id <= ?"
            " AND kind IN ('job_state', 'phase', 'tier', 'control') ORDER BY id",
            (self.run_id, self.last_event, upto)):
            items.append((row["ts"], partial(self._event, row["kind"], row["job_id"], row["attempt_id"], row["ts"],
                                             json.loads(row["data"]))))
        for row in self.conn.execute(  # teardown is recorded as a phase row only, not as an event
            "SELECT p.id, p.attempt_id, p.name, p.started_at FROM phases p JOIN attempts a ON a.id = p.attempt_id"
            " WHERE a.run_id = ? AND p.id > ? ORDER BY p.id", (self.run_id, self.last_phase)):
            self.last_phase = row["id"]
            if row["name"] == "teardown":
                items.append((row["started_at"], partial(self._teardown, row["attempt_id"])))
        for _, show in sorted(items, key=lambda item: item[0]):  # stable: events keep their order
            show()
        for row in self.conn.execute(  # after the lines: an attempt that just started is watched
            "SELECT e.attempt_id, e.kind, e.data FROM events e JOIN"
            " (SELECT attempt_id, MAX(id) AS id FROM events WHERE run_id = ? AND id > ? AND id <= ?"
            "  AND kind IN ('output', 'transcript', 'command') GROUP BY attempt_id) latest ON latest.id = e.id",
            (self.run_id, self.last_event, upto)):
            if (watch := self.watching.get(row["attempt_id"])) is not None:
                watch.last_output = readable(row["kind"], json.loads(row["data"])) or watch.last_output
        self.last_event = upto
        now = time.time() if now is None else now
        self._heartbeats(now, self._paused_jobs())
        self._run_paused(now)
        counts = dict(self.conn.execute("SELECT state, COUNT(*) FROM jobs WHERE run_id = ? GROUP BY state",
                                        (self.run_id,)).fetchall())
        self.display.counts(sum(counts.get(state, 0) for state in FINISHED), counts.get("running", 0))

    def _key(self, job_id: int | None, attempt_id: int | None) -> str:
        key = self.keys.get(job_id, f"job {job_id}") if job_id is not None else "run"
        number = self.attempts.get(attempt_id, (None, 1))[1] if attempt_id is not None else 1
        return f"{key} (attempt {number})" if number > 1 else key

    def _line(self, attempt_id: int | None, job_id: int | None, text: str, ts: float) -> None:
        for line in fold(f"{self._key(job_id, attempt_id)}  {text}", self.display.width, indent=""):
            self.display.say(line)
        if attempt_id is not None and (watch := self.watching.get(attempt_id)) is not None:
            watch.last_line_at = max(watch.last_line_at, ts, time.time())

    def _event(self, kind: str, job_id: int | None, attempt_id: int | None, ts: float, data: dict[str, Any]) -> None:
        if kind == "control":
            self._control(data)
        elif kind == "job_state" and attempt_id is not None:  # an attempt starts
            self.attempts[attempt_id] = (job_id, data.get("attempt") or 1)  # type: ignore[assignment]
            gpus = ",".join(str(gpu) for gpu in data.get("gpus") or [])
            self.watching[attempt_id] = JobWatch(where=f"{data.get('host')}" + (f":{gpus}" if gpus else ""),
                                                 last_line_at=time.time())
        elif kind == "job_state" and data.get("state") in ("paused", "running"):
            pass  # an operator paused or resumed the job: its control line says so, the attempt goes on
        elif kind == "job_state":  # an attempt ended
            self._attempt_ended(job_id, data, ts)
        elif kind == "phase":
            self._phase(job_id, attempt_id, ts, data)
        elif kind == "tier":
            if (watch := self.watching.get(attempt_id)) is not None:  # type: ignore[arg-type]
                watch.tiers[data["tier"]] = data["status"]
            verdict = "/".join(filter(None, (data.get("status"), data.get("category"))))
            self._line(attempt_id, job_id, f"{data['tier']} {GLYPHS.get(data.get('status'), '?')} {verdict}", ts)
            if data.get("status") in ("fail", "error") and attempt_id is not None:
                self._why(attempt_id, data["tier"])

    def _why(self, attempt_id: int, tier: str) -> None:
        """Under a failed tier's line: why, folded to the width, and the raw log to read, whole on
        its own line."""
        row = self.conn.execute("SELECT evidence_json FROM tier_results WHERE attempt_id = ? AND tier = ?"
                                " ORDER BY id DESC LIMIT 1", (attempt_id, tier)).fetchone()
        evidence = json.loads(row["evidence_json"] or "{}") if row is not None else {}
        if (reason := tier_reason(evidence)) is not None:
            for line in fold(reason, self.display.width, indent="    "):
                self.display.say(line)
        if (log := tier_log(evidence)) is not None:
            self.display.say(f"    log: {log}")

    def _phase(self, job_id: int | None, attempt_id: int | None, ts: float, data: dict[str, Any]) -> None:
        watch = self.watching.get(attempt_id) if attempt_id is not None else None
        if data.get("status") == "started":
            if watch is not None:
                watch.phase, watch.phase_since = data["phase"], ts
            where = f" on {watch.where}" if watch is not None and data["phase"] == "provision" else ""
            self._line(attempt_id, job_id, f"▸ {data['phase']}{where}", ts)
        elif data.get("status") != "done":
            took = f" after {duration(data['seconds'])}" if data.get("seconds") is not None else ""
            reason = f": {data['reason']}" if data.get("reason") else ""
            self._line(attempt_id, job_id, f"▸ {data['phase']} {data.get('status')}{took}{reason}", ts)
        elif watch is not None:
            watch.phase = None

    def _teardown(self, attempt_id: int) -> None:
        job_id = self.attempts.get(attempt_id, (None, 1))[0]
        if job_id is not None:
            self._line(attempt_id, job_id, "▸ teardown", time.time())

    def _attempt_ended(self, job_id: int | None, data: dict[str, Any], ts: float) -> None:
        """A job's end (its state, category, reason and tier glyphs), or an attempt that goes again."""
        attempt_id = max((a for a, (job, _) in self.attempts.items() if job == job_id), default=None)
        watch = self.watching.pop(attempt_id, None) if attempt_id is not None else None
        state, reason = str(data.get("state")), data.get("reason")
        outcome = state_text(data.get("attempt_state") or state, data.get("category"))
        if state in FINISHED:
            glyphs = f"  C0–C5 {tier_glyphs(watch.tiers)}" if watch is not None and watch.tiers else ""
            text = Text(f"{self._key(job_id, attempt_id)}  {state_text(state, data.get('category'))}{glyphs}",
                        style=STATE_STYLE.get(state, ""))
            self.display.say(text)
        else:  # queued again: a retried infrastructure error, an operator's retry, an interruption
            again = "runs again on resume" if (reason or "").startswith("interrupted") else "queued to run again"
            self._line(attempt_id, job_id, f"attempt ended {outcome}; {again}", ts)
        if reason:  # under the line, folded to the width: a reason often holds a path or a command
            for line in fold(reason, self.display.width, indent="    "):
                self.display.say(line)

    def _control(self, data: dict[str, Any]) -> None:
        target = f" {self.keys.get(data['job_id'], data['job_id'])}" if data.get("job_id") else ""
        tier = f" tier {data['tier']}" if data.get("tier") else ""
        message = f": {data['ack_message']}" if data.get("ack_message") else ""
        for line in fold(f"control {data.get('action')}{target}{tier}: {data.get('ack')}{message}", self.display.width):
            self.display.say(line)

    def _paused_jobs(self) -> set[int]:
        return {row["id"] for row in self.conn.execute(
            "SELECT id FROM jobs WHERE run_id = ? AND state = 'paused'", (self.run_id,))}

    def _run_paused(self, now: float) -> None:
        """While the run is paused nothing runs and nothing prints: a heartbeat says it is paused and
        how to go on, so that a quiet screen is never mistaken for a hung engine."""
        row = self.conn.execute("SELECT state FROM runs WHERE id = ?", (self.run_id,)).fetchone()
        if row is None or row["state"] != "paused":
            self.paused_since = None
            return
        if self.paused_since is None:
            self.paused_since = self.paused_line_at = now
        if now - self.paused_line_at >= self.display.heartbeat_s:
            self.display.say(f"run {self.run_id}  … paused {duration(now - self.paused_since)} · resume with"
                             f" `resenv control resume {self.run_id}`")
            self.paused_line_at = now

    def _heartbeats(self, now: float, paused_jobs: set[int]) -> None:
        """A line for each job whose phase has gone `heartbeat_s` without a line of its own; a
        paused job's says it is paused."""
        for attempt_id, watch in self.watching.items():
            if watch.phase is None or now - watch.last_line_at < self.display.heartbeat_s:
                continue
            job_id = self.attempts[attempt_id][0]
            key = self._key(job_id, attempt_id)
            paused = "paused in " if job_id in paused_jobs else ""
            head = f"{key}  … {paused}{watch.phase} {duration(now - watch.phase_since)} · "
            last = watch.last_output or "no output yet"
            self.display.say(head + shorten(last, max(self.display.width - len(head), 10)))
            watch.last_line_at = now


class NoDisplay:
    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None: ...
    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None: ...
    def message(self, text: str) -> None: ...
    def finished(self, state: str) -> None: ...
