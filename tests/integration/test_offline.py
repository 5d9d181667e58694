"""Without a reachable package index the main job degrades clearly: downloads fail as
`download_failed`, nothing hangs, and repos that need nothing from the network still pass."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT, resenv
from .test_engine_run import db_rows


@pytest.mark.slow
def test_starter_jobs_that_need_downloads_fail_as_download_failed(tmp_path, cli_env):
    # Port 9 on loopback (discard) refuses connections: an index that is down, not one that hangs.
    cli_env |= {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "UV_INDEX_URL": "http://127.0.0.1:9/simple"}
    started = time.monotonic()
    run = resenv("run", str(REPO_ROOT / "benchmark.yaml"), "--agent", "baseline", "--repo", "tiny-numpy",
                 "--repo", "tiny-stdlib", "--tiers", "C1,C5", "--display", "none", env=cli_env, cwd=tmp_path,
                 timeout=300)
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - started < 120
    rows = db_rows(Path(cli_env["RESENV_DB"]), "SELECT j.repo_id, t.tier, t.status, t.category FROM tier_results t"
                                              " JOIN jobs j ON j.id = t.job_id")
    verdict = {(r["repo_id"], r["tier"]): (r["status"], r["category"]) for r in rows}
    assert verdict[("tiny-numpy", "C1")] == ("fail", "download_failed")
    assert verdict[("tiny-stdlib", "C1")] == ("pass", None)
