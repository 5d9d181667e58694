"""C2's host-side judge (probes/c2.py): the frameworks probe's output read as hostile input, and which
framework C2 judges."""

from __future__ import annotations

from typing import Any

import pytest

from resenv.engine.hosts.gpuinfo import cuda_supported
from resenv.probes.c2 import FRAMEWORKS, FrameworkSeen, judge_c2, read_frameworks
from resenv.probes.census import import_census


def entry(name: str, **fields: Any) -> dict[str, Any]:
    """One framework as the probe prints it: not installed unless `fields` say otherwise."""
    base = {"name": name, "installed": False, "importable": False, "version": None, "cuda_build": None,
            "cuda_available": None, "device_count": None, "devices": [], "error": f"ModuleNotFoundError: {name}"}
    if fields.get("importable"):
        base |= {"installed": True, "error": None}
    return base | fields


def output(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"frameworks": {name: entries.get(name) or entry(name) for name in FRAMEWORKS}, "_exit": 0}


CUDA_TORCH = entry("torch", importable=True, version="2.3.1+cu121", cuda_build="12.1", cuda_available=True,
                   device_count=1, devices=["NVIDIA H200"])
CPU_TORCH = entry("torch", importable=True, version="2.3.1+cpu", cuda_build=None, cuda_available=False,
                  device_count=0)
CUDA_JAX = entry("jax", importable=True, version="0.4.30", cuda_build="12.3", cuda_available=True, device_count=1)
CPU_TF = entry("tensorflow", importable=True, version="2.16.1", cuda_build=None, cuda_available=False,
               device_count=0)


def census(**files: str):
    return import_census({name.replace("__", "/") + ".py": text.encode() for name, text in files.items()})


def judge(out: dict[str, Any], repo=None, driver: str | None = "12.4"):
    seen, problems = read_frameworks(out)
    assert problems == [] and seen is not None
    return judge_c2(seen, repo, driver_cuda=driver, cuda_supported=cuda_supported)


# -- reading the probe's output ------------------------------------------------------------------
def test_a_well_formed_output_is_read_typed() -> None:
    seen, problems = read_frameworks(output(torch=CUDA_TORCH))
    assert problems == [] and seen is not None and set(seen) == set(FRAMEWORKS)
    assert seen["torch"] == FrameworkSeen("torch", installed=True, importable=True, version="2.3.1+cu121",
                                          cuda_build="12.1", cuda_available=True, device_count=1, error=None)
    assert seen["jax"].installed is False and seen["jax"].error == "ModuleNotFoundError: jax"


@pytest.mark.parametrize(("out", "problem"), [
    ([1, 2], "$: expected a JSON object, got an array"),
    ({"framework": "torch"}, "frameworks: expected an object, got nothing"),
    ({"frameworks": "torch"}, 'frameworks: expected an object, got "torch"'),
    (output(jax=None) | {"frameworks": {"torch": CUDA_TORCH, "tensorflow": entry("tensorflow")}},
     "frameworks.jax: expected an object, got nothing"),
    (output(torch=CUDA_TORCH | {"version": 2.3}), "frameworks.torch.version: expected a string or null, got 2.3"),
    (output(torch=CUDA_TORCH | {"device_count": True}),
     "frameworks.torch.device_count: expected a non-negative integer or null, got true"),
    (output(torch=CUDA_TORCH | {"device_count": -1}),
     "frameworks.torch.device_count: expected a non-negative integer or null, got -1"),
    (output(torch=CUDA_TORCH | {"cuda_available": "yes"}),
     'frameworks.torch.cuda_available: expected true, false or null, got "yes"'),
    (output(torch={k: v for k, v in CUDA_TORCH.items() if k != "importable"}),
     "frameworks.torch.importable: expected true or false, got nothing"),
    (output(torch=CUDA_TORCH | {"installed": False}),
     "frameworks.torch: importable but not installed"),
    (output(torch=CUDA_TORCH | {"error": {"x": 1}}), 'frameworks.torch.error: expected a string or null, got {"x": 1}'),
])
def test_a_wrong_type_anywhere_is_a_clear_problem_never_an_exception(out: Any, problem: str) -> None:
    seen, problems = read_frameworks(out)
    assert seen is None and problem in problems, problems


