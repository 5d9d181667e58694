"""The engine's side of C2 and C5 (engine/tiers.py): which interpreter and framework the tiers judge,
and what the audit is given, on a fake attempt (no sandbox, no GPU, no pyright)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from resenv.engine import tiers
from resenv.engine.censuses import CensusCache
from resenv.engine.checkout import Pristine
from resenv.engine.hosts.gpuinfo import DriverInfo
from resenv.engine.tiers import TierRunner
from resenv.probes.c0 import C0Result
from resenv.probes.report import load_report


def git_repo(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A real git repository holding `files` in one commit: (its .git dir, the commit)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": "/usr/bin:/bin"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    for argv in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-q", "-m", "repo"]):
        subprocess.run(["git", *argv], cwd=root, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, env=env, capture_output=True,
                            text=True).stdout.strip()
    return root / ".git", commit


CURRENT: list[CensusCache] = []  # the test's run census cache, for the runners it makes


@pytest.fixture(autouse=True)
def censuses() -> Iterator[CensusCache]:
    """The test's run census cache (a real process pool), ended after the test."""
    cache = CensusCache()
    CURRENT.append(cache)
    yield cache
    CURRENT.remove(cache)
    cache.close()


def fake_context(censuses: CensusCache) -> SimpleNamespace:
    """What a run shares, as far as the tiers read it; `events` collects what its attempts emit."""
    repo = SimpleNamespace(id="r", tiers=lambda: {}, assets=())
    bench = SimpleNamespace(tier_timeout=lambda repo, tier: 60.0)
    return SimpleNamespace(suite=SimpleNamespace(repo=lambda repo_id: repo), bench=bench, censuses=censuses, events=[])


def make_runner(tmp_path: Path, report: Any = None, *, gpus: tuple[int, ...] = (0,),
                selected: tuple[str, ...] = ("C0", "C2", "C5"), driver_cuda: str | None = "12.4",
                repo_files: dict[str, str] | None = None, ctx: SimpleNamespace | None = None) -> TierRunner:
    """A TierRunner on a fake attempt whose report.json holds `report` (None: no report.json at all)."""
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    if report is not None:
        (work / "report.json").write_text(report if isinstance(report, str) else json.dumps(report))
    pristine = None
    if repo_files is not None:
        git_dir, commit = git_repo(tmp_path / "pristine", repo_files)
        pristine = Pristine(git_dir, commit)
    ctx = ctx or fake_context(CURRENT[-1])
    attempt = SimpleNamespace(
        ctx=ctx, job={"repo_id": "r", "id": 1}, lease=SimpleNamespace(gpus=gpus), pristine=pristine,
        sink=SimpleNamespace(emit=lambda kind, data: ctx.events.append((kind, data))),
        paths=SimpleNamespace(workdir=work, repo=work / "repo", report=work / "report.json"),
        sandbox=SimpleNamespace(), base=tmp_path / "attempt", number=1, recorded_number=None)
    runner = TierRunner(attempt, selected, DriverInfo("550.54", driver_cuda))  # type: ignore[arg-type]
    runner.state.report = load_report(work / "report.json", sandbox_root=work)
    python = (runner.state.report.report or {}).get("python_path")
    runner.state.python = python if isinstance(python, str) else None
    return runner


# -- no interpreter ------------------------------------------------------------------------------
@pytest.mark.parametrize(("report", "category"), [
    ({"python_path": None, "notes": None}, "no_interpreter"),
    ({"notes": "could not build it"}, "no_interpreter"),
    (None, "missing_report"),
    ("{not json", "invalid_report"),
])
def test_a_tier_without_an_interpreter_fails_with_a_clear_category(tmp_path: Path, report: Any,
                                                                   category: str) -> None:
    runner = make_runner(tmp_path, report)
    result = runner._no_interpreter("C1")
    assert result is not None and (result.status, result.category) == ("fail", category)
    assert result.evidence["reason"]


