"""`resenv run --dry-run` through the real CLI: the plan tells the truth and stores nothing.

The bundled benchmark's host has `gpus: auto`, which depends on the machine, so these tests plan
against a copy whose hosts declare their GPUs (the suites are the real ones, linked in).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import REPO_ROOT, resenv

HOSTS = """hosts:
  local: {kind: local, slots: 2, gpus: 2}
  one-gpu: {kind: local, gpus: 1}
  no-gpu: {kind: local, gpus: 0}
  remote: {kind: ssh, address: 127.0.0.1}
"""


def benchmark_with_hosts(root: Path) -> Path:
    """The bundled benchmark.yaml with hosts of known GPU counts, beside a link to the real suites."""
    text = (REPO_ROOT / "benchmark.yaml").read_text()
    start, end = text.index("\nhosts:\n") + 1, text.index("\nagents:\n") + 1
    if not (root / "suites").exists():
        (root / "suites").symlink_to(REPO_ROOT / "suites")
    path = root / "benchmark.yaml"
    path.write_text(text[:start] + HOSTS + text[end:])
    return path


def dry_run(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    done = resenv("run", str(benchmark_with_hosts(tmp_path)), "--dry-run", *args, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not Path(env["RESENV_DB"]).exists()
    assert not Path(env["RESENV_DATA_DIR"]).exists()
    return done.stdout


def test_dry_run_prints_the_paper_plan_and_touches_no_store(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--suite", "paper", "--agent", "baseline", "--agent", "noop")
    assert "44 repos × 2 agents = 88 jobs" in out
    assert "jobs per tier: C0 88  C1 58  C2 88  C3 86  C4 64  C5 88" in out
    assert "host local (local, 2 GPUs from the spec): 88 jobs may run here\n    runs C0,C1,C2,C3,C4,C5\n" in out
    lines = out.splitlines()
    at = lines.index("long-context-attention/noop  tiers C0,C2,C3,C4,C5  gpus 2")
    assert "    assets none" in lines[at + 1:at + 4]
    assert "C1 skip (not_applicable): the repository does not support this tier" in out
    city = next(l for l in out.splitlines() if l.startswith("city2graph/baseline "))
    assert "tiers C0,C2,C5" in city and "gpus 1" in city  # C2 is judged on a GPU for every repo


def test_tiers_without_gpu_work_lease_no_gpu(tmp_path: Path, cli_env: dict[str, str]):
    """The starter suite with --tiers C0,C1,C5: no job leases a GPU, though torch-ddp has GPU entrypoints."""
    out = dry_run(tmp_path, cli_env, "--suite", "starter", "--tiers", "C0,C1,C5")
    jobs = [line for line in out.splitlines() if "/baseline  tiers" in line]
    assert len(jobs) == 7 and all(line.endswith("  gpus 0") for line in jobs), jobs
    assert "max GPUs per job: 0" in out
    plan = json.loads(resenv("run", str(tmp_path / "benchmark.yaml"), "--dry-run", "--json", "--tiers", "C0,C1,C5",
                             env=cli_env, cwd=tmp_path).stdout)
    assert [job["gpus"] for job in plan["jobs"]] == [0] * 7
    assert plan["max_gpus_per_job"] == 0 and plan["hosts"][0]["skips"] == []


def test_a_host_without_gpus_skips_the_gpu_tiers_and_leases_none(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--repo", "torch-ddp", "--host", "no-gpu")
    assert ("host no-gpu (local, 0 GPUs from the spec): 1 job may run here\n    runs C0,C1,C5\n"
            "    C2,C3,C4 skip for 1 job (insufficient_hardware: no GPU on this host)\n") in out
    assert "torch-ddp/baseline  tiers C0,C1,C5  gpus 0\n" in out
    assert "    C4 skip (insufficient_hardware): needs 2 GPUs; the run's hosts have no GPU" in out


def test_hosts_with_declared_gpus_get_the_gpu_jobs(tmp_path: Path, cli_env: dict[str, str]):
    """A GPU job never goes to the GPU-less host while a GPU host is in the run (HostPool's rule);
    with one GPU at most, C4 skips for want of a second."""
    out = dry_run(tmp_path, cli_env, "--repo", "torch-ddp", "--host", "one-gpu", "--host", "no-gpu")
    assert ("host one-gpu (local, 1 GPU from the spec): 1 job may run here\n    runs C0,C1,C2,C3,C5\n"
            "    C4 skips for 1 job (insufficient_hardware: the host has 1 GPU)\n") in out
    assert "host no-gpu (local, 0 GPUs from the spec): takes no job" in out
    assert "torch-ddp/baseline  tiers C0,C1,C2,C3,C5  gpus 1\n" in out
    remote = dry_run(tmp_path, cli_env, "--repo", "torch-ddp", "--host", "remote")
    assert "host remote (ssh, GPUs unknown until the run starts, gpus: auto)" in remote
    assert "torch-ddp/baseline  tiers C0,C1,C2,C3,C4,C5  gpus 2\n" in remote


def test_the_plan_as_json(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--suite", "paper", "--repo", "nano-vllm", "--repo", "T-GATE", "--json",
                  "--data-dir", str(tmp_path / "data"))
    plan = json.loads(out)  # the plan alone on stdout
    assert plan["stored"] is False and plan["suite"] == "paper" and plan["tiers"] == ["C0", "C1", "C2", "C3", "C4", "C5"]
    nano, tgate = plan["jobs"]
    assert nano["key"] == "nano-vllm/baseline" and nano["gpus"] == 2 and nano["gpus_wanted"] == 2
    assert nano["tiers"] == ["C0", "C2", "C3", "C4", "C5"]
    assert nano["skipped"] == [{"tier": "C1", "category": "not_applicable",
                                "reason": "the repository does not support this tier (paper: repo_not_supported)"}]
    assert nano["assets"] == [{"label": "hf:Qwen/Qwen3-0.6B@c1899de289a0 (1.4 GiB)", "status": "not cached"}]
    assert [asset["status"] for asset in tgate["assets"]] == ["unpinned", "unpinned"]
    assert tgate["assets"][0]["label"] == "hf:latent-consistency/lcm-sdxl"
    assert plan["hosts"] == [{"name": "local", "kind": "local", "gpus": 2, "gpus_from": "spec", "jobs": 2,
                              "runs": ["C0", "C2", "C3", "C4", "C5"], "skips": [], "note": None}]
    assert plan["jobs_per_tier"] == {"C0": 2, "C1": 0, "C2": 2, "C3": 2, "C4": 1, "C5": 2}


def test_assets_say_unpinned_rather_than_none_declared(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--suite", "paper", "--repo", "T-GATE", "--repo", "MoBA")
    lines = out.splitlines()
    tgate = next(at for at, line in enumerate(lines) if line.startswith("T-GATE/baseline "))
    assert "    asset hf:latent-consistency/lcm-sdxl [unpinned]" in lines[tgate:tgate + 12]
    assert "    asset hf:stabilityai/stable-diffusion-xl-base-1.0 [unpinned]" in lines[tgate:tgate + 12]
    moba = next(at for at, line in enumerate(lines) if line.startswith("MoBA/baseline "))
    assert "    assets none" in lines[moba:moba + 12]
    assert "none declared" not in out


def test_dry_run_respects_repo_and_tier_filters(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--suite", "paper", "--repo", "T-GATE", "--tiers", "C1,C3")
    assert "1 repo × 1 agent = 1 job" in out
    assert "T-GATE/baseline  tiers C3  gpus 1\n" in out
    assert "jobs per tier: C1 0  C3 1" in out


def test_dry_run_reports_an_unknown_agent(tmp_path: Path, cli_env: dict[str, str]):
    done = resenv("run", str(REPO_ROOT / "benchmark.yaml"), "--suite", "paper", "--dry-run",
                  "--agent", "nobody", env=cli_env, cwd=tmp_path)
    assert done.returncode != 0 and "nobody" in done.stderr and "Traceback" not in done.stderr
    assert not Path(cli_env["RESENV_DB"]).exists()


def test_the_plan_fits_80_columns_and_says_why_each_tier_skips(tmp_path: Path, cli_env: dict[str, str]):
    """Per host only the hardware skips, with how many jobs would have run them; per job every skip
    with its category; paths and asset names on lines of their own; no blank line at the end."""
    out = dry_run(tmp_path, cli_env, "--suite", "starter", "--host", "no-gpu")
    lines = out.splitlines()
    assert out.endswith("nothing was stored or fetched\n")
    assert "    C2 skips for 7 jobs (insufficient_hardware: no GPU on this host)" in lines
    assert "    C3,C4 skip for 1 job (insufficient_hardware: no GPU on this host)" in lines
    skips = [line for line in lines if " skip" in line and line.startswith("    C") and " for " not in line]
    assert skips and all(" skip (not_applicable): " in line or " skip (insufficient_hardware): " in line
                         for line in skips), skips
    assert "    C3 skip (not_applicable): no GPU code path" in lines
    long = [line for line in lines if len(line) > 80 and not line.startswith(("    source ", "    asset "))]
    assert not long, long
    paper = dry_run(tmp_path, cli_env, "--suite", "paper")
    long = [line for line in paper.splitlines() if len(line) > 80 and not line.startswith(("    source ", "    asset "))]
    assert not long, long


def test_assets_of_tiers_that_do_not_run_are_not_needed(tmp_path: Path, cli_env: dict[str, str]):
    out = dry_run(tmp_path, cli_env, "--suite", "paper", "--repo", "nano-vllm", "--tiers", "C0,C5")
    lines = out.splitlines()
    at = lines.index("nano-vllm/baseline  tiers C0,C5  gpus 0")
    assert "    assets not needed: no selected tier runs the code (C1, C3, C4)" in lines[at:]
    assert not any(line.startswith("    asset hf:") for line in lines)
    plan = json.loads(dry_run(tmp_path, cli_env, "--suite", "paper", "--repo", "nano-vllm", "--tiers", "C0,C5",
                              "--json"))
    assert plan["jobs"][0]["assets_needed"] is False and plan["jobs"][0]["assets"]
