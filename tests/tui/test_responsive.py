"""The dashboard fits any terminal and does what its keys say: columns collapse by priority, the
cursor row is what Enter opens, Home/End/PageUp/PageDown reach every scrollable view, and a
read-only dashboard does not offer what it refuses. Real Textual pilot over the fixture store."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import DataTable, Log

from resenv.tui.commands import RegistryProvider, help_rows
from resenv.tui.dashboard import ResenvApp
from resenv.tui.screens import HelpScreen, JobScreen, OverviewScreen
from resenv.tui.widgets import Column, fit_columns

from . import fixture_db
from .scenarios import job_detail, make_app, overview, settle, until
from .test_small_terminal import screen_text

SMALL, LARGE = (80, 24), (200, 50)
TIERS = ["C0", "C1", "C2", "C3", "C4", "C5"]


def test_columns_go_by_rank_and_shrink_only_to_save_one() -> None:
    columns = [Column("a", "a", 10), Column("b", "b", 10, keep=1, min_width=4), Column("c", "c", 10, keep=2),
               Column("d", "d", 10, keep=3)]
    assert fit_columns(columns, 48) == {"a": 10, "b": 10, "c": 10, "d": 10}
    assert fit_columns(columns, 47) == {"a": 10, "b": 9, "c": 10, "d": 10}  # b gives a cell to save d
    assert fit_columns(columns, 41) == {"a": 10, "b": 10, "c": 10}  # d cannot be saved: it goes first
    assert fit_columns(columns, 30) == {"a": 10, "b": 4, "c": 10}
    assert fit_columns(columns, 20) == {"a": 10, "b": 6}
    assert fit_columns(columns, 5) == {"a": 10}  # a (rank 0) never goes, even when it does not fit


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "200x50"])
async def test_jobs_table_keeps_every_tier_and_fits_the_repo_column(size, fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=size) as pilot:
        await overview(pilot)
        table = app.screen.query_one("#jobs", DataTable)
        shown = [str(key.value) for key in table.columns]
        assert {"id", "state", "tiers"} <= set(shown)
        header = next(line for line in screen_text(app) if "│ #" in line)
        assert "C0 C1 C2 C3 C4 C5" in header and "state" in header
        longest = max(len(repo) for repo in fixture_db.REPOS)
        assert table.columns["repo"].width == longest  # the repo column is as wide as its longest name
        if size == SMALL:
            assert "elapsed" in shown and "try" not in header  # the least wanted columns went first
        else:
            assert shown == ["id", "repo", "agent", "where", "state", "tiers", "attempt", "tokens", "cost", "elapsed"]
            row = next(line for line in screen_text(app) if "undeclared-dep    claude-code" in line)
            assert "88.1k" in row and "$0.92" in row and "6m14s" in row


async def test_a_column_that_comes_back_has_its_values(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await overview(pilot)
        assert "cost" not in screen_text(app)[4]
        await pilot.resize_terminal(*LARGE)
        await until(pilot, lambda: "cost" in [str(key.value) for key in app.screen.query_one("#jobs", DataTable).columns])
        await settle(pilot)
        row = next(line for line in screen_text(app) if "torch-ddp         claude-code" in line)
        assert "131.0k" in row and "$1.42" in row and "gpu-box:0,1" in row


async def test_enter_opens_the_cursor_row_of_a_sorted_table(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await overview(pilot)
        table = app.screen.query_one("#jobs", DataTable)
        await pilot.press("s")  # sorted by repo: job #1 (tiny-stdlib) is far from the top
        await until(pilot, lambda: table.row_count > 1 and table.get_row_at(0)[0] != 1)
        await pilot.press("home")
        await until(pilot, lambda: table.cursor_row == 0)
        top = table.get_row_at(0)[0]
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen))
        assert app.screen.job_id == top
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, OverviewScreen))
        await pilot.press("end")
        await until(pilot, lambda: table.cursor_row == table.row_count - 1)
        last = table.get_row_at(table.row_count - 1)[0]
        await pilot.press("pageup")
        await until(pilot, lambda: table.cursor_row < table.row_count - 1)
        await pilot.press("end", "enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen))
        assert app.screen.job_id == last


async def test_job_screen_at_80x24_keeps_every_tier_its_exit_time_command_and_the_transcript(
        fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await job_detail(pilot)
        lines = screen_text(app)
        text = "\n".join(lines)
        tiers = app.screen.query_one("#tiers", DataTable)
        assert [str(key.value) for key in tiers.columns] == ["tier", "status", "category", "exit", "time", "command"]
        rows = [line for line in lines if line[2:4] in TIERS and line.startswith("│ C")]
        assert [line[2:4] for line in rows] == TIERS, text  # all six, C0 first
        assert "insufficient_hardware" in text and "insufficient_hard " not in text  # never cut
        c1 = next(line for line in rows if line.startswith("│ C1"))
        assert " 1 " in c1 and "0.3s" in c1 and "sh -c" in c1  # exit, time, command
        assert app.screen.query_one("#transcript", Log).content_region.height >= 6


async def test_pyramid_and_tiers_table_run_the_same_way(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_detail(pilot)  # the cursor on C1
        pyramid = [line for line in screen_text(app) if "◀" in line or " ✓ pass" in line or " – skip" in line
                   or " ✗ fail" in line]
        order = [tier for line in pyramid for tier in TIERS if f"│ {tier}" not in line and f" {tier} " in line[:45]]
        assert order == TIERS, pyramid
        marked = next(line for line in pyramid if "◀" in line)
        assert " C1 " in marked[:45]  # the selected tier (the table's cursor row) is the one marked
        await pilot.press("j")
        assert app.screen.selected_tier == "C2"
        assert " C2 " in next(line for line in screen_text(app) if "◀" in line)[:45]


async def test_home_end_and_pages_scroll_the_transcript_from_the_tiers_table(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await job_detail(pilot)
        screen = app.screen
        log = screen.query_one("#transcript", Log)
        assert screen.focused is screen.query_one("#tiers") and log.is_vertical_scroll_end
        await pilot.press("home")
        await until(pilot, lambda: log.scroll_y == 0)
        assert screen.selected_tier == "C1"  # the tiers' cursor did not move
        assert "scrolled up" in str(log.border_title)
        await pilot.press("pagedown")
        await until(pilot, lambda: log.scroll_y > 0)
        down = log.scroll_y
        await pilot.press("pageup")
        await until(pilot, lambda: log.scroll_y < down)
        await pilot.press("right")  # long lines scroll sideways, not cut at the edge
        await until(pilot, lambda: log.scroll_x > 0)
        await pilot.press("end")
        await until(pilot, lambda: log.is_vertical_scroll_end)
        await settle(pilot)
        assert "following" in str(log.border_title)


async def test_raw_log_lines_scroll_sideways(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await job_detail(pilot)
        await pilot.press("right_square_bracket")
        raw = app.screen.query_one("#raw-log", Log)
        await until(pilot, lambda: raw.line_count > 0)
        longest = max(raw.lines, key=len)
        assert len(longest) > raw.content_region.width and raw.max_scroll_x >= len(longest) - raw.content_region.width
        for _ in range(3):
            await pilot.press("right")
        await until(pilot, lambda: raw.scroll_x > 0)


async def test_readonly_offers_nothing_it_refuses(fixture_store: Path, frozen: float) -> None:
    app = ResenvApp(fixture_store, fixture_db.LIVE_RUN, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await overview(pilot)

        def footer() -> str:
            return screen_text(app)[-1]

        assert "Filter" in footer() and "Pause" not in footer() and "Retry" not in footer() and "^k" not in footer()
        await pilot.press("p")  # the key still answers, with the refusal
        assert any("read-only" in text for _, text in app.notices)
        titles = [hit.text async for hit in RegistryProvider(app.screen).discover()]
        assert titles and not any(title.startswith(("Pause", "Retry", "Cancel")) for title in titles)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.detail is not None)
        await settle(pilot)
        assert "Retry" not in footer() and "Pause" not in footer() and "Follow" in footer()
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await settle(pilot)
        shown = "\n".join(screen_text(app))
        assert "Retry tier" not in shown and "Pause/resume" not in shown and "read-only" in shown


async def test_help_lists_palette_only_commands_as_palette_commands(fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=(160, 50)) as pilot:
        await overview(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await settle(pilot)
        assert not any("(^p)" in line for line in screen_text(app))
        await pilot.press("end")  # the help scrolls: its end has the palette's commands
        await settle(pilot)
        lines = screen_text(app)
        assert not any("(^p)" in line for line in lines)
        heading = next(index for index, line in enumerate(lines) if "In the command palette only" in line)
        palette_only = [title for keys, title, _, _ in help_rows() if not keys]
        assert palette_only  # e.g. Cancel run, Save screenshot
        for title in palette_only:
            row = next(index for index, line in enumerate(lines) if title in line)
            assert row > heading, title
        await pilot.press("escape", "ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))


async def test_compare_keeps_every_run_and_scrolls_sideways(fixture_store: Path, frozen: float) -> None:
    from resenv.tui.screens import CompareScreen, HistoryScreen

    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await overview(pilot)
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.runs)
        await pilot.press("space", "space", "space", "c")  # three runs: more than 80 columns hold
        await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                    and app.screen.query_one("#matrix", DataTable).row_count == 17)
        matrix = app.screen.query_one("#matrix", DataTable)
        assert [str(key.value) for key in matrix.columns][:2] == ["repo", "agent"] and len(matrix.columns) == 5
        assert matrix.max_scroll_x > 0
        await pilot.press("right")
        await until(pilot, lambda: matrix.scroll_x > 0)


async def test_end_and_home_scroll_the_help(fixture_store: Path, frozen: float) -> None:
    from textual.containers import VerticalScroll

    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await overview(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: bool(app.screen.query("#help")))
        scroll = app.screen.query_one("#help", VerticalScroll)
        await until(pilot, lambda: scroll.max_scroll_y > 0)  # more than 24 rows hold
        await pilot.press("end")
        await until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y)
        await pilot.press("pageup")
        await until(pilot, lambda: scroll.scroll_y < scroll.max_scroll_y)
        await pilot.press("home")
        await until(pilot, lambda: scroll.scroll_y == 0)
