"""SVG snapshots of every screen at 120×40 over the fixture store, with the wall clock frozen.

Update after an intended visual change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and look at the result (`python -m tests.tui.render_screens` writes the PNGs in docs/screens/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenarios import SCENARIOS, SIZE, make_app


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_screen_snapshot(name: str, fixture_store: Path, frozen: float, snap_compare) -> None:
    assert snap_compare(make_app(fixture_store), terminal_size=SIZE, run_before=SCENARIOS[name])
