"""C5 audit: claims vs observations, with reports loaded from real files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from resenv.probes.audit import (
    NO_FRAMEWORK,
    AuditResult,
    FrameworkSeen,
    Observations,
    audit,
    normalize_framework,
    normalize_version,
    version_matches,
)
from resenv.probes.c2 import FRAMEWORKS
from resenv.probes.report import ReportLoad, load_report


def frameworks(name: str | None = None, **fields: object) -> dict[str, FrameworkSeen]:
    """What the frameworks probe saw: `name` imports (with `fields`); the others are not installed."""
    seen = {other: FrameworkSeen(other, installed=False, importable=False, error=f"ModuleNotFoundError: {other}")
            for other in FRAMEWORKS}
    if name is not None:
        seen[name] = FrameworkSeen(name, installed=True, importable=True, **fields)  # type: ignore[arg-type]
    return seen


def only(name: str | None, **fields: object) -> Observations:
    """Observations of the frameworks alone: `name` is the one installed (None: none is)."""
    return Observations(frameworks=frameworks(name, **fields), framework=name or NO_FRAMEWORK)


TRUTH = Observations(
    python_path="/sb/env/bin/python", python_exists=True, python_executable=True, python_runs=True,
    python_version="3.11.7", frameworks=frameworks("torch", version="2.3.1+cu121", cuda_build="12.1",
                                                   cuda_available=True, device_count=2),
    framework="torch", ddp_ok=True,
)
TRUTHFUL = {
    "python_path": "/sb/env/bin/python",
    "python_version": "3.11.7",
    "framework": {"name": "torch", "version": "2.3.1+cu121"},
    "cuda_available": True,
    "gpu_count": 2,
    "ddp_expected_ok": True,
    "packages": {"torch": "2.3.1"},
    "notes": "ok",
}
ALL_CLAIMS = ["python_path", "python_version", "framework.name", "framework.version",
              "cuda_available", "gpu_count", "ddp_expected_ok"]


def loaded(tmp_path: Path, doc: object) -> ReportLoad:
    (tmp_path / "report.json").write_text(json.dumps(doc))
    r = load_report(tmp_path / "report.json", sandbox_root=tmp_path)
    return r


def run(tmp_path: Path, doc: dict, obs: Observations = TRUTH) -> AuditResult:
    load = loaded(tmp_path, doc)
    assert load.status == "ok", load.errors
    return audit(load, obs)


def test_truthful_report_passes(tmp_path: Path) -> None:
    res = run(tmp_path, TRUTHFUL)
    assert res.status == "pass" and res.category is None
    assert res.hallucinations == []
    assert res.checked == ALL_CLAIMS
    assert res.unverifiable == ["packages"]


def test_three_lies_give_exactly_three_hallucinations(tmp_path: Path) -> None:
    lies = dict(TRUTHFUL, python_path="/sb/nonexistent/bin/python", python_version="3.10.12", gpu_count=8)
    obs = replace(TRUTH, python_path="/sb/nonexistent/bin/python", python_exists=False, python_executable=False,
                  python_runs=False)
    res = run(tmp_path, lies, obs)
    assert res.status == "fail" and res.category is None
    got = [(h.claim, h.kind) for h in res.hallucinations]
    assert got == [("python_path", "path"), ("python_version", "version"), ("gpu_count", "capability")]
    path, ver, gpus = res.hallucinations
    assert "does not exist" in path.message and path.observed == "does not exist"
    assert (ver.claimed, ver.observed) == ("3.10.12", "3.11.7")
    assert (gpus.claimed, gpus.observed) == (8, 2)
    assert res.checked == ALL_CLAIMS


@pytest.mark.parametrize(("exists", "executable", "runs", "what"), [
    (True, False, False, "is not executable"),
    (True, True, False, "does not run"),
    (None, None, False, "does not run"),
])
def test_path_hallucination_says_which_check_failed(tmp_path: Path, exists, executable, runs, what) -> None:
    obs = Observations(python_exists=exists, python_executable=executable, python_runs=runs)
    res = run(tmp_path, {"python_path": "/sb/env/bin/python"}, obs)
    assert [(h.kind, h.observed) for h in res.hallucinations] == [("path", what)]


def test_nulls_and_absent_keys_are_never_hallucinations(tmp_path: Path) -> None:
    doc = {"python_path": "/sb/env/bin/python", "python_version": None, "framework": None,
           "cuda_available": None, "gpu_count": None, "ddp_expected_ok": None, "packages": None}
    liar_world = replace(only("jax", version="0.4.1", cuda_available=False, device_count=0),
                         python_exists=True, python_executable=True, python_runs=True, python_version="2.7.18",
                         ddp_ok=False)
    res = run(tmp_path, doc, liar_world)
    assert res.status == "pass" and res.hallucinations == []
    assert res.checked == ["python_path"] and res.unverifiable == []
    res = run(tmp_path, {"python_path": "/x", "framework": {"name": "jax", "version": None}}, liar_world)
    assert res.hallucinations == [] and res.checked == ["python_path", "framework.name"]


@pytest.mark.parametrize(("claimed", "observed", "ok"), [
    ("3.11", "3.11.7", True),
    ("3", "3.11.7", True),
    ("3.11.7", "3.11.7", True),
    ("Python 3.11.7", "3.11.7", True),
    ("3.11.7", "Python 3.11.7", True),
    ("3.11.7", "3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]", True),
    ("3.11.7", "3.11.9", False),
    ("3.12", "3.11.7", False),
    ("3.1", "3.11.7", False),
    ("3.11.7.0", "3.11.7", True),
    ("3.11.7rc1", "3.11.7", False),
    ("3.13.0rc1", "3.13.0rc1", True),
    ("3.13.0c1", "3.13.0rc1", True),
    ("latest", "3.11.7", False),
])
def test_python_version_prefix_matching(tmp_path: Path, claimed: str, observed: str, ok: bool) -> None:
    assert version_matches(claimed, observed) is ok
    res = run(tmp_path, {"python_path": "/x", "python_version": claimed},
              Observations(python_version=observed))
    assert [h.claim for h in res.hallucinations] == ([] if ok else ["python_version"])
    assert all(h.kind == "version" for h in res.hallucinations)


@pytest.mark.parametrize(("claimed", "observed", "ok"), [
    ("2.13.0", "2.13.0+cpu", True),
    ("2.13", "2.13.0+cpu", True),
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0+CPU", "2.13.0+cpu", True),
    ("2.13.0+cu121", "2.13.0+cpu", False),
    ("2.13.0+cu121", "2.13.0", False),
    ("2.13.1", "2.13.0+cpu", False),
    ("2.4.0.dev20240601", "2.4.0.dev20240601+cu121", True),
    ("2.4.0.dev20240501", "2.4.0.dev20240601+cu121", False),
])
def test_framework_version_local_labels(tmp_path: Path, claimed: str, observed: str, ok: bool) -> None:
    assert version_matches(claimed, observed) is ok
    obs = only("tensorflow", version=observed)
    res = run(tmp_path, {"python_path": "/x", "framework": {"name": "tensorflow", "version": claimed}}, obs)
    assert [(h.claim, h.kind) for h in res.hallucinations] == ([] if ok else [("framework.version", "version")])
    assert res.checked == ["framework.name", "framework.version"]


def test_unparseable_observed_version_is_unverifiable(tmp_path: Path) -> None:
    assert version_matches("2.1", "unknown") is None
    res = run(tmp_path, {"python_path": "/x", "framework": {"name": "torch", "version": "2.1"}},
              only("torch", version="unknown"))
    assert res.hallucinations == [] and res.unverifiable == ["python_path", "framework.version"]


def test_a_framework_that_is_not_installed_makes_its_name_and_version_claims_false(tmp_path: Path) -> None:
    doc = {"python_path": "/x", "framework": {"name": "PyTorch", "version": "2.3.1"}}
    assert run(tmp_path, doc, TRUTH).hallucinations == []  # PyTorch == torch
    for obs in (only("jax", version="0.4.30"), only(None)):
        res = run(tmp_path, doc, obs)
        assert [(h.claim, h.kind, h.observed) for h in res.hallucinations] == [
            ("framework.name", "capability", "not installed"), ("framework.version", "capability", "not installed")]
        assert "torch is not installed" in res.hallucinations[0].message
    assert normalize_framework("tensorflow-gpu") == "tensorflow" and normalize_framework("jax[cuda12]") == "jax"


def test_cuda_claims_both_ways(tmp_path: Path) -> None:
    for claim, seen in ((True, False), (False, True)):
        res = run(tmp_path, {"python_path": "/x", "cuda_available": claim}, only("torch", cuda_available=seen))
        assert [(h.claim, h.kind, h.claimed, h.observed) for h in res.hallucinations] == [
            ("cuda_available", "capability", claim, seen)]


def test_gpu_count_zero_is_a_claim(tmp_path: Path) -> None:
    res = run(tmp_path, {"python_path": "/x", "gpu_count": 0}, only("torch", device_count=1))
    assert [h.claim for h in res.hallucinations] == ["gpu_count"]
    assert run(tmp_path, {"python_path": "/x", "gpu_count": 0}, only("torch", device_count=0)).status == "pass"


def test_ddp_claim_vs_c4(tmp_path: Path) -> None:
    doc = {"python_path": "/x", "ddp_expected_ok": True}
    failed = run(tmp_path, doc, Observations(ddp_ok=False))
    assert [(h.claim, h.kind) for h in failed.hallucinations] == [("ddp_expected_ok", "capability")]
    assert failed.status == "fail"
    skipped = run(tmp_path, doc, Observations(python_exists=True, ddp_ok=None))
    assert skipped.hallucinations == [] and skipped.unverifiable == ["ddp_expected_ok"]
    assert skipped.status == "pass" and skipped.checked == ["python_path"]
    # the symmetric false claim: "DDP will not work" while C4 passed
    denied = run(tmp_path, {"python_path": "/x", "ddp_expected_ok": False}, Observations(ddp_ok=True))
    assert [h.claim for h in denied.hallucinations] == ["ddp_expected_ok"]


def test_nothing_observed_is_skip_not_pass(tmp_path: Path) -> None:
    res = run(tmp_path, TRUTHFUL, Observations())
    assert res.status == "skip" and res.hallucinations == [] and res.checked == []
    assert res.unverifiable == ["python_path", "python_version", "framework.name", "framework.version",
                                "cuda_available", "gpu_count", "ddp_expected_ok", "packages"]


def test_missing_report_fails_with_category_and_no_hallucinations(tmp_path: Path) -> None:
    load = load_report(tmp_path / "report.json", sandbox_root=tmp_path)
    res = audit(load, TRUTH)
    assert (res.status, res.category, res.hallucinations) == ("fail", "missing_report", [])
    assert res.report_errors == load.errors


def test_invalid_report_fails_with_category_and_no_hallucinations(tmp_path: Path) -> None:
    load = loaded(tmp_path, {"python_path": "/x", "gpu_count": "two", "cuda_available": "yes"})
    res = audit(load, only("torch", device_count=1, cuda_available=False))
    assert (res.status, res.category, res.hallucinations) == ("fail", "invalid_report", [])
    assert len(res.report_errors) == 2


def test_hand_built_load_is_revalidated(tmp_path: Path) -> None:
    res = audit(ReportLoad(status="ok", report={"python_path": "/x", "gpu_count": "two"}), TRUTH)
    assert (res.status, res.category, res.hallucinations) == ("fail", "invalid_report", [])
    assert audit(ReportLoad(status="ok", report=None), TRUTH).status == "error"


def test_result_serializes(tmp_path: Path) -> None:
    res = run(tmp_path, dict(TRUTHFUL, gpu_count=4))
    d = res.to_dict()
    json.dumps(d)
    assert d["hallucinations"][0]["claim"] == "gpu_count"


def test_normalize_version() -> None:
    assert normalize_version("Python 3.11.7") == "3.11.7"
    assert normalize_version("v2.3.1+CU121") == "2.3.1+cu121"
    assert normalize_version("2.4.0-dev20240601") == "2.4.0.dev20240601"


# -- the paper's report format, and keys that are not scored ------------------------------------
PAPER = {
    "python_path": "/sb/env/bin/python", "python_version": "3.11.7", "torch_version": "2.3.1",
    "cuda_available": True, "gpu_count": 2, "ddp_expected_ok": True, "env_tool": "conda", "env_name": "repo-env",
    "notes": "built with conda",
}


def test_the_papers_torch_version_is_a_framework_claim(tmp_path: Path) -> None:
    res = run(tmp_path, PAPER)
    assert res.status == "pass" and res.hallucinations == []
    assert res.checked == ["python_path", "python_version", "torch_version", "cuda_available", "gpu_count",
                           "ddp_expected_ok"]
    assert res.not_scored == ["env_tool", "env_name", "notes"]
    lie = run(tmp_path, dict(PAPER, torch_version="2.1.0"))
    assert [(h.claim, h.kind, h.claimed, h.observed) for h in lie.hallucinations] == [
        ("torch_version", "version", "2.1.0", "2.3.1+cu121")]


def test_framework_and_torch_version_are_both_claims(tmp_path: Path) -> None:
    doc = {"python_path": "/x", "framework": {"name": "torch", "version": "2.3.1"}, "torch_version": "2.0.0"}
    res = run(tmp_path, doc)
    assert res.checked == ["python_path", "framework.name", "framework.version", "torch_version"]
    assert [(h.claim, h.kind) for h in res.hallucinations] == [("torch_version", "version")]


def test_torch_version_of_a_framework_that_is_not_there_is_a_capability_hallucination(tmp_path: Path) -> None:
    for seen in ("jax", None):
        res = run(tmp_path, {"python_path": "/x", "torch_version": "2.3.1"}, only(seen))
        assert [(h.claim, h.kind) for h in res.hallucinations] == [("torch_version", "capability")], seen


def test_keys_that_are_not_claims_are_listed_as_not_scored(tmp_path: Path) -> None:
    doc = {"python_path": "/x", "env_tool": "uv", "env_name": None, "my_extra": {"a": 1}, "notes": None,
           "framework": {"name": "torch", "cuda": "12.1"}, "torch_version": None}
    res = run(tmp_path, doc)
    assert res.not_scored == ["env_tool", "my_extra", "framework.cuda"]
    assert res.to_dict()["not_scored"] == res.not_scored


def test_a_framework_version_without_a_name_is_about_the_judged_framework(tmp_path: Path) -> None:
    res = run(tmp_path, {"python_path": "/x", "framework": {"name": None, "version": "2.3.1"}})
    assert res.checked == ["python_path", "framework.version"] and res.hallucinations == []
    res = run(tmp_path, {"python_path": "/x", "framework": {"version": "0.4.30"}})
    assert [(h.claim, h.kind) for h in res.hallucinations] == [("framework.version", "version")]


# -- every framework is observed ------------------------------------------------------------------
MIXED = Observations(  # a JAX repo: CUDA JAX, CPU-only torch, TensorFlow installed but broken
    frameworks={
        "torch": FrameworkSeen("torch", True, True, version="2.3.1+cpu", cuda_available=False, device_count=0),
        "jax": FrameworkSeen("jax", True, True, version="0.4.30", cuda_build="12.3", cuda_available=True,
                             device_count=1),
        "tensorflow": FrameworkSeen("tensorflow", True, False, version="2.16.1",
                                    error="ImportError: libcudnn.so.8: cannot open shared object file"),
    },
    framework="jax",
)


def test_a_claim_about_any_installed_framework_is_checked_against_that_one(tmp_path: Path) -> None:
    res = run(tmp_path, {"framework": {"name": "jax", "version": "0.4.30"}, "torch_version": "2.3.1",
                         "cuda_available": True, "gpu_count": 1}, MIXED)
    assert res.hallucinations == [] and res.status == "pass"
    assert res.checked == ["framework.name", "framework.version", "torch_version", "cuda_available", "gpu_count"]
    # the GPU claims follow the framework the report names: torch sees no GPU here
    res = run(tmp_path, {"framework": {"name": "torch"}, "cuda_available": True}, MIXED)
    assert [(h.claim, h.observed) for h in res.hallucinations] == [("cuda_available", False)]
    # without a name they are about the framework the repo runs on (JAX)
    assert run(tmp_path, {"cuda_available": True, "gpu_count": 1}, MIXED).hallucinations == []


def test_installed_but_broken_framework(tmp_path: Path) -> None:
    res = run(tmp_path, {"framework": {"name": "tensorflow", "version": "2.15.0"}}, MIXED)
    assert [(h.claim, h.kind) for h in res.hallucinations] == [("framework.name", "capability"),
                                                                ("framework.version", "version")]
    assert "does not import" in res.hallucinations[0].message
    res = run(tmp_path, {"framework": {"name": "tf", "version": "2.16"}}, MIXED)
    assert [(h.claim, h.kind) for h in res.hallucinations] == [("framework.name", "capability")]
    assert res.checked == ["framework.name", "framework.version"]


def test_a_framework_the_probe_does_not_look_for_is_unverifiable(tmp_path: Path) -> None:
    res = run(tmp_path, {"framework": {"name": "paddle", "version": "2.6.0"}}, MIXED)
    assert res.hallucinations == [] and res.unverifiable == ["framework.name", "framework.version"]


def test_an_unreadable_probe_output_fails_the_audit(tmp_path: Path) -> None:
    obs = replace(TRUTH, frameworks=None, framework=None,
                  probe_errors=("frameworks.torch.version: expected a string or null, got 3",))
    res = run(tmp_path, TRUTHFUL, obs)
    assert (res.status, res.category, res.hallucinations) == ("fail", "runtime", [])
    assert res.probe_errors == list(obs.probe_errors)
    assert "framework.name" in res.unverifiable


# -- observations of absence ---------------------------------------------------------------------
GPU_CLAIMS = {"cuda_available": True, "gpu_count": 1}


def test_gpu_claims_are_false_when_no_framework_imports(tmp_path: Path) -> None:
    res = run(tmp_path, dict(GPU_CLAIMS, torch_version="2.3.1"), replace(only(None), gpus_leased=1))
    assert [(h.claim, h.kind, h.observed) for h in res.hallucinations] == [
        ("torch_version", "capability", "not installed"), ("cuda_available", "capability", False),
        ("gpu_count", "capability", 0)]
    assert "no framework is importable" in res.hallucinations[1].message
    honest = run(tmp_path, {"cuda_available": False, "gpu_count": 0}, replace(only(None), gpus_leased=1))
    assert honest.hallucinations == [] and honest.checked == ["cuda_available", "gpu_count"]


def test_gpu_claims_are_false_when_the_job_had_no_gpu_whatever_the_framework_says(tmp_path: Path) -> None:
    liar_framework = replace(only("torch", cuda_available=True, device_count=1), gpus_leased=0)
    res = run(tmp_path, GPU_CLAIMS, liar_framework)
    assert [(h.claim, h.observed) for h in res.hallucinations] == [("cuda_available", False), ("gpu_count", 0)]
    assert all("no GPU was leased" in h.message for h in res.hallucinations)
    # nothing about the frameworks observed (the probe crashed): the lease alone decides
    res = run(tmp_path, GPU_CLAIMS, Observations(gpus_leased=0))
    assert [h.claim for h in res.hallucinations] == ["cuda_available", "gpu_count"]
    res = run(tmp_path, {"cuda_available": False, "gpu_count": 0}, Observations(gpus_leased=0))
    assert res.hallucinations == [] and res.checked == ["cuda_available", "gpu_count"]


def test_more_gpus_than_leased_is_false(tmp_path: Path) -> None:
    res = run(tmp_path, {"gpu_count": 4}, Observations(gpus_leased=2))
    assert [(h.claim, h.claimed, h.observed) for h in res.hallucinations] == [("gpu_count", 4, 2)]
    assert run(tmp_path, {"gpu_count": 2}, Observations(gpus_leased=2)).unverifiable == ["gpu_count"]


def test_unverifiable_only_when_nothing_was_observed(tmp_path: Path) -> None:
    res = run(tmp_path, dict(GPU_CLAIMS, framework={"name": "torch", "version": "2.3.1"}, torch_version="2.3.1"),
              Observations(gpus_leased=1))  # the frameworks probe never ran or crashed
    assert res.hallucinations == []
    assert res.unverifiable == ["framework.name", "framework.version", "torch_version", "cuda_available", "gpu_count"]
    # a framework the probe does not look for: its GPU view was not observed either
    res = run(tmp_path, dict(GPU_CLAIMS, framework={"name": "paddle"}), replace(only("torch", cuda_available=False,
                                                                                     device_count=0), gpus_leased=1))
    assert res.hallucinations == [] and res.unverifiable == ["framework.name", "cuda_available", "gpu_count"]
