"""The Textual application of resenv-tui (see app.py for the commands that start it).

The store is the only interface with the engine: one background thread polls it with cheap indexed
queries (see data.py), the paint timer (8 Hz) hands each screen the coalesced changes, and operator
actions become rows in `controls` whose acknowledgements come back as notices.
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from textual import events
from textual.app import App
from textual.css.query import NoMatches

from .commands import RegistryProvider
from .data import Poller, RunFeed
from .views import JobView
from .live import EngineThread
from .screens import ConfirmScreen, DashScreen, HelpScreen, HistoryScreen, HostsScreen, OverviewScreen

PAINT_HZ = 8.0

CONTROL_EFFECT = {
    ("pause", "job"): "Its sandbox's processes are frozen (SIGSTOP); its clocks stop until it is resumed.",
    ("resume", "job"): "Its sandbox's processes are thawed (SIGCONT).",
    ("cancel", "job"): "Its sandbox is killed and the job is marked cancelled. Results so far are kept.",
    ("retry", "job"): "A new attempt from scratch; the current attempt (if running) is stopped. Every attempt is kept.",
    ("retry", "tier"): "That probe runs again on the kept post-agent state; its new result supersedes the old one.",
    ("pause", "run"): "No new jobs start; running jobs go on.",
    ("resume", "run"): "Jobs are dispatched again.",
    ("cancel", "run"): "Every running job is killed, queued jobs are cancelled; finished results are kept.",
}

CSS = """
Screen { background: $background; }
FitTable { overflow-x: hidden; }
#run-header { height: 3; padding: 0 1; }
#jobs { height: 1fr; border: round $primary 60%; }
#jobs:focus { border: round $primary; }
#bottom { height: 9; }
#pyramid { width: 1fr; height: 100%; border: round $secondary 60%; padding: 0 1; }
#hoststrip { width: 56; height: 100%; border: round $secondary 60%; padding: 0 1; }
Screen.-narrow #hoststrip { width: 46; }
#filter, #history-filter { height: 1; border: none; padding: 0 1; background: $boost; }

#job-header { height: auto; max-height: 3; padding: 0 1; }
#job-top { height: 9; }
Screen.-tall #job-top { height: 17; }
#job-pyramid { display: none; width: 44; height: 100%; border: round $secondary 60%; content-align: center middle; }
Screen.-wide #job-pyramid { display: block; }
#tier-side { width: 1fr; }
#tiers { height: 9; border: round $primary 60%; }
#tiers:focus { border: round $primary; }
#tier-detail { display: none; height: 1fr; border: round $secondary 60%; padding: 0 1; }
Screen.-tall #tier-detail { display: block; }
#tabs { height: 1fr; }
#transcript, #raw-log, #file-preview { border: round $primary 40%; }
#transcript:focus, #raw-log:focus { border: round $primary; }
#raw-files { width: 24; border: round $secondary 60%; }
Screen.-wide #raw-files { width: 34; }
#files { width: 50; border: round $secondary 60%; }
#files-placeholder { width: 50; padding: 1; }
#report { padding: 0 1; }

#hosts-header, #history-header, #compare-header { height: auto; padding: 0 1; }
#hosts-body { height: 1fr; }
.host-box { height: auto; border: round $secondary; padding: 0 1; margin: 0 0 1 0; }
.host-jobs { margin-top: 1; }
#runs, #matrix { height: 1fr; border: round $primary 60%; }
#matrix { overflow-x: auto; }
Screen.-narrow GpuRow > .gpu-mem { display: none; }
Screen.-narrow GpuRow > .gpu-job { width: 22; }