@pytest.mark.parametrize(("report", "category"), [
    ({"python_path": None}, "no_interpreter"),
    (None, "missing_report"),
])
async def test_c0_without_an_interpreter_uses_the_same_category(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                report: Any, category: str) -> None:
    async def broken_interpreter(python: str, repo_dir: Path, census: Any, **_: Any) -> C0Result:
        return C0Result(status="fail", category="entrypoint_not_found", missing=["torch"], missing_source=[],
                        paper_ratio=0.0, third_party_ratio=0.0, command=[python], duration_s=0.0,
                        pyright_version="1.1.414", interpreter_ok=False, log_tail="")

    monkeypatch.setattr(tiers, "run_c0", broken_interpreter)
    runner = make_runner(tmp_path, report, repo_files={"main.py": "import torch\n"})
    result = await runner._tier_c0()
    assert (result.status, result.category) == ("fail", category)
    assert result.evidence["census"]["third_party"] == 1


# -- C2: the framework the repo runs on, from a hostile probe output ------------------------------
def fw(name: str, **fields: Any) -> dict[str, Any]:
    """One framework as the probe prints it: not installed unless `fields` say otherwise."""
    base = {"name": name, "installed": False, "importable": False, "version": None, "cuda_build": None,
            "cuda_available": None, "device_count": None, "devices": [], "error": f"ModuleNotFoundError: {name}"}
    if fields.get("importable"):
        base |= {"installed": True, "error": None}
    return base | fields


def probe_output(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"frameworks": {name: entries.get(name) or fw(name) for name in ("torch", "jax", "tensorflow")},
            "_exit": 0}


CPU_TORCH = fw("torch", importable=True, version="2.3.1+cpu", cuda_available=False, device_count=0)
CUDA_TORCH = fw("torch", importable=True, version="2.3.1+cu121", cuda_build="12.1", cuda_available=True,
                device_count=1, devices=["NVIDIA H200"])
CUDA_JAX = fw("jax", importable=True, version="0.4.30", cuda_build="12.3", cuda_available=True, device_count=1,
              devices=["NVIDIA H200"])
PY = {"python_path": "/w/env/bin/python"}


async def test_c2_judges_the_framework_the_repo_imports(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, PY, repo_files={"train.py": "import jax\n"})
    runner.state.frameworks = probe_output(torch=CPU_TORCH, jax=CUDA_JAX)
    result = await runner._tier_c2()
    assert (result.status, result.category) == ("pass", None), result.evidence
    assert result.evidence["judged"] == ["jax"] and result.evidence["framework"]["name"] == "jax"
    assert result.evidence["framework"]["devices"] == ["NVIDIA H200"]
    assert set(result.evidence["frameworks"]) == {"torch", "jax", "tensorflow"}
    # the same environment for a torch repo: the CPU-only torch is what it runs on
    runner = make_runner(tmp_path / "t", PY, repo_files={"train.py": "import torch\n"})
    runner.state.frameworks = probe_output(torch=CPU_TORCH, jax=CUDA_JAX)
    result = await runner._tier_c2()
    assert (result.status, result.category, result.evidence["judged"]) == ("fail", "cuda_mismatch", ["torch"])


@pytest.mark.parametrize("output", [
    {"frameworks": {"torch": {"version": 3}}, "_exit": 0},
    {"frameworks": [1, 2], "_exit": 0},
    {"_exit": 0},
    probe_output(torch=CUDA_TORCH | {"device_count": "1"}),
    probe_output(torch=CUDA_TORCH | {"cuda_build": 12.1}),
])
async def test_c2_fails_clearly_on_a_malformed_probe_output(tmp_path: Path, output: dict[str, Any]) -> None:
    runner = make_runner(tmp_path, PY, repo_files={"m.py": "import torch\n"})
    runner.state.frameworks = output
    result = await runner._tier_c2()
    assert (result.status, result.category) == ("fail", "runtime")
    assert result.evidence["reason"].startswith("the framework probe printed a malformed observation")
    assert result.evidence["probe_errors"]


async def test_c2_classifies_a_probe_that_did_not_finish(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, PY, repo_files={"m.py": "import torch\n"})
    runner.state.frameworks = {"_exit": 1, "_timed_out": False,
                               "_output": "Traceback (most recent call last):\nImportError: libcuda.so.1: cannot open shared object file: No such file or directory"}
    result = await runner._tier_c2()
    assert (result.status, result.category) == ("fail", "no_gpu")


