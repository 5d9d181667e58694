"""Opt-in (RESENV_DEBIAN_IMAGE=1): the starter suite with the real baseline agent in containers of a
real Debian + Python image built by debootstrap, judged to exactly the pyramid documented for the
process sandbox (suites/starter/expected.yaml): one rule set, whatever isolates the job.

The containers use network mode `host` so the baseline's pip reaches the package index as it does on
the process sandbox. Takes several minutes (debootstrap, then pip installs including torch).
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import yaml

from ..conftest import resenv, rows
from ..docker_rig import build_debian_image, debian_images_wanted, docker_available, start_dockerd
from .test_starter_e2e import TIERS, cpu_only_benchmark, expected

pytestmark = [
    pytest.mark.skipif(not debian_images_wanted(), reason="opt-in: RESENV_DEBIAN_IMAGE=1"),
    pytest.mark.skipif(not docker_available(), reason="needs root, docker.io and the docker SDK"),
    pytest.mark.timeout(3600),
]


def test_starter_suite_in_debian_containers_matches_the_documented_pyramid(tmp_path, cli_env):
    daemon = start_dockerd()
    try:
        image = build_debian_image(daemon, tmp_path)
        bench = cpu_only_benchmark(tmp_path)
        data = yaml.safe_load(bench.read_text())
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        data["hosts"]["local"].update({
            "sandbox": "docker", "image": image,
            "docker": {"network": "host", "memlock": -1 if memlock == resource.RLIM_INFINITY else memlock},
        })
        bench.write_text(yaml.safe_dump(data, sort_keys=False))
        want = expected()
        env = cli_env | {"DOCKER_HOST": daemon.socket}
        done = resenv("run", str(bench), "--suite", "starter", "--agent", want["agent"], "--display", "plain",
                      env=env, cwd=tmp_path, timeout=3000)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        db = Path(cli_env["RESENV_DB"])
        got = {}
        for job in rows(db, "SELECT id, repo_id FROM jobs"):
            tiers = {r["tier"]: r["status"] + (f"/{r['category']}" if r["category"] else "")
                     for r in rows(db, "SELECT tier, status, category FROM tier_results WHERE job_id = ?", (job["id"],))}
            got[job["repo_id"]] = [tiers.get(tier) for tier in TIERS]
        wanted = {repo: [cells[tier] for tier in TIERS] for repo, cells in want["repos"].items()}
        assert got == wanted
    finally:
        daemon.stop()
