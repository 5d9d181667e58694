"""SVG snapshots of every screen at 80×24 (the smallest common terminal), 120×40 and 200×50 over
the fixture store, with the wall clock frozen.

Update after an intended visual change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and look at the result (`python -m tests.tui.render_screens` writes the PNGs in docs/screens/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenarios import SCENARIOS, SIZES, make_app


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_screen_snapshot(name: str, size: tuple[int, int], fixture_store: Path, frozen: float, snap_compare) -> None:
    assert snap_compare(make_app(fixture_store), terminal_size=size, run_before=SCENARIOS[name])
