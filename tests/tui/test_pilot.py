"""The dashboard driven by Textual's Pilot against REAL stores: runs made by a real engine (in a
thread, as `resenv run --display tui` runs it) and events appended by a second process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from textual.widgets import DataTable, Input, Log

from resenv.tui.dashboard import ResenvApp
from resenv.tui.commands import COMMANDS, bindings_for, help_rows
from resenv.tui.screens import CompareScreen, ConfirmScreen, HelpScreen, HistoryScreen, HostsScreen, JobScreen, \
    OverviewScreen

from ..conftest import REPO_ROOT
from .conftest import RealRun, agent_block, make_run

SIZE = (120, 40)


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"{what} not met within {timeout} s")


def rows_shown(app: ResenvApp) -> int:
    return app.screen.query_one("#jobs", DataTable).row_count


def selected_key(app: ResenvApp) -> str:
    screen = app.screen
    assert isinstance(screen, OverviewScreen)
    job = screen.selected_job()
    assert job is not None
    return job.key


async def select_job(pilot, app: ResenvApp, key: str) -> None:
    """Move the overview's cursor to the job `key` with j/k, as a user would."""
    table = app.screen.query_one("#jobs", DataTable)
    table.focus()
    for _ in range(table.row_count + 1):
        if selected_key(app) == key:
            return
        await pilot.press("j")
    raise AssertionError(f"job {key} not in the table")


async def type_text(pilot, text: str) -> None:
    await pilot.press(*["space" if char == " " else ("slash" if char == "/" else char) for char in text])


def plain(renderable) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def has_notice(app: ResenvApp, *words: str) -> bool:
    return any(all(word in text for word in words) for _, text in app.notices)


# -- a finished run ---------------------------------------------------------------------------------
async def test_overview_lists_the_real_run_and_filters(finished_run: RealRun) -> None:
    app = ResenvApp(finished_run.db, finished_run.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.feed.loaded.is_set() and rows_shown(app) == 3, what="jobs loaded")
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        assert {job.key for job in app.feed.jobs.values()} == {"alpha/a", "beta/a", "gamma/a"}
        assert all(job.state == "done" and job.tiers == {"C1": "pass", "C5": "pass"} for job in app.feed.jobs.values())
        await until(pilot, lambda: app.feed.scores is not None, what="scores")
        assert app.feed.scores.agents["a"].tiers["C1"].passed == 3
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await type_text(pilot, "beta")
        await until(pilot, lambda: rows_shown(app) == 1, what="filtered to one row")
        await pilot.press("enter")
        assert selected_key(app) == "beta/a"
        await pilot.press("escape")
        await until(pilot, lambda: rows_shown(app) == 3, what="filter cleared")


async def test_job_detail_follows_a_transcript_written_by_another_process(finished_run: RealRun) -> None:
    job = finished_run.rows("SELECT id FROM jobs WHERE key = 'beta/a'")[0]
    attempt = finished_run.rows("SELECT id FROM attempts WHERE job_id = ?", (job["id"],))[0]
    app = ResenvApp(finished_run.db, finished_run.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 3, what="jobs loaded")
        await select_job(pilot, app, "beta/a")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="job detail")
        screen = app.screen
        log = screen.query_one("#transcript", Log)
        # the backfill: the real agent's output and the harness's commands, exits and tiers
        await until(pilot, lambda: any("tick 2 of beta/a" in line for line in log.lines), what="backfill")
        assert any(line.startswith("▶ [agent]") for line in log.lines)
        assert any(line.startswith("◆ C1 pass") for line in log.lines)
        await until(pilot, lambda: screen.detail is not None, what="detail")
        assert screen.detail["results"]["C1"]["status"] == "pass"

        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.tui.writer_process", str(finished_run.db), finished_run.run_id,
             str(job["id"]), str(attempt["id"]), "400", "400", "streamed"], cwd=REPO_ROOT)
        try:
            await until(pilot, lambda: any(line.endswith("streamed 50") for line in log.lines), what="live lines")
            assert log.is_vertical_scroll_end  # following the tail
            # scroll up: new lines keep coming but the view stays where the user put it
            log.focus()
            await pilot.press("home")  # at once, however fast the lines come
            assert log.scroll_y == 0
            held = log.scroll_y
            await until(pilot, lambda: any(line.endswith("streamed 300") for line in log.lines), what="more lines")
            assert log.scroll_y == held and not log.is_vertical_scroll_end
            assert "scrolled up" in str(log.border_title)
            await pilot.press("G")  # follow again
            await until(pilot, lambda: any(line.endswith("streamed 400") for line in log.lines), what="all lines")
            await pilot.pause(0.3)
            assert log.is_vertical_scroll_end and "following" in str(log.border_title)
        finally:
            writer.wait(30)
        streamed = [line for line in log.lines if "streamed" in line]
        assert streamed == [f"  │ streamed {n}" for n in range(1, 401)]  # each once, in order
        # the other tabs: raw log files, the report audit, the files of the work dir
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: screen.query_one("#raw-log", Log).line_count > 0, what="raw log")
        assert any("tick 0 of beta/a" in line for line in screen.query_one("#raw-log", Log).lines)
        await pilot.press("right_square_bracket")
        report = plain(screen.report)
        assert "C5 report audit: ✓ pass · 0 hallucinations" in report and "python_path" in report
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: bool(screen.query("#files")), what="files tree")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, OverviewScreen), what="back to overview")


