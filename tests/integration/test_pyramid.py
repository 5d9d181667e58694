"""The real probes through the real engine on environments built with real venvs and pip.

Agents here are `command` agents that build a known environment (or lie about it) so each tier's
verdict is known in advance. Packages come from the package index (small ones) or, for torch, the
CPU build that lies on this kind of machine's disk. The GPU tiers run on declared GPUs with a fake
NVIDIA driver (tests/fakes/nvml_driver.py): an entrypoint "uses" its GPU by registering its PID there,
as a CUDA program creates a context; one that runs on the CPU registers nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import resenv
from ..fakes.nvml import FakeDriverDir
from .test_engine_run import db_rows

USES_SIX_AND_IDNA = "import six\nimport idna\nprint(six.moves.range(3), idna.encode('example.com'))\n"

NATIVE_SETUP = """\
from setuptools import Extension, setup
setup(name="fastmod", version="0.1", packages=["fastmod"],
      ext_modules=[Extension("fastmod._C", ["fastmod/_C.c"])])
"""
NATIVE_C = """\
#include <Python.h>
static PyObject *twice(PyObject *self, PyObject *arg) { return PyNumber_Add(arg, arg); }
static PyMethodDef methods[] = {{"twice", twice, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""
NATIVE_MAIN = "from fastmod._C import twice\nassert twice(21) == 42\n"

DDP_SCRIPT = """\
import os
import torch
import torch.distributed as dist

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
assert value.item() == world * (world + 1) / 2, value
print(f"rank {rank}/{world} backend {backend} all_reduce {value.item()}")
dist.destroy_process_group()
"""


def write_suite(root: Path, repos: dict[str, dict], agents: dict[str, str], hosts: str) -> Path:
    """A benchmark whose repos carry their own entrypoints and applicability."""
    lines = ["version: 1", "defaults:", "  suite: s", f"  agent: {next(iter(agents))}", "  host: h",
             "  retries: {infra: 0, backoff_s: 0.1}", "hosts:", textwrap.indent(hosts, "  ").rstrip(), "agents:"]
    for name, command in agents.items():
        lines += [f"  {name}:", "    kind: command", "    command: >-", textwrap.indent(command, "      ").rstrip()]
    lines += ["suites:", "  s:", "    repos:"]
    for repo_id, repo in repos.items():
        tree = root / "suites" / repo_id
        for name, content in repo["files"].items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(content)
        lines += [f"      - id: {repo_id}", f"        source: {{path: suites/{repo_id}}}",
                  "        entrypoints:", textwrap.indent(repo["entrypoints"], " " * 10).rstrip(),
                  f"        not_applicable: {repo.get('not_applicable', '{}')}"]
    path = root / "benchmark.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def results(db: Path) -> dict[tuple[str, str], dict[str, tuple[str, str | None, dict]]]:
    rows = db_rows(db, "SELECT j.repo_id, j.agent, t.tier, t.status, t.category, t.evidence_json FROM tier_results t"
                       " JOIN jobs j ON j.id = t.job_id ORDER BY t.id")
    out: dict = {}
    for row in rows:
        out.setdefault((row["repo_id"], row["agent"]), {})[row["tier"]] = (
            row["status"], row["category"], json.loads(row["evidence_json"]))
    return out


VENV_AGENT = """\
{python} -m venv {{env}} && {{env}}/bin/pip install -q --disable-pip-version-check {packages}
&& printf '{{{{"python_path": "%s", "python_version": null, "gpu_count": null}}}}' {{env}}/bin/python > {{report}}"""

NO_GPU_HOST = "h: {kind: local, slots: 2, gpus: 0}\n"


def local_host(gpus: str, slots: int = 2, *, expose: tuple[str, ...] = (), devices: tuple[str, ...] = ()) -> str:
    """A local host whose sandboxes also see `expose` (a shared test venv, read-only) and `devices`
    (the fake GPU driver's folder, read-write, as /dev/nvidia* are)."""
    process = f", process: {{expose: [{', '.join(expose)}], devices: [{', '.join(devices)}]}}"
    return f"h: {{kind: local, slots: {slots}, gpus: {gpus}{process}}}\n"


def torch_root(torch_python: str) -> str:
    return str(Path(torch_python).parent.parent)
CPU_ONLY = "{single_gpu: cpu only, multi_gpu: cpu only}"


@pytest.mark.slow
def test_complete_env_passes_and_missing_package_fails_with_that_module(tmp_path, cli_env):
    bench = write_suite(
        tmp_path,
        {"two-deps": {"files": {"main.py": USES_SIX_AND_IDNA, "requirements.txt": "six\nidna\n"},
                      "entrypoints": 'cpu: {command: "{python} main.py"}', "not_applicable": CPU_ONLY}},
        {"complete": VENV_AGENT.format(python=sys.executable, packages="six idna"),
         "partial": VENV_AGENT.format(python=sys.executable, packages="six")},
        NO_GPU_HOST,
    )
    run = resenv("run", str(bench), "--agent", "complete", "--agent", "partial", "--tiers", "C0,C1,C5",
                 "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = results(Path(cli_env["RESENV_DB"]))
    complete, partial = found[("two-deps", "complete")], found[("two-deps", "partial")]
    assert complete["C0"][:2] == ("pass", None) and complete["C0"][2]["missing"] == []
    assert complete["C1"][:2] == ("pass", None)
    assert complete["C5"][:2] == ("pass", None) and complete["C5"][2]["hallucinations"] == []
    assert partial["C0"][:2] == ("fail", "deps_missing") and partial["C0"][2]["missing"] == ["idna"]
    assert partial["C0"][2]["third_party_ratio"] == 0.5
    assert partial["C1"][:2] == ("fail", "deps_missing")
    assert "idna" in partial["C1"][2]["evidence_line"]


@pytest.mark.slow
def test_unbuilt_native_extension_fails_as_native_extension(tmp_path, cli_env):
    files = {"setup.py": NATIVE_SETUP, "fastmod/__init__.py": "", "fastmod/_C.c": NATIVE_C, "main.py": NATIVE_MAIN}
    bench = write_suite(
        tmp_path,
        {"native": {"files": files, "entrypoints": 'cpu: {command: "{python} main.py"}', "not_applicable": CPU_ONLY}},
        # Installs nothing and never builds the extension: the repo's own package imports, its _C does not.
        {"unbuilt": VENV_AGENT.format(python=sys.executable, packages="--upgrade pip")},
        NO_GPU_HOST,
    )
    run = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    c1 = results(Path(cli_env["RESENV_DB"]))[("native", "unbuilt")]["C1"]
    assert c1[:2] == ("fail", "native_extension"), c1


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One venv with the CPU build of torch 2.13.0 (from local disk on this kind of machine)."""
    root = tmp_path_factory.mktemp("torch-env")
    root.chmod(0o755)  # shown read-only to the sandboxes, whose unprivileged uid must be able to enter it
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    install = subprocess.run([str(root / "bin" / "pip"), "install", "-q", "torch==2.13.0"], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    return str(root / "bin" / "python")


def report_agent(report: dict) -> str:
    text = json.dumps(report).replace("{", "{{").replace("}", "}}")
    return f"printf '%s' '{text}' > {{report}}"


@pytest.mark.slow
def test_lies_are_caught_exactly_and_honest_nulls_are_not(tmp_path, cli_env, torch_python):
    import platform

    real_version = subprocess.run([torch_python, "-c", "import platform; print(platform.python_version())"],
                                  capture_output=True, text=True, check=True).stdout.strip()
    assert real_version == platform.python_version()
    liar = {"python_path": torch_python, "python_version": "3.9.1", "gpu_count": 8,
            "framework": {"name": "torch", "version": "2.13.0"}, "cuda_available": False}
    bad_path = {"python_path": "/opt/nowhere/bin/python", "python_version": real_version}
    honest = {"python_path": torch_python, "python_version": real_version, "framework": {"name": "torch", "version": None},
              "cuda_available": None, "gpu_count": None, "ddp_expected_ok": None}
    bench = write_suite(
        tmp_path,
        {"r": {"files": {"main.py": "import torch\nprint(torch.ones(2).sum())\n"},
               "entrypoints": 'cpu: {command: "{python} main.py"}', "not_applicable": CPU_ONLY}},
        {"liar": report_agent(liar), "badpath": report_agent(bad_path), "honest": report_agent(honest)},
        local_host("0", expose=(torch_root(torch_python),)),
    )
    run = resenv("run", str(bench), "--agent", "liar", "--agent", "badpath", "--agent", "honest", "--tiers", "C5",
                 "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = results(Path(cli_env["RESENV_DB"]))

    def kinds(agent: str) -> list[tuple[str, str]]:
        return [(h["claim"], h["kind"]) for h in found[("r", agent)]["C5"][2]["hallucinations"]]

    assert kinds("liar") == [("python_version", "version"), ("gpu_count", "capability")]
    assert found[("r", "liar")]["C5"][:2] == ("fail", None)
    assert kinds("badpath") == [("python_path", "path")]
    assert "python_version" in found[("r", "badpath")]["C5"][2]["unverifiable"]
    assert kinds("honest") == [] and found[("r", "honest")]["C5"][:2] == ("pass", None)


@pytest.mark.slow
def test_c4_launcher_runs_torchrun_on_gloo_and_audits_the_ddp_claim(tmp_path, cli_env, torch_python):
    """CPU-only C4: a host declaring two GPU ids lets the launcher path run with the gloo backend; each
    rank holds a context on its GPU in the fake driver, as it would with NCCL on real GPUs."""
    driver = FakeDriverDir(tmp_path / "fake-driver", gpus=2)
    cli_env.update(driver.engine_env())
    entrypoints = (
        'cpu: {command: "{python} -c \\"import torch\\""}\n'
        'multi_gpu: {command: "{python} -m torch.distributed.run --nproc_per_node {ngpus} --master_addr 127.0.0.1'
        ' --master_port $MASTER_PORT ddp.py", gpus: 2}'
    )
    bench = write_suite(
        tmp_path,
        {"ddp": {"files": {"ddp.py": driver.hold_context() + DDP_SCRIPT}, "entrypoints": entrypoints,
                 "not_applicable": "{single_gpu: DDP only}"},
         "ddp-broken": {"files": {"ddp.py": "import sys; sys.exit(7)\n"}, "entrypoints": entrypoints,
                        "not_applicable": "{single_gpu: DDP only}"}},
        {"claims-ddp": report_agent({"python_path": torch_python, "ddp_expected_ok": True})},
        local_host("[0, 1]", slots=1, expose=(torch_root(torch_python),), devices=(str(driver.root),)),
    )
    run = resenv("run", str(bench), "--tiers", "C4,C5", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = results(Path(cli_env["RESENV_DB"]))
    good, broken = found[("ddp", "claims-ddp")], found[("ddp-broken", "claims-ddp")]
    assert good["C4"][:2] == ("pass", None), good["C4"][2]["log_tail"]
    assert "rank 1/2 backend gloo all_reduce 3.0" in good["C4"][2]["log_tail"]
    assert good["C4"][2]["gpus"] == [0, 1]
    use = good["C4"][2]["gpu_use"]  # torchrun's workers run in sessions of their own: found by parentage
    assert use["source"] == "nvml" and [len(gpu["pids"]) for gpu in use["per_gpu"]] == [1, 1], use
    assert good["C5"][2]["hallucinations"] == []
    assert broken["C4"][0] == "fail"
    assert [(h["claim"], h["kind"]) for h in broken["C5"][2]["hallucinations"]] == [("ddp_expected_ok", "capability")]
    leases = db_rows(Path(cli_env["RESENV_DB"]), "SELECT gpus FROM leases")
    assert {row["gpus"] for row in leases} == {"0,1"}


# ---------------------------------------------------------------------------------- GPU use (C3/C4)
CPU_FALLBACK = """\
import os
device = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") and os.path.exists("/dev/nvidia0") else "cpu"
print(f"CUDA not available, falling back to CPU: training on {device}")
"""
SHORT_GPU_RUN = "import time\nprint('training on cuda')\ntime.sleep(0.5)\n"
# A launcher without torch: one worker per GPU, each in a session of its own (as torchrun starts them).
LAUNCH = """\
import os, subprocess, sys
ranks = int(sys.argv[1])
workers = [subprocess.Popen([sys.executable, "worker.py"], env=dict(os.environ, LOCAL_RANK=str(rank)),
                            start_new_session=True) for rank in range(ranks)]
sys.exit(max(worker.wait() for worker in workers))
"""


def gpu_repos(driver: FakeDriverDir) -> dict[str, dict]:
    single = 'cpu: {command: "{python} -c pass"}\nsingle_gpu: {command: "{python} main.py"}'
    multi = 'cpu: {command: "{python} -c pass"}\nmulti_gpu: {command: "{python} launch.py 2", gpus: 2}'
    rank0_only = ("import os\nif os.environ['LOCAL_RANK'] == '0':\n"
                  + "".join("    " + line + "\n" for line in driver.hold_context().splitlines())
                  + "import time\ntime.sleep(0.5)\n")
    return {
        "uses-gpu": {"files": {"main.py": driver.hold_context(mib=900) + SHORT_GPU_RUN}, "entrypoints": single,
                     "not_applicable": "{multi_gpu: single GPU}"},
        "cpu-fallback": {"files": {"main.py": CPU_FALLBACK}, "entrypoints": single,
                         "not_applicable": "{multi_gpu: single GPU}"},
        "crashes": {"files": {"main.py": "import json\njson.loads('{')\n"}, "entrypoints": single,
                    "not_applicable": "{multi_gpu: single GPU}"},
        "ddp-both": {"files": {"launch.py": LAUNCH, "worker.py": driver.hold_context() + SHORT_GPU_RUN},
                     "entrypoints": multi, "not_applicable": "{single_gpu: DDP only}"},
        "ddp-rank0": {"files": {"launch.py": LAUNCH, "worker.py": rank0_only},
                      "entrypoints": multi, "not_applicable": "{single_gpu: DDP only}"},
    }


def test_gpu_tiers_pass_only_with_the_drivers_word_that_the_entrypoint_used_every_leased_gpu(tmp_path, cli_env):
    driver = FakeDriverDir(tmp_path / "fake-driver", gpus=2)
    cli_env.update(driver.engine_env())
    bench = write_suite(tmp_path, gpu_repos(driver), {"honest": report_agent({"python_path": sys.executable})},
                        local_host("[0, 1]", devices=(str(driver.root),)))
    run = resenv("run", str(bench), "--tiers", "C3,C4", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = {repo: tiers for (repo, _), tiers in results(Path(cli_env["RESENV_DB"])).items()}

    status, category, evidence = found["uses-gpu"]["C3"]
    assert (status, category) == ("pass", None), evidence
    use = evidence["gpu_use"]
    assert use["source"] == "nvml" and use["host"] == "h" and use["gpus"] == evidence["gpus"] and use["samples"] >= 2
    [gpu] = use["per_gpu"]
    assert gpu["gpu"] == evidence["gpus"][0] and len(gpu["pids"]) == 1 and gpu["peak_mib"] == 900.0

    # exit 0 on the CPU: the driver never saw it
    status, category, evidence = found["cpu-fallback"]["C3"]
    assert (status, category) == ("fail", "no_gpu_use"), evidence
    assert evidence["exit_code"] == 0 and "no process of the entrypoint" in evidence["reason"]
    assert evidence["gpu_use"]["per_gpu"][0]["pids"] == []

    # a failing entrypoint keeps its own category; the GPU evidence is kept beside it
    status, category, evidence = found["crashes"]["C3"]
    assert (status, category) == ("fail", "runtime") and "gpu_use" in evidence

    assert found["ddp-both"]["C4"][:2] == ("pass", None), found["ddp-both"]["C4"][2]
    assert [len(gpu["pids"]) for gpu in found["ddp-both"]["C4"][2]["gpu_use"]["per_gpu"]] == [1, 1]
    status, category, evidence = found["ddp-rank0"]["C4"]
    assert (status, category) == ("fail", "no_gpu_use"), evidence
    assert "GPU 1" in evidence["reason"] and "GPU 0" not in evidence["reason"]

    report = resenv("report", "latest", env=cli_env, cwd=tmp_path)
    assert report.returncode == 0 and "fail (no_gpu_use)" in report.stdout, report.stdout


def test_a_host_whose_gpu_processes_cannot_be_seen_is_infra_not_a_pass(tmp_path, cli_env):
    driver = FakeDriverDir(tmp_path / "fake-driver", gpus=None)  # GPUs declared, the driver not loaded
    cli_env.update(driver.engine_env())
    repos = {repo: spec for repo, spec in gpu_repos(driver).items() if repo in ("uses-gpu", "crashes")}
    bench = write_suite(tmp_path, repos, {"honest": report_agent({"python_path": sys.executable})},
                        local_host("[0]", devices=(str(driver.root),)))
    run = resenv("run", str(bench), "--tiers", "C3", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    found = {repo: tiers for (repo, _), tiers in results(Path(cli_env["RESENV_DB"])).items()}
    status, category, evidence = found["uses-gpu"]["C3"]
    assert (status, category) == ("error", "infra"), evidence
    assert "GPU use cannot be proven on host h" in evidence["reason"] and "no NVIDIA driver" in evidence["reason"]
    assert "\n" not in evidence["reason"] and evidence["exit_code"] == 0
    # what fails is still the agent's failure: the exit code alone proves it
    assert found["crashes"]["C3"][:2] == ("fail", "runtime")
