"""Every screen of the dashboard at 80×24, the smallest common terminal: reached as a user reaches
it, each shows what it is for (the jobs, the pyramid's counts, the transcript, the hosts, the runs)
without wrapping a pyramid into another or squeezing the transcript out."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Log

from .scenarios import SCENARIOS, make_app

SMALL = (80, 24)


def screen_text(app) -> list[str]:
    return ["".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_every_screen_works_at_80x24(name: str, fixture_store: Path, frozen: float) -> None:
    app = make_app(fixture_store)
    async with app.run_test(size=SMALL) as pilot:
        await SCENARIOS[name](pilot)
        lines = screen_text(app)
        assert len(lines) == SMALL[1] and all(len(line) == SMALL[0] for line in lines)
        text = "\n".join(lines)
        if name == "overview":
            assert app.screen.query_one("#jobs", DataTable).content_region.height >= 8
            pyramid = app.screen.query_one("#pyramid")
            # the pyramids do not fit side by side: a table of counts per agent, every tier on its line,
            # C0 first as in every list of tiers
            rendered = [line for line in lines if line.startswith("│ C")]
            assert [line[2:4] for line in rendered] == ["C0", "C1", "C2", "C3", "C4", "C5"], text
            assert pyramid.content_region.height >= 8  # the error line (a job ended in error) fits too
            assert "1 err" in text and "! infra" in text
            # the header keeps the run's state and every count (the run's name is what gets cut)
            assert lines[0].startswith(" ● running") and "ETA" in lines[0], text
            assert "! 1 error" in lines[1] and "✗ 3 failing" in lines[1] and "cost $5.00" in lines[1], text
        if name == "job_detail":
            transcript = app.screen.query_one("#transcript", Log)
            assert transcript.content_region.height >= 6, text
            assert "◆ C1 fail (runtime)" in text  # the transcript's lines are on screen
            assert "C1    ✗ fail      runtime" in text  # and the tiers
        if name == "help":  # the list is cut to the terminal and scrolls, its frame whole
            assert lines[0].startswith("╭") and lines[0].endswith("╮") and lines[-1].endswith("╯"), text
        if name == "confirm":
            assert any(line.startswith("█") and line.endswith("█") and "Pause job #6" in line for line in lines), text
