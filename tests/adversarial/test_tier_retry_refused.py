"""A tier retry of a tier that never ran is refused with the reason, by the CLI (one line, exit 1,
recorded as rejected in the store) and by the engine (a control written by any other process): the
job was cancelled or errored before its probes, or the run does not score that tier. Scoring such a
retry would put a verdict on a state that was never judged into the denominator (C1 2/3, not 1/1).

Real engine processes and real SQLite; waits are on conditions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from resenv.engine.store.db import insert_control

from ..conftest import RESENV, resenv, wait_for, write_benchmark
from ..conftest import rows as db_rows

# Waits for GATES/<job> in a shell loop that burns no time, then reports the engine's interpreter.
AGENT = textwrap.dedent(f"""\
    a:
      kind: command
      command: >-
        echo waiting {{job}};
        while [ ! -e GATES/{{job}} ]; do sleep 0.05; done;
        printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
""")
BROKEN = textwrap.dedent("""\
    - id: broken
      source: {git: "file:///nonexistent/resenv-test-repo.git", commit: "0123456789abcdef0123456789abcdef01234567"}
      entrypoints:
        cpu: {command: "{python} main.py"}
      not_applicable: {single_gpu: no GPU code, multi_gpu: no GPU code}
""")


def run_with_a_cancelled_and_a_broken_job(tmp_path: Path, env: dict[str, str]) -> tuple[Path, str]:
    gates = tmp_path / "gates"
    (gates / "good").mkdir(parents=True)
    (gates / "good" / "a").touch()
    bench = write_benchmark(tmp_path, {"good": {"main.py": "print('ok')\n"}, "held": {"main.py": "print('ok')\n"}},
                            AGENT.replace("GATES", str(gates)))
    bench.write_text(bench.read_text() + textwrap.indent(BROKEN, "    "))
    db = Path(env["RESENV_DB"])
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none", "--tiers", "C1,C5"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: db_rows(db, "SELECT e.id FROM events e JOIN jobs j ON j.id = e.job_id WHERE j.key = 'held/a'"
                                     " AND e.kind = 'transcript' AND json_extract(e.data, '$.text') = 'waiting held/a'"),
                 timeout=120)
        run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
        cancel = resenv("control", "cancel", run_id, "held/a", "--wait", "30", env=env, cwd=tmp_path)
        assert cancel.returncode == 0 and "applied" in cancel.stdout, cancel.stdout + cancel.stderr
        out, err = engine.communicate(timeout=180)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.communicate(timeout=30)
    assert engine.returncode == 3, out + err  # broken/a ended in error
    states = {row["key"]: row["state"] for row in db_rows(db, "SELECT key, state FROM jobs")}
    assert states == {"good/a": "done", "held/a": "cancelled", "broken/a": "error"}, states
    return db, run_id


def c1_tally(env: dict[str, str], cwd: Path, run_id: str) -> tuple[int, int]:
    report = resenv("report", run_id, "--format", "json", env=env, cwd=cwd)
    assert report.returncode == 0, report.stderr
    c1 = json.loads(report.stdout)["agents"]["a"]["tiers"]["C1"]
    return c1["passed"], c1["denominator"]


def test_a_retry_of_a_tier_that_never_ran_is_refused_with_the_reason(tmp_path, cli_env):
    db, run_id = run_with_a_cancelled_and_a_broken_job(tmp_path, cli_env)
    assert c1_tally(cli_env, tmp_path, run_id) == (1, 1)

    # The CLI refuses at once (no engine runs this run), one line, exit 1, recorded in the store.
    for job, words in (("held/a", "cancelled"), ("broken/a", "error")):
        out = resenv("control", "retry", run_id, job, "--tier", "C1", env=cli_env, cwd=tmp_path)
        said = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        assert out.returncode == 1 and len(said) == 1, out.stdout + out.stderr
        assert "never ran" in said[0] and words in said[0] and "C1" in said[0], said
    out = resenv("control", "retry", run_id, "good/a", "--tier", "C3", env=cli_env, cwd=tmp_path)
    assert out.returncode == 1 and "C3" in out.stdout + out.stderr and "C1, C5" in out.stdout + out.stderr
    controls = db_rows(db, "SELECT j.key, c.tier, c.ack, c.ack_message, c.acked_at FROM controls c"
                           " JOIN jobs j ON j.id = c.job_id WHERE c.action = 'retry' ORDER BY c.id")
    assert [(c["key"], c["tier"], c["ack"]) for c in controls] == [
        ("held/a", "C1", "rejected"), ("broken/a", "C1", "rejected"), ("good/a", "C3", "rejected")]
    assert all(c["acked_at"] and c["ack_message"] for c in controls)

    # A control another process wrote (the dashboard, a script) is refused by the engine that applies
    # it; a retry of a tier that did run is still applied.
    held = db_rows(db, "SELECT id FROM jobs WHERE key = 'held/a'")[0]["id"]
    good = db_rows(db, "SELECT id FROM jobs WHERE key = 'good/a'")[0]["id"]
    refused = insert_control(db, run_id, "retry", job_id=held, tier="C1", origin="tui")
    accepted = insert_control(db, run_id, "retry", job_id=good, tier="C1", origin="tui")
    resumed = resenv("run", "--resume", run_id, "--display", "none", env=cli_env, cwd=tmp_path, timeout=180)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr  # broken/a is still in error
    acks = {row["id"]: row for row in db_rows(db, "SELECT id, ack, ack_message FROM controls")}
    assert acks[refused]["ack"] == "rejected" and "never ran" in acks[refused]["ack_message"], acks[refused]
    assert acks[accepted]["ack"] == "applied", acks[accepted]
    attempts = db_rows(db, "SELECT j.key, a.scope FROM attempts a JOIN jobs j ON j.id = a.job_id ORDER BY a.id")
    assert sorted((a["key"], a["scope"]) for a in attempts) == [
        ("broken/a", "job"), ("good/a", "C1"), ("good/a", "job"), ("held/a", "job")], attempts
    assert not db_rows(db, "SELECT id FROM tier_results WHERE job_id = ?", (held,))
    assert c1_tally(cli_env, tmp_path, run_id) == (1, 1)
