"""The GPU tiers for real, through the real engine: C2 and C3 pass with a CUDA torch, a GPU
out-of-memory is classified `oom`, and a report that claims a GPU it cannot see is flagged.

Needs the preinstalled CUDA interpreter of the GPU machine (`RESENV_GPU_PYTHON`, default
/opt/torch/.venv/bin/python3)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT

BENCHMARK = REPO_ROOT / "docs" / "evidence" / "h200" / "benchmark.yaml"
GPU_PYTHON = os.environ.get("RESENV_GPU_PYTHON", "/opt/torch/.venv/bin/python3")


@pytest.mark.gpu
def test_gpu_tiers_on_a_real_gpu(tmp_path):
    if not Path(GPU_PYTHON).exists():
        pytest.skip(f"no CUDA interpreter at {GPU_PYTHON}")
    env = dict(os.environ, RESENV_HOME=str(tmp_path), NCCL_NVLS_ENABLE="0")
    run = subprocess.run(
        [sys.executable, "-m", "resenv.engine.cli.main", "run", str(BENCHMARK), "--agent", "preinstalled",
         "--agent", "cuda-hidden-overclaim", "--repo", "torch-ddp", "--repo", "gpu-oom", "--tiers", "C2,C3,C4,C5",
         "--display", "none"], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    db = sqlite3.connect(tmp_path / "resenv.db")
    rows = db.execute("SELECT j.key, t.tier, t.status, t.category, t.evidence_json FROM tier_results t"
                      " JOIN jobs j ON j.id = t.job_id").fetchall()
    verdict = {(key, tier): (status, category) for key, tier, status, category, _ in rows}
    evidence = {(key, tier): json.loads(text) for key, tier, _, _, text in rows}
    assert verdict[("torch-ddp/preinstalled", "C2")] == ("pass", None)
    c2 = evidence[("torch-ddp/preinstalled", "C2")]
    assert c2["framework"]["cuda_build"] and c2["driver"]["cuda_version"] and c2["framework"]["devices"]
    assert verdict[("torch-ddp/preinstalled", "C3")] == ("pass", None)
    use = evidence[("torch-ddp/preinstalled", "C3")]["gpu_use"]  # NVML saw the entrypoint on its GPU
    assert use["source"] == "nvml" and use["per_gpu"][0]["pids"] and use["per_gpu"][0]["peak_mib"], use
    assert verdict[("torch-ddp/preinstalled", "C4")] == ("skip", "insufficient_hardware") or \
        verdict[("torch-ddp/preinstalled", "C4")][0] == "pass"
    assert verdict[("gpu-oom/preinstalled", "C3")] == ("fail", "oom")
    assert verdict[("torch-ddp/cuda-hidden-overclaim", "C2")] == ("fail", "no_gpu")
    claims = {h["claim"] for h in evidence[("torch-ddp/cuda-hidden-overclaim", "C5")]["hallucinations"]}
    assert claims == {"cuda_available", "gpu_count"}
    samples = sqlite3.connect(tmp_path / "resenv.db").execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
    assert samples > 0
