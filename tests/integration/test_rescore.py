"""`resenv rescore` re-judges a finished run's kept post-agent states under the current rules into a
new scoring beside the original; the agent never runs again and the run's own rows stay as they were."""

from __future__ import annotations

import csv
import io
import json
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from resenv.engine import tiers
from resenv.engine.cli.main import main
from resenv.probes import rules
from resenv.probes.classifier import Classification

from ..conftest import RESENV, resenv, wait_for, write_benchmark
from ..conftest import rows as db_rows

FAILS = "import sys\nsys.exit(3)\n"
PASSES = "print('ok')\n"
REPORTING_AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""


def invoke(*args: str) -> tuple[int, str, str]:
    """The CLI in this process, so a monkeypatched rule is the rule the rescore judges by."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_rescore_judges_the_kept_states_into_a_new_scoring(tmp_path, cli_env, monkeypatch):
    bench = write_benchmark(tmp_path, {"one": {"main.py": FAILS}, "two": {"main.py": PASSES},
                                       "gone": {"main.py": PASSES}}, REPORTING_AGENT)
    done = resenv("run", str(bench), "--tiers", "C1,C5", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    recorded = rules.RULES_VERSION
    assert [(s["number"], s["label"], s["rules_version"]) for s in db_rows(db, "SELECT * FROM scorings")] == [
        (0, "original", recorded)]

    # What older rules said about two/a's CPU run (an edited verdict), and a job whose kept state is gone.
    conn_rows = db_rows(db, "SELECT t.id FROM tier_results t JOIN jobs j ON j.id = t.job_id"
                            " WHERE j.key = 'two/a' AND t.tier = 'C1'")
    _execute(db, "UPDATE tier_results SET status = 'fail', category = 'deps_missing' WHERE id = ?",
             (conn_rows[0]["id"],))
    gone = db_rows(db, "SELECT a.workdir FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'gone/a'")
    shutil.rmtree(gone[0]["workdir"])
    original = db_rows(db, "SELECT * FROM tier_results ORDER BY id")
    agent_commands = len(db_rows(db, "SELECT id FROM events WHERE kind = 'command'"
                                     " AND json_extract(data, '$.phase') = 'agent'"))

    # The rules change: a failed run is now classified differently, under a new rules version.
    monkeypatch.setattr(rules, "RULES_VERSION", "2099.01")
    monkeypatch.setattr(tiers, "classify", lambda *args, **kwargs: Classification("rules_changed", "test", ""))
    monkeypatch.setenv("RESENV_DB", str(db))
    code, out, err = invoke("rescore", run_id, "--json")
    assert code == 0, out + err
    result = json.loads(out)

    assert result["scoring"]["label"] == "rescore 1" and result["scoring"]["rules_version"] == "2099.01"
    assert result["against"]["label"] == "original" and result["against"]["rules_version"] == recorded
    assert result["tiers"] == ["C1", "C5"]
    assert [(job["job"], job["outcome"]) for job in result["jobs"]] == [
        ("one/a", "rescored"), ("two/a", "rescored"), ("gone/a", "not_rescored")]
    assert "gone" in result["jobs"][2]["reason"] and gone[0]["workdir"] in result["jobs"][2]["reason"]
    assert sorted((c["job"], c["tier"], c["old"]["status"], c["old"]["category"], c["new"]["status"],
                   c["new"]["category"]) for c in result["changes"]) == [
        ("one/a", "C1", "fail", "runtime", "fail", "rules_changed"),
        ("two/a", "C1", "fail", "deps_missing", "pass", None),
    ]
    c1 = result["agents"]["a"]["C1"]
    assert (c1["old"]["passed"], c1["old"]["judged"], c1["new"]["passed"], c1["new"]["judged"]) == (0, 2, 1, 2)

    # The new scoring is stored beside the original, whose rows are untouched; the agent did not run.
    scorings = db_rows(db, "SELECT * FROM scorings ORDER BY number")
    assert [(s["number"], s["label"], s["rules_version"], s["state"]) for s in scorings] == [
        (0, "original", recorded, "done"), (1, "rescore 1", "2099.01", "done")]
    assert db_rows(db, "SELECT * FROM tier_results WHERE scoring_id IS NULL ORDER BY id") == original
    rescored = db_rows(db, "SELECT j.key, t.tier, t.status, t.category FROM tier_results t JOIN jobs j"
                           " ON j.id = t.job_id WHERE t.scoring_id = ? ORDER BY j.key, t.tier", (scorings[1]["id"],))
    assert [(r["key"], r["tier"], r["status"], r["category"]) for r in rescored] == [
        ("one/a", "C1", "fail", "rules_changed"), ("one/a", "C5", "pass", None),
        ("two/a", "C1", "pass", None), ("two/a", "C5", "pass", None)]
    assert len(db_rows(db, "SELECT id FROM events WHERE kind = 'command'"
                           " AND json_extract(data, '$.phase') = 'agent'")) == agent_commands
    assert [r["state"] for r in db_rows(db, "SELECT state FROM jobs ORDER BY id")] == ["done"] * 3

    # Reports read the latest scoring and name both rules versions; --scoring picks another.
    header = f"scoring: rescore 1 (rules 2099.01), original: rules {recorded}"
    for fmt in ("md", "latex"):
        shown = resenv("report", run_id, "--format", fmt, env=cli_env, cwd=tmp_path)
        assert shown.returncode == 0 and header in shown.stdout, (fmt, shown.stdout + shown.stderr)
        assert "not rescored: gone/a" in shown.stdout, (fmt, shown.stdout)
    # CSV names the scoring in columns of every row, and a job it left out in the jobs table
    shown = resenv("report", run_id, "--format", "csv", "--table", "jobs", env=cli_env, cwd=tmp_path)
    table = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert {(row["scoring"], row["rules_version"]) for row in table} == {("rescore 1", "2099.01")}
    assert {row["repo"]: row["not_rescored"] for row in table}["gone"] == "not_rescored"
    latest = json.loads(resenv("report", run_id, "--format", "json", env=cli_env, cwd=tmp_path).stdout)
    assert latest["scoring"]["label"] == "rescore 1" and latest["scoring"]["rules_version"] == "2099.01"
    assert latest["agents"]["a"]["tiers"]["C1"]["passed"] == 1
    assert latest["agents"]["a"]["tiers"]["C1"]["denominator"] == 2  # gone/a was not judged by this scoring
    old = json.loads(resenv("report", run_id, "--format", "json", "--scoring", "original",
                            env=cli_env, cwd=tmp_path).stdout)
    assert old["scoring"]["label"] == "original" and old["agents"]["a"]["tiers"]["C1"]["passed"] == 1  # gone/a
    assert old["agents"]["a"]["tiers"]["C1"]["denominator"] == 3
    table = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert table.returncode == 0 and header in table.stdout, table.stdout + table.stderr
    wrong = resenv("report", run_id, "--scoring", "7", env=cli_env, cwd=tmp_path)
    assert wrong.returncode != 0 and "rescore 1" in wrong.stderr

    # The dashboard's data layer reads the same scoring.
    from resenv.tui import data, queries

    feed = data.RunFeed(db, run_id)
    feed.load()
    feed.compute_scores()
    assert {job.key: dict(job.tiers) for job in feed.jobs.values()} == {
        "one/a": {"C1": "fail", "C5": "pass"}, "two/a": {"C1": "pass", "C5": "pass"}, "gone/a": {}}
    assert feed.scores is not None and feed.scores.header() == header
    feed.shutdown()
    detail = queries.job_detail(db, next(job.id for job in feed.jobs.values() if job.key == "two/a"))
    assert detail["results"]["C1"]["status"] == "pass" and detail["scoring"] == header

    # Text output: the changed tiers and nothing else, then the pass rates per agent.
    code, out, err = invoke("rescore", run_id, "--tiers", "C1")
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0] == f"rescore 2 of run {run_id}: rules 2099.01; compared with original: rules {recorded}"
    changes = lines[lines.index("changes (2):") + 1:lines.index("changes (2):") + 3]
    assert sorted(line.split() for line in changes) == [
        ["one/a", "C1", "fail/runtime", "→", "fail/rules_changed"], ["two/a", "C1", "fail/deps_missing", "→", "pass"]]
    assert any(line.startswith("not rescored: gone/a") for line in lines)
    assert "  a  C1 0/2 (0.0%) → 1/2 (50.0%)" in lines


def _execute(db: Path, sql: str, params: tuple) -> None:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def test_a_live_rescore_holds_the_run_and_a_dead_one_is_recorded_as_interrupted(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": PASSES}}, REPORTING_AGENT)
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    # Another process's rescore, with a fresh heartbeat, holds the run.
    holder = subprocess.Popen(["sleep", "60"])
    try:
        _execute(db, "INSERT INTO scorings (run_id, number, label, rules_version, state, created_at, engine_pid,"
                     " engine_host, heartbeat_at) VALUES (?, 1, 'rescore 1', 'x', 'running', ?, ?, ?, ?)",
                 (run_id, time.time(), holder.pid, platform.node(), time.time()))
        for args in (("rescore", run_id), ("run", "--resume", run_id, "--display", "none"), ("prune", run_id)):
            refused = resenv(*args, env=cli_env, cwd=tmp_path)
            assert refused.returncode != 0 and "being rescored (rescore 1)" in refused.stderr, (args, refused.stderr)
    finally:
        holder.kill()
        holder.wait()
    # Its process is gone: the next rescore records it as interrupted and takes the next number.
    again = resenv("rescore", run_id, env=cli_env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [(s["label"], s["state"]) for s in db_rows(db, "SELECT * FROM scorings ORDER BY number")] == [
        ("original", "done"), ("rescore 1", "interrupted"), ("rescore 2", "done")]
    assert "scoring: rescore 2 (rules" in resenv("show", run_id, env=cli_env, cwd=tmp_path).stdout


def test_ctrl_c_keeps_what_was_judged_as_an_interrupted_scoring_that_is_never_the_latest(tmp_path, cli_env):
    slow = "import os, time\nif os.path.exists('slow'):\n    time.sleep(60)\nprint('ok')\n"
    bench = write_benchmark(tmp_path, {"one": {"main.py": slow}}, REPORTING_AGENT)
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    workdir = Path(db_rows(db, "SELECT workdir FROM attempts")[0]["workdir"])
    (workdir / "repo" / "slow").write_text("")  # the rescore's C1 now takes a minute
    rescore = subprocess.Popen([*RESENV, "rescore", run_id], env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for(lambda: db_rows(db, "SELECT id FROM events WHERE kind = 'command' AND json_extract(data, '$.log')"
                                 " LIKE 'rescore%C1%'"))
    rescore.send_signal(signal.SIGINT)
    out, err = rescore.communicate(timeout=60)
    assert rescore.returncode == 130, out + err
    assert "not rescored: one/a — the rescore was interrupted while it judged this job" in out
    assert [(s["label"], s["state"]) for s in db_rows(db, "SELECT * FROM scorings ORDER BY number")] == [
        ("original", "done"), ("rescore 1", "interrupted")]
    shown = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert "scoring: original (rules" in shown.stdout and "latest" not in shown.stdout, shown.stdout


def test_a_rescore_leases_the_gpus_the_kept_attempt_had_on_its_host(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": PASSES}}, REPORTING_AGENT,
                            hosts="  gpubox: {kind: local, slots: 2, gpus: 1}\n")
    done = resenv("run", str(bench), "--host", "gpubox", "--tiers", "C1,C2,C5", "--display", "none",
                  env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    # C2 and C5 read what the frameworks see on the leased GPU: judged again with that GPU, on that host
    full = resenv("rescore", run_id, "--json", env=cli_env, cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    assert json.loads(full.stdout)["changes"] == []
    cpu_only = resenv("rescore", run_id, "--tiers", "C1", env=cli_env, cwd=tmp_path)
    assert cpu_only.returncode == 0, cpu_only.stdout + cpu_only.stderr
    attempts = db_rows(db, "SELECT scope, host, gpus FROM attempts ORDER BY number")
    assert [(a["scope"], a["host"], a["gpus"]) for a in attempts] == [
        ("job", "gpubox", "0"), ("rescore", "gpubox", "0"), ("rescore", "gpubox", "")]
    c2 = db_rows(db, "SELECT scoring_id, status, category FROM tier_results WHERE tier = 'C2' ORDER BY id")
    assert [(r["status"], r["category"]) for r in c2] == [("fail", "deps_missing")] * 2  # no CUDA framework here
