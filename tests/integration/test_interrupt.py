"""Ctrl-C (SIGINT) to a real engine process mid-run: a clean stop, then `run --resume` finishes the run."""

from __future__ import annotations

import signal
import subprocess
import time

from ..conftest import resenv
from .test_controls import Harness, group_alive, no_tiers, open_gate
from .test_engine_run import assert_events_complete, db_rows


def test_sigint_stops_cleanly_and_resume_finishes(tmp_path, cli_env):
    h = Harness(tmp_path, cli_env, ["r1", "r2", "r3"])
    try:
        h.start("--jobs", "2")
        pgids = {key: h.wait_started(key) for key in ("r1/a", "r2/a")}
        assert h.job("r3/a")["state"] == "queued"
        assert all(group_alive(pgid) for pgid in pgids.values())

        assert h.engine is not None
        sent = time.monotonic()
        h.engine.send_signal(signal.SIGINT)
        try:
            code = h.finish(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the engine did not stop within 10 s of SIGINT") from None
        assert time.monotonic() - sent < 8
        assert code == 130, (code, h.stderr)
    finally:
        h.stop()

    run = db_rows(h.db, "SELECT * FROM runs")[0]
    assert run["state"] == "interrupted" and run["heartbeat_at"] is None
    for key, pgid in pgids.items():
        assert not group_alive(pgid), f"{key}'s agent outlived the engine"
        [attempt] = h.attempts(key)
        assert (attempt["state"], attempt["category"]) == ("error", "infra"), attempt
        assert "operator" in attempt["reason"], attempt
        assert attempt["finished_at"] is not None
        assert h.job(key)["state"] == "queued"
    assert h.attempts("r3/a") == [] and h.job("r3/a")["state"] == "queued"
    assert db_rows(h.db, "SELECT COUNT(*) AS n FROM leases WHERE ended_at IS NULL")[0]["n"] == 0
    listed = resenv("runs", env=cli_env, cwd=tmp_path)
    assert h.run_id in listed.stdout and "interrupted" in listed.stdout

    for key in ("r1/a", "r2/a", "r3/a"):
        open_gate(h.gates, key)
    resumed = resenv("run", "--resume", h.run_id, "--display", "none", *no_tiers(), env=cli_env, cwd=tmp_path, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    jobs = db_rows(h.db, "SELECT key, state, attempts FROM jobs ORDER BY key")
    assert [(j["key"], j["state"], j["attempts"]) for j in jobs] == [
        ("r1/a", "done", 2), ("r2/a", "done", 2), ("r3/a", "done", 1),
    ]
    attempts = db_rows(h.db, "SELECT j.key, a.number, a.state FROM attempts a JOIN jobs j ON j.id = a.job_id"
                       " ORDER BY j.key, a.number")
    assert [(a["key"], a["number"], a["state"]) for a in attempts] == [
        ("r1/a", 1, "error"), ("r1/a", 2, "done"), ("r2/a", 1, "error"), ("r2/a", 2, "done"), ("r3/a", 1, "done"),
    ]
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"
    assert_events_complete(h.db, h.run_id)
    assert db_rows(h.db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"
