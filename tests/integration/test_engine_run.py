"""The real engine end to end through the CLI: runs, raw logs, show, controls, SIGKILL and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from resenv.engine.store.db import StoreReader

from ..conftest import RESENV, resenv, wait_for, write_benchmark
from ..conftest import rows as db_rows

MAIN = "print('ok')\n"

TICKER = """\
a:
  kind: command
  command: >-
    echo start {job}; i=0; while [ $i -lt 40 ]; do echo tick $i; i=$((i+1)); done;
    case {workdir} in */attempt-1/work) sleep $(cat {repo}/delay);; esac; echo end >&2
"""


def assert_events_complete(db: Path, run_id: str) -> None:
    """Every attempt's events are numbered 1..N with no gap and no duplicate, and each raw log line
    of every attempt is in the store exactly once or counted as left out by the output budget."""
    for attempt in db_rows(db, "SELECT id, workdir FROM attempts WHERE run_id = ?", (run_id,)):
        seqs = [r["seq"] for r in db_rows(db, "SELECT seq FROM events WHERE attempt_id = ? ORDER BY seq", (attempt["id"],))]
        assert seqs == list(range(1, len(seqs) + 1)), f"attempt {attempt['id']} seq gaps/dupes"
        logs = Path(attempt["workdir"]).parent / "logs"
        for raw in logs.glob("*.std*"):
            stream = raw.suffix.lstrip(".")
            lines = raw.read_bytes().count(b"\n")
            stored = db_rows(
                db,
                "SELECT COUNT(*) AS n, COUNT(DISTINCT json_extract(data, '$.line_no')) AS d FROM events"
                " WHERE attempt_id = ? AND json_extract(data, '$.log') = ? AND json_extract(data, '$.stream') = ?"
                " AND kind IN ('output', 'transcript')",
                (attempt["id"], raw.stem, stream),
            )[0]
            omitted = sum(json.loads(row["data"])["lines"] for row in db_rows(
                db, "SELECT data FROM events WHERE attempt_id = ? AND kind = 'omitted' AND json_extract(data, '$.final')"
                " AND json_extract(data, '$.log') = ? AND json_extract(data, '$.stream') = ?",
                (attempt["id"], raw.stem, stream)))
            assert stored["n"] == stored["d"] == lines - omitted, f"{raw}: {stored} + {omitted} left out vs {lines} raw lines"


def test_run_records_jobs_attempts_events_and_raw_logs(tmp_path, cli_env):
    bench = write_benchmark(
        tmp_path,
        {"one": {"main.py": MAIN, "delay": "0"}, "two": {"main.py": MAIN, "delay": "0"}},
        TICKER,
    )
    done = resenv("run", str(bench), "--display", "plain", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "one/a  done  C0–C5 ✗  ✗  –  –  –  ✗" in done.stdout and "two/a  done  C0–C5" in done.stdout
    db = Path(cli_env["RESENV_DB"])
    reader = StoreReader(db)
    run = reader.resolve_run("latest")
    assert run["state"] == "finished"
    jobs = reader.jobs(run["id"])
    assert [job["state"] for job in jobs] == ["done", "done"]
    for job in jobs:
        attempts = reader.attempts(job["id"])
        assert [a["state"] for a in attempts] == ["done"]
        phases = db_rows(db, "SELECT name, status FROM phases WHERE attempt_id = ? ORDER BY id", (attempts[0]["id"],))
        assert [p["name"] for p in phases] == ["provision", "checkout", "agent", "probes", "audit", "teardown"]
        assert all(p["status"] == "done" for p in phases)
        # The ticker agent writes no report: every tier that needs its interpreter says so.
        tiers = {r["tier"]: (r["status"], r["category"]) for r in db_rows(
            db, "SELECT tier, status, category FROM tier_results WHERE attempt_id = ?", (attempts[0]["id"],))}
        assert tiers == {
            "C0": ("fail", "missing_report"), "C1": ("fail", "missing_report"),
            "C2": ("skip", "insufficient_hardware"), "C3": ("skip", "not_applicable"),
            "C4": ("skip", "not_applicable"), "C5": ("fail", "missing_report"),
        }
        transcript = db_rows(db, "SELECT data FROM events WHERE attempt_id = ? AND kind = 'transcript'", (attempts[0]["id"],))
        texts = [json.loads(row["data"])["text"] for row in transcript]
        assert texts[0] == f"start {job['key']}" and texts[-1] == "end" and len(texts) == 42
        agent_log = Path(attempts[0]["workdir"]).parent / "logs" / "agent.stdout"
        assert agent_log.read_text().startswith(f"start {job['key']}\ntick 0\n")
        # the job got its own checkout, and the pristine copy is outside its work dir and read-only
        assert (Path(attempts[0]["workdir"]) / "repo" / "main.py").read_text() == MAIN
        pristine = Path(run["data_dir"]) / "pristine" / f"{job['repo_id']}.git"
        assert pristine.is_dir() and not os.access(pristine / "HEAD", os.W_OK) or os.geteuid() == 0
    logs = db_rows(db, "SELECT name, stream, nlines, head FROM logs WHERE run_id = ? AND name = 'agent'", (run["id"],))
    assert {(row["stream"], row["nlines"]) for row in logs} == {("stdout", 41), ("stderr", 1)}
    assert_events_complete(db, run["id"])
    assert reader.integrity() == "ok"

    shown = resenv("show", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "one/a" in shown.stdout and "two/a" in shown.stdout and "done" in shown.stdout
    listed = resenv("runs", env=cli_env, cwd=tmp_path)
    assert run["id"] in listed.stdout and "finished" in listed.stdout
    for action in ("pause", "resume", "cancel"):  # a finished run: nothing to control, nothing queued
        refused = resenv("control", action, run["id"], env=cli_env, cwd=tmp_path)
        assert refused.returncode == 1 and f"run {run['id']} has finished" in refused.stderr, refused
        assert len(refused.stderr.strip().splitlines()) == 1
    assert db_rows(db, "SELECT COUNT(*) AS n FROM controls WHERE run_id = ?", (run["id"],))[0]["n"] == 0
    wrong = resenv("report", "--figure", str(tmp_path / "x.jpg"), env=cli_env, cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stdout == "" and "must end in .png, .svg or .pdf" in wrong.stderr
    assert not (tmp_path / "x.jpg").exists()
    [as_json] = json.loads(resenv("runs", "--json", env=cli_env, cwd=tmp_path).stdout)
    assert (as_json["id"], as_json["state"], as_json["jobs"], as_json["jobs_by_state"]) == (run["id"], "finished", 2, {"done": 2})
    assert as_json["duration_s"] == pytest.approx(run["finished_at"] - run["started_at"], abs=0.01)


def test_agent_timeout_is_named_and_the_run_goes_on(tmp_path, cli_env):
    bench = write_benchmark(
        tmp_path,
        {"slow": {"main.py": MAIN, "delay": "30"}, "fast": {"main.py": MAIN, "delay": "0"}},
        TICKER,
        defaults="  timeouts: {agent: 1.5}\n",
    )
    done = resenv("run", str(bench), "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    timeouts = db_rows(db, "SELECT j.key, e.data FROM events e JOIN jobs j ON j.id = e.job_id WHERE e.kind = 'timeout'")
    assert [(row["key"], json.loads(row["data"])["name"]) for row in timeouts] == [("slow/a", "agent")]
    exits = {json.loads(r["data"])["timed_out"] for r in db_rows(db, "SELECT data FROM events WHERE kind = 'agent_finished'")}
    assert exits == {True, False}
    assert {row["state"] for row in db_rows(db, "SELECT state FROM jobs")} == {"done"}


def test_bad_benchmark_is_reported_with_line_and_field(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": MAIN}}, TICKER, defaults="  timeouts: {agent: -3}\n")
    out = resenv("validate", str(bench), env=cli_env, cwd=tmp_path)
    assert out.returncode != 0
    assert "benchmark.yaml:" in out.stderr and "defaults.timeouts.agent" in out.stderr and "-3" in out.stderr
    out = resenv("run", str(bench), env=cli_env, cwd=tmp_path)
    assert out.returncode != 0 and "defaults.timeouts.agent" in out.stderr
    assert not Path(cli_env["RESENV_DB"]).exists() or not StoreReader(Path(cli_env["RESENV_DB"])).runs()


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_finishes_without_losing_events(tmp_path, cli_env):
    repos = {f"r{i}": {"main.py": MAIN, "delay": "0" if i < 2 else "30"} for i in range(4)}
    bench = write_benchmark(tmp_path, repos, TICKER)
    db = Path(cli_env["RESENV_DB"])
    engine = subprocess.Popen(
        [*RESENV, "run", str(bench), "--display", "none", "--jobs", "4"], env=cli_env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    # Wait until the fast jobs are done and the slow agents are mid-sleep, then kill -9 the engine.
    wait_for(lambda: db.exists() and len(db_rows(db, "SELECT id FROM jobs WHERE state = 'done'")) == 2)
    wait_for(lambda: len(db_rows(
        db, "SELECT DISTINCT attempt_id FROM events WHERE kind = 'transcript' AND json_extract(data, '$.text') = 'tick 39'"
    )) == 4)
    engine.send_signal(signal.SIGKILL)
    engine.wait(timeout=10)
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    killed = db_rows(db, "SELECT id, workdir FROM attempts WHERE state = 'running'")
    assert len(killed) == 2

    # Resuming restarts only the interrupted jobs, as second attempts (which the agent runs quickly).
    resumed = resenv("run", "--resume", run_id, "--display", "plain", env=cli_env, cwd=tmp_path, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    jobs = db_rows(db, "SELECT key, state, attempts FROM jobs ORDER BY key")
    assert [(j["key"], j["state"]) for j in jobs] == [(f"r{i}/a", "done") for i in range(4)]
    attempts = db_rows(db, "SELECT j.key, a.number, a.state, a.category FROM attempts a JOIN jobs j ON j.id = a.job_id ORDER BY j.key, a.number")
    assert [(a["key"], a["number"], a["state"], a["category"]) for a in attempts] == [
        ("r0/a", 1, "done", None), ("r1/a", 1, "done", None),
        ("r2/a", 1, "error", "infra"), ("r2/a", 2, "done", None),
        ("r3/a", 1, "error", "infra"), ("r3/a", 2, "done", None),
    ]
    assert_events_complete(db, run_id)
    assert db_rows(db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"
    assert db_rows(db, "SELECT state FROM runs")[0]["state"] == "finished"


def test_a_missing_agent_key_refuses_to_start_and_stores_nothing(tmp_path, cli_env):
    agents = TICKER + "keyed:\n  kind: command\n  command: 'true'\n  env_from: [RESENV_TEST_ABSENT_KEY]\n"
    bench = write_benchmark(tmp_path, {"one": {"main.py": MAIN, "delay": "0"}}, agents)
    cli_env.pop("RESENV_TEST_ABSENT_KEY", None)
    out = resenv("run", str(bench), "--agent", "keyed", env=cli_env, cwd=tmp_path)
    assert out.returncode != 0
    assert "agent 'keyed': env_from RESENV_TEST_ABSENT_KEY: not set" in out.stderr
    assert not Path(cli_env["RESENV_DB"]).exists() or not StoreReader(Path(cli_env["RESENV_DB"])).runs()
