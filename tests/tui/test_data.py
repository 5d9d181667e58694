"""The dashboard's data layer and renderers, without a terminal."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from rich.text import Text

from resenv.engine import tiers
from resenv.engine import runfacts
from resenv.tui import data, views
from resenv.engine.results.eventtext import format_event, gpu_use_text
from resenv.tui.data import JobView, RunFeed
from resenv.tui.widgets import FixedSparkline, spark_text, tier_text

from . import fixture_db


def test_mirrors_of_engine_constants_agree_with_the_engine() -> None:
    assert views.ALL_TIERS == tiers.ALL_TIERS and views.PROBE_TIERS == tiers.PROBE_TIERS
    assert data.STALE_AFTER_S == runfacts.STALE_AFTER_S
    now = time.time()
    cases = [
        {"heartbeat_at": None, "engine_host": "x", "engine_pid": 1, "state": "running"},
        {"heartbeat_at": now - 100, "engine_host": "x", "engine_pid": 1, "state": "running"},
        {"heartbeat_at": now, "engine_host": "elsewhere", "engine_pid": 1, "state": "running"},
        {"heartbeat_at": now, "engine_host": "elsewhere", "engine_pid": 1, "state": "finished"},
        {"heartbeat_at": now, "engine_host": platform.node(), "engine_pid": os.getpid(), "state": "paused"},
        {"heartbeat_at": now, "engine_host": platform.node(), "engine_pid": 2**22 + 12345, "state": "running"},
    ]
    for run in cases:
        assert data.engine_alive(run) == runfacts.engine_alive(run), run


def test_sparkline_uses_a_fixed_scale() -> None:
    low = spark_text([3.0, 3.0, 3.0], 3).plain
    high = spark_text([100.0, 100.0, 100.0], 3).plain
    assert low == "▁▁▁" and high == "███"  # 3 % stays low: no rescaling to the data's own range
    assert spark_text([0.0, 50.0, None], 5).plain == "  ▁▄·"
    widget = FixedSparkline(0, 100)
    widget.set([10.0, 90.0])
    assert widget.data == (10.0, 90.0) and widget.hi == 100


def test_tier_glyphs_and_running_tier() -> None:
    job = JobView(id=1, key="r/a", repo="r", agent="a", state="running", phase="probes", tiers={"C0": "pass"})
    shown = job.tier_display(("C0", "C1", "C2", "C5"))
    assert shown == {"C0": "pass", "C1": "running", "C2": "pending", "C3": None, "C4": None, "C5": "pending"}
    assert tier_text(shown).plain == "✓  ◐  ·        ·"
    assert JobView(id=2, key="x/a", repo="x", agent="a", state="done", tiers={"C1": "fail"}).attention == 0
    assert isinstance(tier_text(shown), Text)


def test_transcript_formatting() -> None:
    assert format_event("transcript", {"type": "tool_call", "name": "shell", "command": ["pip", "install", "x"]}) \
        == ["$ pip install x"]
    lines = format_event("transcript", {"type": "tool_result", "exit_code": 1, "seconds": 2.5, "output_tail": "boom"})
    assert lines == ["↳ exit 1 · 2.5s", "  │ boom"]
    assert format_event("exit", {"returncode": 0, "log": "agent", "seconds": 1.0}) == ["■ exit 0 · agent · 1.0s"]
    assert format_event("phase", {"phase": "probes", "status": "started"}) == ["── probes ──"]
    assert format_event("timeout", {"name": "agent", "seconds": 60}) == ["! timeout agent after 60 s"]
    assert format_event("transcript", {"type": "weird-new-type", "raw": "x"})[0].startswith("  ? ")
    omitted = {"log": "agent", "stream": "stdout", "lines": 12345, "bytes": 13_000_000, "final": True}
    assert format_event("omitted", omitted) == ["  │ … 12,345 lines (13.0 MB) only in the raw log agent.stdout"]
    assert format_event("omitted", omitted | {"final": False})[0].endswith("(so far)")


def test_feed_loads_and_polls_only_what_changed(fixture_store: Path, frozen: float, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    db = tmp_path / "copy.db"
    shutil.copy(fixture_store, db)
    feed = RunFeed(db, fixture_db.LIVE_RUN)
    feed.load()
    changes = feed.take()
    assert changes.job_set and len(feed.jobs) == 16
    conn = sqlite3.connect(db)
    tokens, cost = conn.execute(
        "SELECT SUM(input_tokens + cached_input_tokens + cache_write_tokens + output_tokens), SUM(cost_usd)"
        " FROM usage WHERE run_id = ?", (fixture_db.LIVE_RUN,)).fetchone()
    conn.close()
    assert feed.tokens == tokens and abs(feed.cost - cost) < 1e-9
    feed.poll()
    assert not feed.take().jobs  # nothing changed
    conn = sqlite3.connect(db)
    job_id = conn.execute("SELECT id FROM jobs WHERE key = 'nanoGPT/claude-code'").fetchone()[0]
    conn.execute("UPDATE jobs SET state = 'running', host = 'local', attempts = 1 WHERE id = ?", (job_id,))
    conn.execute("INSERT INTO events (run_id, job_id, ts, kind, data) VALUES (?, ?, ?, 'job_state', '{\"state\": \"running\"}')",
                 (fixture_db.LIVE_RUN, job_id, frozen))
    conn.commit()
    conn.close()
    feed.poll()
    changes = feed.take()
    assert changes.jobs == {job_id} and feed.jobs[job_id].state == "running"
    feed.shutdown()


def test_gpu_use_evidence_reads_as_one_line() -> None:
    used = {"gpu_use": {"source": "nvml", "samples": 37, "interval_s": 0.15, "unobservable": None, "per_gpu": [
        {"gpu": 0, "pids": [4242], "peak_mib": 1138.4, "samples": 30, "other_pids": []},
        {"gpu": 1, "pids": [], "peak_mib": None, "samples": 0, "other_pids": [77]}]}}
    assert gpu_use_text(used) == ("GPU use (nvml, 37 samples every 0.15 s): GPU 0: pid 4242, peak 1138 MiB; "
                                       "GPU 1: no process of the entrypoint")
    hidden = {"gpu_use": {"source": "nvml", "samples": 3, "interval_s": 0.15, "per_gpu": [
        {"gpu": 0, "pids": [], "peak_mib": None, "samples": 0, "other_pids": [], "unseen_pids": [5555]}]}}
    assert gpu_use_text(hidden).endswith("GPU 0: only pids outside this machine's view (5555)")
    blind = {"gpu_use": {"source": None, "unobservable": "no NVIDIA driver: Driver Not Loaded", "per_gpu": []}}
    assert gpu_use_text(blind) == "GPU use not observable: no NVIDIA driver: Driver Not Loaded"
    assert gpu_use_text({"exit_code": 0}) is None
