"""Failure categories decided from facts, through the real engine: the compiled modules the repo
declares at its pinned commit, and the agent's own log of which downloads failed.

The agents are `command` agents that build nothing: they report the engine's own interpreter (which
lacks the repo's modules) and print what an installer would have printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..conftest import resenv
from .test_pyramid import CPU_ONLY, NO_GPU_HOST, report_agent, results, write_suite

CPU_ENTRY = 'cpu: {command: "{python} main.py"}'
REPORT = report_agent({"python_path": sys.executable, "python_version": None, "gpu_count": None})


def agent(*lines: str) -> str:
    """A command agent that prints `lines` (an installer's log) and reports the engine's interpreter."""
    return "".join(f"echo '{line}'; " for line in lines) + REPORT


@pytest.mark.slow
def test_unbuilt_cmake_extension_with_an_unguessable_name_is_native_extension(tmp_path, cli_env):
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core", "pybind11"]\n'
                          'build-backend = "scikit_build_core.build"\n[project]\nname = "geo"\nversion = "0.1"\n',
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(geo LANGUAGES CXX)\n"
                          "find_package(pybind11 CONFIG REQUIRED)\npybind11_add_module(voxelize src/voxelize.cpp)\n",
        "src/voxelize.cpp": "// the extension's source\n",
        "main.py": "import voxelize\nprint(voxelize.grid(3))\n",
    }
    bench = write_suite(tmp_path, {"cmake-ext": {"files": files, "entrypoints": CPU_ENTRY, "not_applicable": CPU_ONLY}},
                        {"nobuild": agent("nothing built")}, NO_GPU_HOST)
    run = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    c1 = results(Path(cli_env["RESENV_DB"]))[("cmake-ext", "nobuild")]["C1"]
    assert c1[:2] == ("fail", "native_extension"), c1
    assert c1[2]["signature"] == "declared_extension_missing"


@pytest.mark.slow
def test_only_a_failed_download_of_the_missing_package_is_blamed(tmp_path, cli_env):
    files = {"main.py": "import yaml_resenv_probe\n"}
    bench = write_suite(
        tmp_path,
        {"needs-dep": {"files": files, "entrypoints": CPU_ENTRY, "not_applicable": CPU_ONLY}},
        {"failed": agent("ERROR: No matching distribution found for yaml-resenv-probe==9.9"),
         "other": agent("ERROR: No matching distribution found for einops"),
         "recovered": agent("ERROR: No matching distribution found for yaml-resenv-probe==9.9",
                            "Successfully installed yaml-resenv-probe-1.0")},
        NO_GPU_HOST,
    )
    run = resenv("run", str(bench), "--agent", "failed", "--agent", "other", "--agent", "recovered",
                 "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = results(Path(cli_env["RESENV_DB"]))
    failed = found[("needs-dep", "failed")]["C1"]
    assert failed[:2] == ("fail", "download_failed"), failed
    assert failed[2]["root_cause_line"] == "ERROR: No matching distribution found for yaml-resenv-probe==9.9"
    assert found[("needs-dep", "other")]["C1"][:2] == ("fail", "deps_missing")
    assert found[("needs-dep", "recovered")]["C1"][:2] == ("fail", "deps_missing")
