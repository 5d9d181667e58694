"""The starter suite end to end with the real CLI and the baseline agent: every repo's pyramid is
the one documented in suites/starter/expected.yaml (and EXPECTED.md).

The benchmark is the repo's own benchmark.yaml with one change: the local host is declared with no
GPUs, so the documented CPU-only pyramid is what is judged on any machine. The baseline installs
for real (the package registry, or the machine's configured local index and wheels).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO_ROOT, resenv, rows

STARTER = REPO_ROOT / "suites" / "starter"
TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")


def expected() -> dict:
    return yaml.safe_load((STARTER / "expected.yaml").read_text())


def cpu_only_benchmark(root: Path) -> Path:
    data = yaml.safe_load((REPO_ROOT / "benchmark.yaml").read_text())
    for repo in data["suites"]["starter"]["repos"]:
        repo["source"]["path"] = str((REPO_ROOT / repo["source"]["path"]).resolve())
    for host in data["hosts"].values():
        host["gpus"] = 0
    path = root / "benchmark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_starter_suite_pyramid_matches_the_documented_one(tmp_path, cli_env):
    want = expected()
    bench = cpu_only_benchmark(tmp_path)
    done = resenv("run", str(bench), "--suite", "starter", "--agent", want["agent"], "--display", "plain",
                  env=cli_env, cwd=tmp_path, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    db = Path(cli_env["RESENV_DB"])
    jobs = rows(db, "SELECT id, repo_id, state FROM jobs")
    assert sorted(job["repo_id"] for job in jobs) == sorted(want["repos"])
    mismatches = []
    for job in jobs:
        assert job["state"] == "done", job
        got = {row["tier"]: row["status"] + (f"/{row['category']}" if row["category"] else "")
               for row in rows(db, "SELECT tier, status, category FROM tier_results WHERE job_id = ? ORDER BY id",
                               (job["id"],))}
        expect = {tier: want["repos"][job["repo_id"]][tier] for tier in TIERS}
        # "pass" / "fail/runtime": a bare status in the expectation matches that status with no category
        for tier in TIERS:
            if got.get(tier) != expect[tier]:
                mismatches.append(f"{job['repo_id']} {tier}: expected {expect[tier]}, got {got.get(tier)}")
        # the baseline's own steps all succeeded, and it claimed nothing it did not measure
        workdir = rows(db, "SELECT workdir FROM attempts WHERE job_id = ?", (job["id"],))[0]["workdir"]
        report = json.loads((Path(workdir) / "report.json").read_text())
        assert report["baseline"]["final"] and report["baseline"]["failures"] == [], (job["repo_id"], report)
        assert report["ddp_expected_ok"] is None
    assert not mismatches, "\n".join(mismatches)
    # an honest agent leaves nothing the integrity check would restore, quarantine or refuse
    # (build outputs such as `*.egg-info` are no shadows: Python cannot import them)
    assert rows(db, "SELECT kind, path FROM findings") == []
    shown = resenv("show", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0 and "numpy-v1-api/baseline" in shown.stdout
    reported = resenv("report", env=cli_env, cwd=tmp_path)
    assert reported.returncode == 0 and "fail (runtime)" in reported.stdout