async def test_the_census_is_computed_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   censuses: CensusCache) -> None:

    async def passing(python: str, repo_dir: Path, census: Any, **_: Any) -> C0Result:
        return C0Result(status="pass", category=None, missing=[], missing_source=[], paper_ratio=1.0,
                        third_party_ratio=1.0, command=[python], duration_s=0.0, pyright_version="1.1.414",
                        interpreter_ok=True, log_tail="")

    monkeypatch.setattr(tiers, "run_c0", passing)
    ctx = fake_context(censuses)
    first = make_runner(tmp_path / "one", PY, repo_files={"train.py": "import jax\n"}, ctx=ctx)
    second = make_runner(tmp_path / "two", PY, ctx=ctx)
    second.attempt.pristine = first.attempt.pristine
    for runner in (first, second):  # two attempts of one repo and commit, each judging C0, C2 and C5
        runner.state.frameworks = probe_output(jax=CUDA_JAX)
        await runner._tier_c0()
        await runner._tier_c2()
        await runner._audit()
    assert [kind for kind, _ in ctx.events] == ["census"]


# -- C5: what the audit is given -------------------------------------------------------------------
def c5_runner(tmp_path: Path, report: dict[str, Any], frameworks: dict[str, Any] | None, *,
              gpus: tuple[int, ...] = (0,), repo: str = "import torch\n") -> TierRunner:
    runner = make_runner(tmp_path, PY | report, gpus=gpus, repo_files={"m.py": repo})
    runner.state.python_exists = runner.state.python_executable = True
    runner.state.interpreter = {"version": "3.11.7", "prefix": str(tmp_path / "env"), "_exit": 0}
    runner.state.frameworks = frameworks
    return runner


async def test_c5_knows_how_many_gpus_the_job_was_leased(tmp_path: Path) -> None:
    claims = {"cuda_available": True, "gpu_count": 1}
    result = await c5_runner(tmp_path, claims, probe_output(torch=CUDA_TORCH), gpus=())._audit()
    assert [h["claim"] for h in result.evidence["hallucinations"]] == ["cuda_available", "gpu_count"]
    assert result.evidence["observed"]["gpus_leased"] == 0
    result = await c5_runner(tmp_path / "b", claims, probe_output(torch=CUDA_TORCH), gpus=(3,))._audit()
    assert (result.status, result.evidence["hallucinations"]) == ("pass", [])


async def test_c5_checks_claims_about_every_framework_and_the_repos_own(tmp_path: Path) -> None:
    claims = {"framework": {"name": "jax", "version": "0.4.30"}, "torch_version": "2.3.1", "cuda_available": True,
              "gpu_count": 1, "env_tool": "conda"}
    result = await c5_runner(tmp_path, claims, probe_output(torch=CPU_TORCH, jax=CUDA_JAX), repo="import jax\n")._audit()
    assert (result.status, result.evidence["hallucinations"]) == ("pass", [])
    assert result.evidence["observed"]["framework"] == "jax"
    assert result.evidence["not_scored"] == ["env_tool"]


async def test_c5_with_a_probe_that_crashed_leaves_framework_claims_unverifiable(tmp_path: Path) -> None:
    crashed = {"_exit": -11, "_timed_out": False, "_output": "Segmentation fault"}
    result = await c5_runner(tmp_path, {"torch_version": "2.3.1", "cuda_available": True}, crashed)._audit()
    assert result.evidence["unverifiable"] == ["torch_version", "cuda_available"]
    assert result.evidence["hallucinations"] == []


@pytest.mark.parametrize(("frameworks", "interpreter"), [
    ({"frameworks": {"torch": "yes"}, "_exit": 0}, None),
    (probe_output(torch=CUDA_TORCH | {"version": ["2.3.1"]}), None),
    (probe_output(torch=CUDA_TORCH), {"version": 3.11, "_exit": 0}),
    (probe_output(torch=CUDA_TORCH), {"version": "3.11.7", "prefix": ["x"], "_exit": 0}),
])
async def test_c5_fails_clearly_on_hostile_probe_output(tmp_path: Path, frameworks: dict[str, Any],
                                                  interpreter: dict[str, Any] | None) -> None:
    runner = c5_runner(tmp_path, {"torch_version": "2.3.1"}, frameworks)
    if interpreter is not None:
        runner.state.interpreter = interpreter
    result = await runner._audit()
    assert (result.status, result.category) == ("fail", "runtime")
    assert result.evidence["probe_errors"]
    json.dumps(result.evidence, default=str)
