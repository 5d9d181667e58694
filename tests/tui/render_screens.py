"""Render every screen of the dashboard (fixture store, frozen clock, 120×40) to PNG in docs/screens/.

    .venv/bin/python -m tests.tui.render_screens [OUT_DIR]

Needs cairosvg (PyPI) and the DejaVu Sans Mono font (fonts-dejavu-core)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from textual._doc import take_svg_screenshot

from ..conftest import REPO_ROOT
from . import fixture_db
from .scenarios import SCENARIOS, SIZE, make_app
from .svg2png import svg_to_png


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    db = fixture_db.build()
    real_time = time.time
    time.time = lambda: fixture_db.NOW  # the same frozen clock as the snapshot tests
    try:
        for name, scenario in SCENARIOS.items():
            svg = take_svg_screenshot(make_app(db), terminal_size=SIZE, run_before=scenario, title=f"resenv-tui · {name}")
            with tempfile.NamedTemporaryFile("w", suffix=".svg", delete=False, encoding="utf-8") as handle:
                handle.write(svg)
            png = svg_to_png(Path(handle.name), out / f"{name}.png")
            Path(handle.name).unlink()
            print(png)
    finally:
        time.time = real_time


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "docs" / "screens")
