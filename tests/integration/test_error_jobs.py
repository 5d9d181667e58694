"""Jobs the engine ends in `error` (an infrastructure category: a checkout whose objects are missing;
another: a source that is gone) are shown by `resenv show`, `resenv report` and the dashboard with
its category and reason, counted per agent, and outside every denominator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from resenv.engine.cli.main import main
from resenv.tui.data import RunFeed

from ..conftest import resenv, rows, write_benchmark

AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""
REPO = """\
    - id: %s
      source: {git: '%s', commit: '%s'}
      entrypoints: {cpu: {command: '{python} main.py'}}
      not_applicable: {single_gpu: none, multi_gpu: none}
"""


def cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def broken_upstream(root: Path) -> tuple[Path, str]:
    """A git repo whose commit lacks one of its blobs: its checkout is an infrastructure error."""
    source = root / "upstream"
    (source / "lib").mkdir(parents=True)
    (source / "main.py").write_text("print('hi')\n")
    (source / "lib" / "util.py").write_text("X = 1\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=source, env=env, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    commit, blob = git("rev-parse", "HEAD"), git("rev-parse", "HEAD:lib/util.py")
    (source / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return source, commit


def test_error_jobs_are_counted_by_category_outside_the_denominators(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, AGENT)
    source, commit = broken_upstream(tmp_path)
    bench.write_text(bench.read_text() + REPO % ("broken", source, commit)  # infra: objects missing
                     + REPO % ("gone", tmp_path / "no-such-upstream", "1" * 40))  # the source's fault: download_failed
    done = resenv("run", str(bench), "--tiers", "C1,C5", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # some job ended in error
    assert "2 of 3 jobs ended in error" in done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    jobs = {job["key"]: job for job in rows(db, "SELECT * FROM jobs")}
    assert [jobs[key]["state"] for key in ("one/a", "broken/a", "gone/a")] == ["done", "error", "error"], jobs
    ended = {row["job_id"]: row["category"] for row in rows(db, "SELECT job_id, category FROM attempts")}
    assert (ended[jobs["broken/a"]["id"]], ended[jobs["gone/a"]["id"]]) == ("infra", "download_failed")

    shown = cli(db, "show", run_id)
    assert "error/infra" in next(line for line in shown.splitlines() if "broken/a" in line)
    assert "error/download_failed" in next(line for line in shown.splitlines() if "gone/a" in line)
    assert "a: 1 infra error, outside every denominator; 1 other error (1 download_failed)" in shown
    listing = json.loads(cli(db, "show", run_id, "--json"))
    job = next(job for job in listing["jobs"] if job["key"] == "broken/a")
    assert (job["category"], job["infra"], job["outside_denominators"], job["cost_usd"]) == ("infra", True, True, None)
    assert job["reason"] == jobs["broken/a"]["reason"] and "lib/util.py" in job["reason"]
    assert listing["errors"] == {"a": {"infra": 1, "download_failed": 1}}

    report = json.loads(cli(db, "report", run_id, "--format", "json"))
    a = report["agents"]["a"]
    assert a["jobs"] == 3 and a["errors"]["by_category"] == {"infra": 1, "download_failed": 1} and a["errors"]["infra"] == 1
    assert (a["tiers"]["C1"]["passed"], a["tiers"]["C1"]["denominator"]) == (1, 1)  # the error jobs are not in it
    assert sorted((e["repo"], e["category"], e["infra"]) for e in report["errors"]) == \
        [("broken", "infra", True), ("gone", "download_failed", False)]
    md = cli(db, "report", run_id)
    assert "1 infra error, outside every denominator; 1 other error (1 download_failed)" in md
    assert "| broken | a | infra | yes |" in md and "| broken | a | error/infra |" in md

    feed = RunFeed(db, run_id)
    feed.load()
    view = next(job for job in feed.jobs.values() if job.key == "broken/a")
    assert view.state_text == "error/infra" and view.infra and view.reason == jobs["broken/a"]["reason"]
    assert feed.errors_text() == "1 infra error, outside every denominator; 1 other error (1 download_failed)"
    feed.shutdown()
