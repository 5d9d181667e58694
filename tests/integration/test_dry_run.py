"""`resenv run --dry-run` through the real CLI: the plan of the paper suite, and nothing stored."""

from __future__ import annotations

from pathlib import Path

from ..conftest import REPO_ROOT, resenv


def test_dry_run_prints_the_paper_plan_and_touches_no_store(tmp_path: Path, cli_env: dict[str, str]):
    done = resenv("run", str(REPO_ROOT / "benchmark.yaml"), "--suite", "paper", "--dry-run",
                  "--agent", "baseline", "--agent", "noop", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "44 repos × 2 agents = 88 jobs" in out
    assert "jobs per tier: C0 88  C1 58  C2 88  C3 86  C4 64  C5 88" in out
    line = next(l for l in out.splitlines() if l.startswith("long-context-attention/noop "))
    assert "tiers C0,C2,C3,C4,C5" in line and "gpus 2" in line and "assets" in line
    assert "C1 skip: the repository does not support this tier" in out
    city = next(l for l in out.splitlines() if l.startswith("city2graph/baseline "))
    assert "tiers C0,C2,C5" in city and "gpus 1" in city  # C2 is judged on a GPU for every repo
    assert not Path(cli_env["RESENV_DB"]).exists()
    assert not Path(cli_env["RESENV_DATA_DIR"]).exists()


def test_dry_run_respects_repo_and_tier_filters(tmp_path: Path, cli_env: dict[str, str]):
    done = resenv("run", str(REPO_ROOT / "benchmark.yaml"), "--suite", "paper", "--dry-run",
                  "--repo", "T-GATE", "--tiers", "C1,C3", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 repo × 1 agent = 1 job" in done.stdout
    assert "T-GATE/baseline  tiers C3  gpus 1" in done.stdout
    assert "jobs per tier: C1 0  C3 1" in done.stdout
    assert not Path(cli_env["RESENV_DB"]).exists()


def test_dry_run_reports_an_unknown_agent(tmp_path: Path, cli_env: dict[str, str]):
    done = resenv("run", str(REPO_ROOT / "benchmark.yaml"), "--suite", "paper", "--dry-run",
                  "--agent", "nobody", env=cli_env, cwd=tmp_path)
    assert done.returncode != 0 and "nobody" in done.stderr
    assert not Path(cli_env["RESENV_DB"]).exists()
