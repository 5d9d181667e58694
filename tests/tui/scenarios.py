"""The screens of the dashboard over the fixture store, each reached as a user would (keys), and
waited on until every background load has landed: shared by the SVG snapshot tests and by
`render_screens.py` (the PNGs under docs/screens/)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable, Log

from resenv.tui.dashboard import ResenvApp
from resenv.tui.screens import CompareScreen, HelpScreen, HistoryScreen, HostsScreen, JobScreen, OverviewScreen

from . import fixture_db

SIZE = (120, 40)  # the PNGs in docs/screens/
SIZES = ((80, 24), SIZE, (200, 50))  # the snapshot tests


async def until(pilot: Pilot, predicate: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("the screen did not settle")


async def settle(pilot: Pilot) -> None:
    await pilot.pause(0.4)  # a few paint ticks: every pending change is applied
    await pilot.wait_for_scheduled_animations()
    pilot.app.clear_notifications()
    await pilot.pause(0.1)


async def overview(pilot: Pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, OverviewScreen) and app.screen.mounted
                and app.screen.query_one("#jobs", DataTable).row_count == 16 and app.feed.scores is not None)
    await settle(pilot)


async def job_detail(pilot: Pilot) -> None:
    app = pilot.app
    await overview(pilot)
    await pilot.press("slash", *"numpy-v1-api", "space", *"claude", "enter")
    await until(pilot, lambda: app.screen.query_one("#jobs", DataTable).row_count == 1)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.detail is not None
                and app.screen.query_one("#transcript", Log).line_count > 20)
    await pilot.press("j")  # C0 -> C1, the failing tier
    await settle(pilot)


async def report_tab(pilot: Pilot) -> None:
    await job_detail(pilot)
    await pilot.press("right_square_bracket", "right_square_bracket")
    await settle(pilot)


async def hosts(pilot: Pilot) -> None:
    app = pilot.app
    await overview(pilot)
    await pilot.press("2")
    await until(pilot, lambda: isinstance(app.screen, HostsScreen) and app.screen.leases)
    await settle(pilot)


async def history(pilot: Pilot) -> None:
    app = pilot.app
    await overview(pilot)
    await pilot.press("3")
    await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.runs)
    await pilot.press("space", "space")
    await settle(pilot)


async def compare(pilot: Pilot) -> None:
    app = pilot.app
    await history(pilot)
    await pilot.press("c")
    await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                and app.screen.query_one("#matrix", DataTable).row_count == 17)
    await settle(pilot)


async def help_screen(pilot: Pilot) -> None:
    app = pilot.app
    await overview(pilot)
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    await settle(pilot)


async def confirm(pilot: Pilot) -> None:
    app = pilot.app
    await overview(pilot)
    await pilot.press("j", "j", "j", "j", "p")  # the 5th row: src-layout-extra/claude-code, running
    await until(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
    await settle(pilot)


SCENARIOS: dict[str, Callable[[Pilot], Awaitable[None]]] = {
    "overview": overview, "job_detail": job_detail, "job_report": report_tab, "hosts": hosts, "history": history,
    "compare": compare, "help": help_screen, "confirm": confirm,
}


def make_app(db: Path) -> ResenvApp:
    return ResenvApp(db, fixture_db.LIVE_RUN)