# -- which framework C2 judges ---------------------------------------------------------------------
def test_a_jax_repo_is_judged_on_jax_beside_a_cpu_only_torch() -> None:
    repo = census(train="import jax\nimport jax.numpy as jnp\n")
    verdict = judge(output(torch=CPU_TORCH, jax=CUDA_JAX), repo)
    assert (verdict.status, verdict.category, verdict.judged) == ("pass", None, ["jax"])
    assert verdict.framework == "jax" and "imports" in verdict.basis


def test_every_framework_the_repo_imports_unconditionally_must_pass() -> None:
    repo = census(a="import torch\n", b="import tensorflow as tf\n")
    verdict = judge(output(torch=CUDA_TORCH, tensorflow=CPU_TF), repo)
    assert (verdict.status, verdict.category, verdict.framework) == ("fail", "cuda_mismatch", "tensorflow")
    assert verdict.judged == ["torch", "tensorflow"] and "tensorflow" in verdict.reason


def test_a_framework_imported_only_conditionally_is_judged_when_it_is_the_only_one() -> None:
    repo = census(a="import torch\n", b="try:\n    import tensorflow\nexcept ImportError:\n    tensorflow = None\n")
    assert judge(output(torch=CUDA_TORCH, tensorflow=CPU_TF), repo).judged == ["torch"]
    guarded = census(a="def main():\n    import jax\n", b="try:\n    import torch\nexcept ImportError:\n    pass\n")
    verdict = judge(output(torch=CPU_TORCH, jax=CUDA_JAX), guarded)
    # only conditional imports: the first of them that imports, in the order torch, jax, tensorflow
    assert verdict.judged == ["torch"] and verdict.category == "cuda_mismatch"


def test_without_framework_imports_the_first_importable_in_order_is_judged() -> None:
    plain = census(main="import numpy\n")
    assert judge(output(torch=CPU_TORCH, jax=CUDA_JAX), plain).judged == ["torch"]
    assert judge(output(jax=CUDA_JAX), plain).judged == ["jax"]
    assert judge(output(jax=CUDA_JAX), None).judged == ["jax"]  # no census at all
    nothing = judge(output(), plain)
    assert (nothing.status, nothing.category) == ("fail", "deps_missing")
    assert "torch, jax, tensorflow" in nothing.reason


@pytest.mark.parametrize(("torch", "driver", "category"), [
    (CUDA_TORCH, "12.4", None),
    (CPU_TORCH, "12.4", "cuda_mismatch"),
    (CUDA_TORCH | {"cuda_build": "12.6"}, "12.4", "cuda_mismatch"),
    (CUDA_TORCH | {"cuda_available": False, "device_count": 0}, "12.4", "no_gpu"),
    (CUDA_TORCH | {"error": "RuntimeError: CUDA error: no kernel image is available for execution on the device"},
     "12.4", "cuda_mismatch"),
    (entry("torch", installed=True, error="OSError: libcudart.so.12: cannot open shared object file: No such file"),
     "12.4", "cuda_mismatch"),
    (entry("torch", installed=True, error="ModuleNotFoundError: No module named 'numpy'"), "12.4", "deps_missing"),
    (entry("torch"), "12.4", "deps_missing"),
])
def test_the_judged_frameworks_verdict(torch: dict[str, Any], driver: str, category: str | None) -> None:
    verdict = judge(output(torch=torch), census(m="import torch\n"), driver)
    assert verdict.category == category and verdict.status == ("pass" if category is None else "fail")
    if category is not None:
        assert verdict.reason
