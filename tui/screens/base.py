"""What every screen of the dashboard is: `DashScreen` (commands, keys, read-only refusals, the feed's
changes) and `Dashboard`, what a screen may use of the app that shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from textual.binding import BindingsMap
from textual.notifications import SeverityLevel
from textual.screen import Screen

from ..commands import BY_NAME, bindings_for
from ..data import Poller, RunFeed
from ..views import Changes, JobView


class Dashboard(Protocol):
    """What the screens use of the app that shows them (`dashboard.ResenvApp`): the screens depend
    on this, the app on the screens."""

    db_path: Path
    readonly: bool
    poller: Poller

    @property
    def measuring(self) -> bool: ...

    def perf(self, kind: str, detail: str) -> None: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def open_run(self, run_id: str) -> None: ...

    def request_control(self, feed: RunFeed, action: str, *, job: JobView | None = None,
                        tier: str | None = None) -> None: ...


def run_state(feed: RunFeed) -> tuple[str, str]:
    """(label, style) of the run's state, telling a live engine from a dead one."""
    run = feed.run
    state = run.get("state") or "?"
    if state in ("running", "paused") and not feed.live:
        return "interrupted (no live engine)", "bold yellow"
    style = {"running": "bold cyan", "paused": "bold yellow", "finished": "bold green", "cancelled": "grey62",
             "interrupted": "bold yellow", "queued": "grey62"}.get(state, "")
    return state, style


class DashScreen(Screen):
    """A screen whose keys, palette entries and help come from the command registry."""

    SCREEN_ID = ""
    feed: RunFeed | None = None
    readonly = False
    mounted = False  # True once on_mount has built the widgets: the paint timer only feeds such screens

    def on_mount(self) -> None:  # Textual calls this besides (after) a subclass's own on_mount
        if self.is_readonly():  # what read-only refuses is not offered: its keys leave the footer
            self._bindings = BindingsMap(bindings_for(self.SCREEN_ID, readonly=True))
            self.refresh_bindings()
        self.call_after_refresh(self._set_mounted)

    def _set_mounted(self) -> None:
        self.mounted = True
        self.when_mounted()

    def on_unmount(self) -> None:
        self.mounted = False  # being torn down (a quit, a pop): the paint timer must not reach into it

    def when_mounted(self) -> None:
        """The screen now receives its feed's changes (start streams here, not in on_mount)."""

    @property
    def dash(self) -> Dashboard:
        return self.app  # type: ignore[return-value]

    def is_readonly(self) -> bool:
        return self.readonly or self.dash.readonly

    def action_run_command(self, name: str) -> None:
        self.run_command(name)

    def run_command(self, name: str) -> None:
        command = BY_NAME[name]
        if command.mutating and self.is_readonly():
            self.dash.notify(f"read-only: {command.title.lower()} refused (this dashboard only watches)",
                             title="read-only", severity="warning")
            return
        handler = getattr(self, f"cmd_{name}", None) or getattr(self.app, f"cmd_{name}", None)
        if handler is None:
            self.dash.notify(f"{command.title}: not available here", severity="warning")
            return
        handler()

    def apply_changes(self, changes: Changes) -> None:
        """Called by the app's paint timer with the feed's coalesced changes."""

    def every_second(self) -> None:
        """Called once a second (elapsed clocks, staleness)."""

    def every_tick(self) -> None:
        """Called on every paint tick while the screen is visible (pending UI work, e.g. a filter)."""

    # -- generic movement -------------------------------------------------------------------------
    def cmd_cursor_down(self) -> None:
        self._move("down")

    def cmd_cursor_up(self) -> None:
        self._move("up")

    def _move(self, direction: str) -> None:
        widget = self.focused
        if widget is None:
            return
        for name in (f"action_cursor_{direction}", f"action_scroll_{direction}"):
            action = getattr(widget, name, None)
            if action is not None:
                action()
                return

    def cmd_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