async def test_readonly_refuses_every_mutating_command(finished_run: RealRun) -> None:
    app = ResenvApp(finished_run.db, finished_run.run_id, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 3, what="jobs loaded")
        app.screen.query_one("#jobs", DataTable).focus()
        for key in ("p", "P", "r", "R", "ctrl+k"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="job detail")
        await pilot.press("r")
        assert not isinstance(app.screen, ConfirmScreen)
        # the palette's commands go through the same gate
        app.screen.run_command("cancel_run")
    assert finished_run.rows("SELECT * FROM controls") == []
    refused = [text for severity, text in app.notices if "read-only" in text]
    assert len(refused) == 7, app.notices


# -- a live engine ----------------------------------------------------------------------------------
async def test_pause_and_resume_a_job_are_acknowledged_by_the_live_engine(live_run: RealRun) -> None:
    app = ResenvApp(live_run.db, live_run.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 2 and app.feed.live, what="live run loaded")
        assert selected_key(app) == "slow/a"  # running jobs sort before finished ones
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        assert "slow/a" in app.screen.question and "Pause" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: has_notice(app, "pause job", "applied"), what="pause acknowledged")
        await until(pilot, lambda: app.feed.jobs[_job_id(live_run, "slow/a")].state == "paused", what="paused row")
        control = live_run.rows("SELECT * FROM controls")[-1]
        assert (control["action"], control["ack"], control["origin"]) == ("pause", "applied", "tui")
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        assert "Resume" in app.screen.question
        await pilot.press("n")  # declined: nothing is sent
        await pilot.pause(0.3)
        assert len(live_run.rows("SELECT * FROM controls")) == 1
        await pilot.press("p", "y")
        await until(pilot, lambda: has_notice(app, "resume job", "applied"), what="resume acknowledged")
        await until(pilot, lambda: app.feed.jobs[_job_id(live_run, "slow/a")].state == "running", what="running row")


async def test_retry_a_tier_from_job_detail_writes_a_tier_control_and_shows_the_ack(live_run: RealRun) -> None:
    app = ResenvApp(live_run.db, live_run.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 2, what="jobs loaded")
        await select_job(pilot, app, "fast/a")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.detail is not None, what="detail")
        screen = app.screen
        screen.query_one("#tiers", DataTable).focus()
        await until(pilot, lambda: screen.selected_tier == "C1", what="the cursor on the first scored tier")
        await pilot.press("j", "j", "k")  # C1 -> C2 -> C3 -> C2 ... j/k move through the tiers
        assert screen.selected_tier == "C2"
        await pilot.press("k")
        assert screen.selected_tier == "C1"
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        assert "tier C1 of job" in app.screen.question and "fast/a" in app.screen.question
        await pilot.press("y")
        # the engine may apply it (tier re-runs) or reject it: either way the ack is shown
        await until(pilot, lambda: has_notice(app, "retry tier C1") and
                    any(word in text for _, text in app.notices for word in ("applied", "rejected")), what="ack")
        control = live_run.rows("SELECT * FROM controls")[-1]
        assert (control["action"], control["tier"]) == ("retry", "C1") and control["ack"] in ("applied", "rejected")


async def test_quitting_a_dashboard_that_owns_the_engine_confirms_and_stops_it_cleanly(tmp_path: Path) -> None:
    run = make_run(tmp_path, ["fast", "slow"], agent_block(ticks=3, sleep_s=60))
    from resenv.tui.live import EngineThread

    thread = EngineThread(run.db, run.run_id)
    thread.start()
    app = ResenvApp(run.db, run.run_id, engine=thread)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.feed.loaded.is_set() and any(
                job.state == "running" and job.phase == "agent" for job in app.feed.jobs.values()), what="agent running")
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="quit confirmation")
            assert "resenv run --resume" in app.screen.detail
            await pilot.press("y")
            await until(pilot, lambda: not thread.is_alive(), timeout=60, what="engine stopped")
            await until(pilot, lambda: app.return_value == "interrupted" or not app.is_running, what="app exits")
    finally:
        if thread.is_alive():
            thread.stop()
            thread.join(60)
    assert thread.state == "interrupted" and thread.error is None
    assert run.rows("SELECT state FROM runs")[0]["state"] == "interrupted"
    slow = run.rows("SELECT a.state FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'slow/a'")
    assert [row["state"] for row in slow] == ["error"]  # recorded as interrupted (error/infra), resumable


def _job_id(run: RealRun, key: str) -> int:
    return run.rows("SELECT id FROM jobs WHERE key = ?", (key,))[0]["id"]