ConfirmScreen { align: center middle; background: $background 60%; }
#confirm { width: 84; max-width: 100%; height: auto; border: thick $error; background: $surface; padding: 1 2; }
#confirm-detail { margin-top: 1; }
#confirm-buttons { height: auto; align-horizontal: right; margin-top: 1; }
#confirm-buttons Button { margin-left: 2; }
HelpScreen { align: center middle; background: $background 60%; }
#help { width: 116; max-width: 100%; height: 36; max-height: 100%; border: round $primary; background: $surface; padding: 0 1; }
"""


class ResenvApp(App[Any]):
    TITLE = "resenv"
    CSS = CSS
    # The screens' classes by terminal size, for CSS: 80×24 keeps the tiers table and the transcript
    # whole; the job's pyramid (which shows the tiers table's statuses again) needs -wide, its
    # selected tier's detail -tall.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    COMMANDS = {RegistryProvider}
    NOTIFICATION_TIMEOUT = 6

    def __init__(
        self, db_path: Path, run_id: str, *, readonly: bool = False, engine: EngineThread | None = None,
        paint_hz: float = PAINT_HZ, poll_s: float | None = None, feed: RunFeed | None = None,
        poller: Poller | None = None,
    ) -> None:
        super().__init__()
        self.db_path = Path(db_path)
        self.run_id = run_id
        self.readonly = readonly
        self.engine_thread = engine
        self.paint_hz = paint_hz
        self.poller = poller or (Poller() if poll_s is None else Poller(poll_s))
        self.feed = feed or RunFeed(self.db_path, run_id)
        self.notices: list[tuple[str, str]] = []  # (severity, text) of every notice, for tests
        self._stopping = False
        self._quit_when_stopped = False
        self._engine_reported = False
        self._last_second = 0.0
        self._perf = _PerfLog.open()
        self.perf("init", "")

    def get_default_screen(self) -> OverviewScreen:
        return OverviewScreen(self.feed, readonly=self.readonly, base=True)

    def start_loading(self) -> None:
        """Start reading the store now (before Textual has started, when called before `run`)."""
        if self.feed not in self.poller.feeds:
            self.poller.add(self.feed)
        if not self.poller.is_alive():
            self.poller.start()

    def on_mount(self) -> None:
        self.perf("mount", "")
        self.start_loading()
        self.set_interval(1 / self.paint_hz, self._paint)

    def on_unmount(self) -> None:
        self.poller.stop()

    # -- the paint timer ------------------------------------------------------------------------
    def _paint(self) -> None:
        """Hand each screen its feed's coalesced changes; a screen updates only what changed."""
        if not self.screen_stack:  # quitting: the timer can fire once more after the screens are gone
            return
        screens = [screen for screen in self.screen_stack if isinstance(screen, DashScreen) and screen.mounted]
        feeds = {id(screen.feed): screen.feed for screen in screens if screen.feed is not None}
        for feed in feeds.values():
            changes = feed.take()
            if not changes:
                continue
            for screen in screens:
                if screen.feed is feed:
                    screen.apply_changes(changes)
            for label, ack, message in changes.acks:
                self.notify(f"{label}: {ack} — {message}", title=f"engine {ack}",
                            severity="information" if ack == "applied" else "warning")
            for error in changes.errors:
                self.notify(f"store: {error}", severity="error")
        try:
            if isinstance(self.screen, DashScreen) and self.screen.mounted:
                self.screen.every_tick()
            now = time.monotonic()
            if now - self._last_second >= 1.0:
                self._last_second = now
                if isinstance(self.screen, DashScreen) and self.screen.mounted:
                    self.screen.every_second()
                elif len(self.screen_stack) > 1:  # under a modal, keep the screen beneath alive
                    beneath = self.screen_stack[-2]
                    if isinstance(beneath, DashScreen) and beneath.mounted:
                        beneath.every_second()
        except NoMatches:  # a screen whose widgets are being removed (quitting, popping): next tick
            pass
        self._engine_check()

    def _engine_check(self) -> None:
        thread = self.engine_thread
        if thread is None:
            return
        while thread.display.messages:
            severity, text = thread.display.messages.popleft()
            self.notify(text, severity=severity)  # type: ignore[arg-type]
        if thread.ident is None or thread.is_alive() or self._engine_reported:
            return
        self._engine_reported = True
        from ..engine.run.scheduler import EngineBusy  # loaded already: this process runs the engine

        if isinstance(thread.error, EngineBusy):
            self.exit()
            return
        if thread.error is not None:
            self.notify(f"the engine failed: {type(thread.error).__name__}: {thread.error}", severity="error",
                        timeout=60)
        else:
            hint = f" · resume with: resenv run --resume {self.run_id}" if thread.state == "interrupted" else ""
            self.notify(f"engine stopped: run {thread.state}{hint}", title="run " + str(thread.state), timeout=20)
        if self._quit_when_stopped:
            self.exit(thread.state)

    # -- notices --------------------------------------------------------------------------------
    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = False) -> None:
        self.notices.append((severity, message))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)  # type: ignore[arg-type]

    # -- app-level commands (screens fall back to these) -----------------------------------------
    def cmd_quit(self) -> None:
        thread = self.engine_thread
        if thread is not None and thread.is_alive():
            if self._stopping:
                self.notify("leaving now; the engine finishes stopping before the command returns")
                self.exit()
                return

            def answer(stop: bool | None) -> None:
                if stop:
                    self._stopping = self._quit_when_stopped = True
                    thread.stop()
                    self.notify("stopping the engine: running jobs are killed and recorded as interrupted…",
                                timeout=30)

            self.push_screen(ConfirmScreen(
                "Stop the run and quit?",
                f"This dashboard runs the engine of run {self.run_id}. Quitting stops it cleanly: running jobs are "
                f"killed and recorded as interrupted, finished results are kept.\n\nResume it later with:\n"
                f"  resenv run --resume {self.run_id}",
                yes="Stop and quit"), answer)
            return
        self.exit(thread.state if thread is not None else None)

    async def action_quit(self) -> None:
        self.cmd_quit()

    def cmd_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            screen = self.screen
            self.push_screen(HelpScreen(readonly=isinstance(screen, DashScreen) and screen.is_readonly()))

    def cmd_palette(self) -> None:
        self.action_command_palette()

    def cmd_screenshot(self) -> None:
        path = self.save_screenshot()
        self.notify(f"screenshot saved: {path}")

    def _current_feed(self) -> RunFeed:
        for screen in reversed(self.screen_stack):
            if isinstance(screen, DashScreen) and screen.feed is not None:
                return screen.feed
        return self.feed

    def cmd_show_overview(self) -> None:
        while len(self.screen_stack) > 1:
            self.pop_screen()

    def cmd_show_hosts(self) -> None:
        if isinstance(self.screen, HostsScreen):
            return
        feed = self._current_feed()
        self.push_screen(HostsScreen(feed, readonly=feed is not self.feed))

    def cmd_show_history(self) -> None:
        if isinstance(self.screen, HistoryScreen):
            return
        for index, screen in enumerate(self.screen_stack):
            if isinstance(screen, HistoryScreen):
                while len(self.screen_stack) > index + 1:
                    self.pop_screen()
                return
        self.push_screen(HistoryScreen())

    def open_run(self, run_id: str) -> None:
        """Open a run from history, read-only, in its own feed."""
        feed = self.poller.add(RunFeed(self.db_path, run_id))
        self.push_screen(OverviewScreen(feed, readonly=True, base=False))

    # -- controls -------------------------------------------------------------------------------
    def request_control(self, feed: RunFeed, action: str, *, job: JobView | None = None, tier: str | None = None) -> None:
        """Confirm (naming the target), then write the control; its acknowledgement comes back as a notice."""
        if tier is not None and job is not None:
            target, level = f"tier {tier} of job #{job.id} {job.key}", "tier"
        elif job is not None:
            target, level = f"job #{job.id} {job.key} ({job.state})", "job"
        else:
            target, level = f"run {feed.run_id} “{feed.run.get('name', '')}”", "run"
        label = f"{action} {target}"
        detail = CONTROL_EFFECT.get((action, level), "")
        if not feed.live:
            detail += (f"\n\nNo engine is running this run now: the control waits in the store and applies when "
                       f"the run is resumed (resenv run --resume {feed.run_id}).")

        def answer(confirmed: bool | None) -> None:
            if confirmed:
                self.run_worker(partial(self._send_control, feed, action, job.id if job else None, tier, label),
                                thread=True, group="controls")
            else:
                self.notify(f"{label}: not sent", timeout=2)

        self.push_screen(ConfirmScreen(f"{action.capitalize()} {target}?", detail, yes=action.capitalize()), answer)

    def _send_control(self, feed: RunFeed, action: str, job_id: int | None, tier: str | None, label: str) -> None:
        from ..engine.store.db import insert_control

        try:
            control_id = insert_control(self.db_path, feed.run_id, action, job_id=job_id, tier=tier, origin="tui")
        except Exception as error:  # a locked or read-only store
            self.call_from_thread(self.notify, f"{label}: could not write the control: {error}", severity="error")
            return
        feed.track_control(control_id, label)
        self.poller.poke()
        note = (f"{label}: sent (control #{control_id}), waiting for the engine…" if feed.live else
                f"{label}: queued as control #{control_id}; no engine runs this run, it applies on resume")
        self.call_from_thread(self.notify, note, timeout=4)

    # -- perf instrumentation (RESENV_TUI_PERF_LOG=path; used by tests/perf/perf_tui.py) --------
    async def on_event(self, event: events.Event) -> None:
        if self._perf is not None and isinstance(event, events.Key):
            self._perf.write("key", event.key)
        await super().on_event(event)

    def post_display_hook(self) -> None:
        if self._perf is not None:
            rows = 0
            if self.screen_stack and isinstance(self.screen_stack[0], OverviewScreen):
                try:
                    rows = self.screen_stack[0].query_one("#jobs").row_count
                except Exception:
                    rows = 0
            if self.feed.load_seconds is not None and not self._perf.loaded:
                self._perf.loaded = True
                self._perf.write("loaded", f"{self.feed.load_seconds:.6f}")
            self._perf.write("paint", str(rows))

    @property
    def measuring(self) -> bool:
        """Whether a perf log is open: the screens then report what they show."""
        return self._perf is not None

    def perf(self, kind: str, detail: str) -> None:
        if self._perf is not None:
            self._perf.write(kind, detail)


class _PerfLog:
    def __init__(self, path: str) -> None:
        self.handle = open(path, "a", buffering=1)
        self.loaded = False

    @classmethod
    def open(cls) -> _PerfLog | None:
        path = os.environ.get("RESENV_TUI_PERF_LOG")
        return cls(path) if path else None

    def write(self, kind: str, detail: str) -> None:
        self.handle.write(f"{time.monotonic():.6f} {kind} {detail}\n")
