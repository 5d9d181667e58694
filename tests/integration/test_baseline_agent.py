"""The real baseline script builds real venvs for tiny repos, in an environment like the sandbox's
(clean, private HOME, plus what the adapter forwards): online through the package registry (small
pure-Python packages only), offline from the base interpreter, and failing fast without a network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from resenv.engine.agents.baseline import SCRIPT, forwarded_env
from resenv.probes.report import load_report

EVENT_TYPES = {"message", "tool_call", "output", "tool_result", "error"}


def make_repo(root: Path, files: dict[str, str]) -> Path:
    repo = root / "work" / "repo"
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return repo


def run_agent(repo: Path, *args: str, env_extra: dict[str, str] | None = None, forward: bool = True,
              timeout: float = 300) -> tuple[subprocess.CompletedProcess, list[dict], Path]:
    work = repo.parent
    home = work / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(work), "LANG": "C.UTF-8"}
    if forward:
        env.update(forwarded_env())
    env.update(env_extra or {})
    report = work / "report.json"
    done = subprocess.run(
        [sys.executable, "-u", str(SCRIPT), "--repo", str(repo), "--env", str(work / "env"), "--report", str(report),
         *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done, events, report


def check_events(events: list[dict]) -> None:
    """Every line is an event of a known type; every tool_call has exactly one tool_result."""
    assert events and all(event["type"] in EVENT_TYPES for event in events)
    calls = [e["id"] for e in events if e["type"] == "tool_call"]
    results = [e["id"] for e in events if e["type"] == "tool_result"]
    assert sorted(calls) == sorted(results) and len(set(calls)) == len(calls)
    for event in events:
        if event["type"] == "tool_call":
            assert event["name"] == "shell" and isinstance(event["command"], list) and event["step"]
        if event["type"] == "tool_result":
            assert {"exit_code", "seconds", "timed_out", "output_tail"} <= set(event)


def env_python_version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_online_build_with_declared_and_undeclared_dependency(tmp_path):
    repo = make_repo(tmp_path, {
        "requirements.txt": "six>=1.16\n",
        "main.py": """\
            import six
            from tabulate import tabulate  # undeclared: only the import scan finds it
            print(tabulate([[six.PY3]], headers=["py3"]))
        """,
    })
    done, events, report_path = run_agent(repo, "--budget-s", "600")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check_events(events)
    steps = {e["step"] for e in events if e["type"] == "tool_call"}
    assert {"env", "install:declared", "install:scanned", "check", "verify"} <= steps
    scanned = next(e for e in events if e["type"] == "tool_call" and e["step"] == "install:scanned")
    assert scanned["command"][-1] == "tabulate"
    load = load_report(report_path, sandbox_root=repo.parent)
    assert load.ok, load.errors
    report = load.report
    python = Path(report["python_path"])
    assert python == repo.parent / "env" / "bin" / "python" and python.exists()
    assert report["python_version"] == env_python_version(python)
    assert report["framework"] is None and report["cuda_available"] is None and report["gpu_count"] is None
    assert report["ddp_expected_ok"] is None
    assert {"six", "tabulate"} <= {name.lower() for name in report["packages"]}
    assert report["baseline"]["final"] is True and report["baseline"]["failures"] == []
    run = subprocess.run([str(python), "main.py"], cwd=repo, capture_output=True, text=True)
    assert run.returncode == 0 and "True" in run.stdout


NO_NETWORK = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}


def test_offline_reuses_the_base_interpreter(tmp_path):
    pytest.importorskip("numpy")  # in resenv's own venv (a matplotlib dependency): the base here
    repo = make_repo(tmp_path, {
        "requirements.txt": "numpy\n",
        "main.py": "import numpy as np\nassert np.arange(4).sum() == 6\nprint('ok', np.__version__)\n",
    })
    started = time.monotonic()
    done, events, report_path = run_agent(repo, "--offline", env_extra=NO_NETWORK)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check_events(events)
    for event in events:
        if event["type"] == "tool_call" and "pip" in event["command"] and "install" in event["command"]:
            assert "--no-index" in event["command"]
    load = load_report(report_path, sandbox_root=repo.parent)
    assert load.ok and load.report["baseline"]["offline"] is True
    python = load.report["python_path"]
    run = subprocess.run([python, "main.py"], cwd=repo, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr
    assert time.monotonic() - started < 120


def test_offline_missing_package_fails_clearly_and_still_reports(tmp_path):
    repo = make_repo(tmp_path, {"requirements.txt": "resenv-no-such-package-xyz==1.0\n", "main.py": "print(1)\n"})
    done, events, report_path = run_agent(repo, "--offline", env_extra=NO_NETWORK)
    assert done.returncode == 1
    errors = [e for e in events if e["type"] == "error"]
    assert [e["category"] for e in errors] == ["offline_miss"]
    load = load_report(report_path, sandbox_root=repo.parent)
    assert load.ok and load.report["baseline"]["failures"][0]["category"] == "offline_miss"


def test_network_failure_fails_fast_as_download_failed(tmp_path):
    repo = make_repo(tmp_path, {
        "requirements.txt": "six\n",
        "main.py": "import six\nimport tabulate\n",
    })
    started = time.monotonic()
    done, events, report_path = run_agent(repo, env_extra=NO_NETWORK, forward=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    assert elapsed < 90, f"took {elapsed:.0f} s"
    pip_calls = [e for e in events if e["type"] == "tool_call" and e["step"].startswith("install")]
    assert len(pip_calls) == 1  # after the first network failure nothing else is downloaded
    assert "--retries" in pip_calls[0]["command"] and "--timeout" in pip_calls[0]["command"]
    categories = [e["category"] for e in events if e["type"] == "error"]
    assert categories and set(categories) == {"download_failed"}
    load = load_report(report_path, sandbox_root=repo.parent)
    assert load.ok and load.report["python_path"].endswith("/env/bin/python")


def test_c_extension_is_built(tmp_path):
    repo = make_repo(tmp_path, {
        "setup.py": """\
            from setuptools import Extension, setup
            setup(name="cdemo", version="0.1", packages=["cdemo"],
                  ext_modules=[Extension("cdemo._c", ["cdemo/_c.c"])])
        """,
        "cdemo/__init__.py": "from cdemo._c import answer\n",
        "cdemo/_c.c": """\
            #define PY_SSIZE_T_CLEAN
            #include <Python.h>
            static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
            static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
            static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_c", NULL, -1, methods};
            PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&module); }
        """,
        "main.py": "import cdemo\nassert cdemo.answer() == 42\n",
    })
    done, events, report_path = run_agent(repo, "--budget-s", "600")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    project = [e for e in events if e["type"] == "tool_call" and e["step"] == "install:declared"]
    assert project and project[0]["command"][-2:] == ["-e", "."]
    python = load_report(report_path, sandbox_root=repo.parent).report["python_path"]
    run = subprocess.run([python, "main.py"], cwd=repo, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
