"""Render the dashboard during a real GPU job (evidence): the engine runs the gpu-load repo
headless in a subprocess; while its C3 entrypoint keeps the GPU busy, the real ResenvApp attaches
to the same store and saves SVG screenshots of the overview and the hosts screen.

    python3 render_tui.py OUT_DIR         (from docs/evidence/h200, with RESENV_HOME set)
"""
import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from resenv.tui.dashboard import ResenvApp

out = Path(sys.argv[1])
db = Path(os.environ["RESENV_HOME"]) / "resenv.db"
engine = subprocess.Popen([sys.executable, "-m", "resenv.engine.cli.main", "run", "benchmark.yaml", "--agent", "preinstalled",
                           "--repo", "gpu-load", "--display", "none", "--name", "gpu-load-live"])


def c3_running() -> str | None:
    """The run id once the C3 entrypoint has started and the GPU has been busy for a few samples."""
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(db)
        row = conn.execute("SELECT run_id FROM events WHERE kind = 'command' AND json_extract(data, '$.log') LIKE 'C3%'"
                           " ORDER BY id DESC LIMIT 1").fetchone()
        busy = conn.execute("SELECT COUNT(*) FROM gpu_samples WHERE util_pct > 90").fetchone()[0]
        conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row and busy >= 4 else None


deadline = time.monotonic() + 300
while (run_id := c3_running()) is None:
    assert time.monotonic() < deadline and engine.poll() is None, "C3 never started"
    time.sleep(0.5)


async def shoot() -> None:
    app = ResenvApp(db, run_id, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(3)
        app.save_screenshot(filename="h200-overview.svg", path=str(out))
        await pilot.press("2")
        await pilot.pause(2)
        app.save_screenshot(filename="h200-hosts.svg", path=str(out))


asyncio.run(shoot())
print("screens saved while C3 ran:", sorted(p.name for p in out.glob("*.svg")))
engine.wait(timeout=300)