# -- navigation, history, the registry ---------------------------------------------------------------
async def test_screens_history_and_compare(fixture_store: Path, frozen: float) -> None:
    from .fixture_db import LIVE_RUN, OLD_RUN

    app = ResenvApp(fixture_store, LIVE_RUN)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 16, what="jobs loaded")
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, HostsScreen), what="hosts")
        await pilot.pause(0.3)
        assert len(app.screen.query("GpuRow")) == 4  # a header and three GPUs of gpu-box
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.runs, what="history")
        assert [run["id"] for run in app.screen.runs][:1] == [LIVE_RUN]
        await pilot.press("space", "space", "c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="compare")
        await until(pilot, lambda: app.screen.query_one("#matrix", DataTable).row_count == 17, what="matrix")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, HistoryScreen), what="back")
        table = app.screen.query_one("#runs", DataTable)
        table.move_cursor(row=[run["id"] for run in app.screen.runs].index(OLD_RUN))
        await pilot.press("enter")  # a run from history opens read-only, in its own feed
        await until(pilot, lambda: isinstance(app.screen, OverviewScreen) and app.screen.feed.run_id == OLD_RUN
                    and rows_shown(app) == 8, what="old run")
        assert app.screen.is_readonly()
        await pilot.press("r")
        assert not isinstance(app.screen, ConfirmScreen) and has_notice(app, "read-only")
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, OverviewScreen) and app.screen.base, what="overview")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")


async def test_one_registry_feeds_keys_palette_and_help(fixture_store: Path, frozen: float) -> None:
    from textual.command import CommandPalette

    from resenv.tui.commands import RegistryProvider
    from .fixture_db import LIVE_RUN

    # keys: every screen's bindings come from the registry, and every registry key is bound somewhere
    bound = {binding.action for screen in ("overview", "job", "hosts", "history", "compare")
             for binding in bindings_for(screen)}
    for command in COMMANDS:
        if command.keys:
            assert f"run_command('{command.name}')" in bound, command.name
    assert {binding.key for binding in bindings_for("job")} >= {"r", "R", "p", "ctrl+k", "G", "escape", "j", "k"}
    assert [b.action for b in bindings_for("job") if b.key == "r"] == ["run_command('retry_tier')"]
    assert [b.action for b in bindings_for("overview") if b.key == "r"] == ["run_command('retry_job')"]
    # help: one row per command
    assert len(help_rows()) == len(COMMANDS)
    # palette: the provider offers the active screen's commands and runs them
    app = ResenvApp(fixture_store, LIVE_RUN)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: rows_shown(app) == 16, what="jobs loaded")
        provider = RegistryProvider(app.screen)
        titles = [hit.text async for hit in provider.search("history")]
        assert any(title.startswith("History") for title in titles)
        titles = [hit.text async for hit in provider.discover()]
        assert any(title.startswith("Pause/resume job") for title in titles)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="palette")
        await type_text(pilot, "hosts")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, HostsScreen), what="palette ran a command")


async def test_the_hosts_screen_follows_a_host_going_down_broken_and_up_again(fixture_store: Path,
                                                                             tmp_path: Path) -> None:
    """The engine records a host waited for (with since when) or broken for good (with why) in the store;
    the open hosts screen shows it without being reopened, and drops the line once the host is up."""
    import json
    import sqlite3

    from .fixture_db import LIVE_RUN

    db = tmp_path / "store.db"
    with sqlite3.connect(fixture_store) as source, sqlite3.connect(db) as copy:
        source.backup(copy)
    inventory = json.loads(sqlite3.connect(db).execute(
        "SELECT inventory_json FROM hosts WHERE run_id = ? AND name = 'gpu-box'", (LIVE_RUN,)).fetchone()[0])

    def record(state: str, **extra: object) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE hosts SET state = ?, inventory_json = ? WHERE run_id = ? AND name = 'gpu-box'",
                         (state, json.dumps(inventory | extra), LIVE_RUN))

    def reasons(app: ResenvApp) -> list[str]:
        return [plain(widget.render()).strip() for widget in app.screen.query(".host-reason") if widget.display]

    since = time.mktime((2026, 12, 6, 9, 41, 7, 0, 0, -1))
    app = ResenvApp(db, LIVE_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, HostsScreen) and app.screen.query("GpuRow"), what="hosts")
        assert reasons(app) == []
        record("down", reason="connection lost: Connection reset by peer", down_since=since)
        await until(pilot, lambda: reasons(app) != [], what="down shown")
        [line] = reasons(app)
        assert plain(app.screen.query_one("#state-gpu-box").render()).startswith("● down")
        assert " ".join(line.split()) == ("waiting for this host since 09:41:07 (reconnecting with backoff):"
                                          " connection lost: Connection reset by peer")
        record("broken", reason="permission denied for user bench (key /k/id)")
        await until(pilot, lambda: reasons(app) and "cannot run" in reasons(app)[0], what="broken shown")
        assert " ".join(reasons(app)[0].split()) == "cannot run jobs: permission denied for user bench (key /k/id)"
        record("up", reason=None, down_since=None)
        await until(pilot, lambda: reasons(app) == [], what="up again")
        assert plain(app.screen.query_one("#state-gpu-box").render()).startswith("● up")
        assert len(app.screen.query("GpuRow")) == 4
