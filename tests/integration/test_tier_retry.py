"""Retrying one tier re-runs that probe on the kept post-agent state and keeps the earlier result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..conftest import resenv, write_benchmark
from .test_engine_run import db_rows

# C1 passes only once a data file exists in the job's checkout: the first run fails it.
MAIN = "import pathlib, sys\nsys.exit(0 if pathlib.Path('data.txt').exists() else 3)\n"
REPORTING_AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""


def test_tier_retry_reruns_one_probe_on_the_kept_state(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": MAIN}}, REPORTING_AGENT)
    first = resenv("run", str(bench), "--tiers", "C1,C5", "--display", "none", env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    c1 = db_rows(db, "SELECT status, category, evidence_json FROM tier_results WHERE tier = 'C1'")
    assert [(row["status"], row["category"]) for row in c1] == [("fail", "runtime")]
    assert json.loads(c1[0]["evidence_json"])["exit_code"] == 3

    # Fix the kept state by hand, then retry C1 alone: queued while no engine runs, applied on resume.
    workdir = Path(db_rows(db, "SELECT workdir FROM attempts")[0]["workdir"])
    (workdir / "repo" / "data.txt").write_text("x")
    queued = resenv("control", "retry", run_id, "one/a", "--tier", "C1", env=cli_env, cwd=tmp_path)
    assert queued.returncode == 0 and "queued" in queued.stdout, queued.stdout + queued.stderr
    resumed = resenv("run", "--resume", run_id, "--display", "plain", env=cli_env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "tier C1 re-run done" in resumed.stdout

    attempts = db_rows(db, "SELECT number, scope, state, workdir FROM attempts ORDER BY number")
    assert [(a["number"], a["scope"], a["state"]) for a in attempts] == [(1, "job", "done"), (2, "C1", "done")]
    assert attempts[1]["workdir"] == attempts[0]["workdir"]  # probed the kept state, no new agent run
    results = db_rows(db, "SELECT a.number, t.tier, t.status FROM tier_results t JOIN attempts a ON a.id = t.attempt_id ORDER BY t.id")
    assert [(r["number"], r["tier"], r["status"]) for r in results] == [(1, "C1", "fail"), (1, "C5", "pass"), (2, "C1", "pass")]
    assert not db_rows(db, "SELECT id FROM events WHERE kind = 'command' AND json_extract(data, '$.phase') = 'agent' AND attempt_id = (SELECT id FROM attempts WHERE number = 2)")
    # the first attempt's C1 log is still there, the re-run wrote its own
    logs = sorted(path.name for path in (workdir.parent / "logs").glob("*C1*.stdout"))
    assert len(logs) == 2 and any(name.startswith("retry2-") for name in logs)
    report = resenv("report", run_id, "--format", "json", env=cli_env, cwd=tmp_path)
    assert json.loads(report.stdout)["agents"]["a"]["tiers"]["C1"]["passed"] == 1

    unknown = resenv("control", "retry", run_id, "one/a", "--tier", "C9", env=cli_env, cwd=tmp_path)
    assert unknown.returncode != 0 and "C9" in unknown.stderr

    # a second tier retry still judges attempt 1's state, and its acknowledgement says so
    again = resenv("control", "retry", run_id, "one/a", "--tier", "C5", env=cli_env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = resenv("run", "--resume", run_id, "--display", "plain", env=cli_env, cwd=tmp_path)
    assert resumed.returncode == 0 and "tier C5 re-run done" in resumed.stdout, resumed.stdout + resumed.stderr
    acks = [row["ack_message"] for row in db_rows(db, "SELECT ack_message FROM controls WHERE ack = 'applied' ORDER BY id")]
    assert acks == [f"job one/a: tier {tier} queued to re-run on the state attempt 1 left" for tier in ("C1", "C5")]
    kept = db_rows(db, "SELECT json_extract(data, '$.kept_attempt') AS kept FROM events WHERE kind = 'tier_retry'")
    assert [row["kept"] for row in kept] == [1, 1], kept


def test_a_c0_retry_reuses_the_kept_verdict(tmp_path, cli_env):
    """The engine keeps the post-agent state as the agent left it (a retry restores it), so nothing
    pyright reads changes between retries here: each one reuses the first verdict, recorded as
    reused in its evidence. What does change the key is tested in test_c0_reuse.py on real venvs."""
    bench = write_benchmark(tmp_path, {"one": {"main.py": "import json\nimport tomli_not_installed\n"}},
                            REPORTING_AGENT)
    first = resenv("run", str(bench), "--tiers", "C0", "--display", "none", env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]

    def last_c0() -> dict:
        last = db_rows(db, "SELECT evidence_json FROM tier_results WHERE tier = 'C0' ORDER BY id DESC LIMIT 1")
        return json.loads(last[0]["evidence_json"])

    original = last_c0()
    assert original["reused_from"] is None and original["pyright_s"] > 0
    for _ in range(2):
        queued = resenv("control", "retry", run_id, "one/a", "--tier", "C0", env=cli_env, cwd=tmp_path)
        assert queued.returncode == 0, queued.stdout + queued.stderr
        resumed = resenv("run", "--resume", run_id, "--display", "plain", env=cli_env, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        again = last_c0()
        assert again["reused_from"] == "attempt 1", again["log_tail"]
        assert again["pyright_s"] == 0.0  # pyright did not run
        assert (again["status"], again["missing"]) == (original["status"], original["missing"]) == \
            ("fail", ["tomli_not_installed"])
