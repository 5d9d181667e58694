"""The GPU-use watcher of C3/C4: the driver's process accounting, sampled while an entrypoint runs,
on fake drivers that speak pynvml's and nvidia-smi's exact shapes (this machine has no GPU), with real
processes so that process groups, sessions and parent chains are the kernel's own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from resenv.engine import gpuwatch
from resenv.engine.gpuwatch import (
    REMOTE_PROBE_PROCESSES, NvmlWatch, SmiWatch, Unobservable, parse_probe_processes, watch_for,
)

from ..fakes.nvml import FakeDriverDir, FakeNVMLError, fake_pynvml
from .test_telemetry import fake_proc

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "standin.py"
GPU0_UUID = "GPU-68bd2f7f-8094-66bf-8521-2b6b0385931b"  # the recorded H200's; the stand-in derives GPU i's


def sleeper(seconds: float = 5.0, code: str = "") -> subprocess.Popen:
    """A process in a session of its own, as a sandbox starts an entrypoint (its pid is its pgid)."""
    return subprocess.Popen([sys.executable, "-c", f"{code}\nimport time; time.sleep({seconds})"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []

    def start(*args, **kwargs) -> subprocess.Popen:
        proc = sleeper(*args, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


async def watched(watch, root: int | None, seconds: float = 0.3):
    await watch.start()
    if root is not None:
        watch.started(root)
    await asyncio.sleep(seconds)
    return await watch.stop()


# ------------------------------------------------------------------------------------- NVML (local)
async def test_the_probes_process_on_the_leased_gpu_is_the_evidence(processes):
    entry = processes()
    nvml = fake_pynvml(gpus=2, processes={1: [entry.pid]}, used_mib=1138)
    use = await watched(NvmlWatch("local", (1,), nvml=nvml, interval_s=0.05), entry.pid)
    verdict = use.verdict()
    assert (verdict.status, verdict.category) == ("pass", None)
    evidence = use.evidence()
    assert evidence["source"] == "nvml" and evidence["gpus"] == [1] and evidence["interval_s"] == 0.05
    assert evidence["samples"] >= 3
    [gpu] = evidence["per_gpu"]
    assert (gpu["gpu"], gpu["pids"], gpu["peak_mib"]) == (1, [entry.pid], 1138.0)
    assert 1 <= gpu["samples"] <= evidence["samples"]
    assert nvml.calls["init"] == nvml.calls["shutdown"] == 1


async def test_a_cpu_fallback_shows_no_process_and_fails_no_gpu_use(processes):
    entry = processes()
    # Someone else's process on the leased GPU and the probe's own on a GPU it was not leased prove nothing.
    nvml = fake_pynvml(gpus=2, processes={1: [os.getpid()], 0: [entry.pid]})
    use = await watched(NvmlWatch("local", (1,), nvml=nvml, interval_s=0.05), entry.pid)
    verdict = use.verdict()
    assert (verdict.status, verdict.category) == ("fail", "no_gpu_use")
    assert "GPU 1" in verdict.reason and "nvml" in verdict.reason
    evidence = use.evidence()
    assert evidence["per_gpu"] == [{"gpu": 1, "pids": [], "peak_mib": None, "samples": 0,
                                    "other_pids": [os.getpid()], "unseen_pids": []}]


async def test_a_process_this_machine_cannot_see_leaves_the_gpu_unjudged(tmp_path):
    # An engine in a container of its own gets the driver's host PIDs, which its /proc does not have:
    # such a process may be the entrypoint's, so the GPU cannot be judged either way.
    proc = fake_proc(tmp_path, {77: {}})
    nvml = fake_pynvml(gpus=1, processes={0: [5555]})
    use = await watched(NvmlWatch("local", (0,), nvml=nvml, interval_s=0.05, proc_root=str(proc)), 77)
    verdict = use.verdict()
    assert (verdict.status, verdict.category) == ("error", "infra")
    assert "5555" in verdict.reason and "PID namespace" in verdict.reason
    assert use.evidence()["per_gpu"][0]["unseen_pids"] == [5555]


async def test_a_descendant_in_a_session_of_its_own_is_the_probes(processes):
    # torchrun starts its workers with start_new_session: their group is not the entrypoint's.
    entry = processes(code=(
        "import subprocess, sys\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)'], start_new_session=True)\n"
        "print(w.pid, flush=True)"))
    worker = int(entry.stdout.readline())
    assert os.getpgid(worker) != entry.pid
    try:
        use = await watched(NvmlWatch("local", (0,), nvml=fake_pynvml(processes={0: [worker]}), interval_s=0.05),
                            entry.pid)
        assert use.verdict().status == "pass"
        assert use.evidence()["per_gpu"][0]["pids"] == [worker]
    finally:
        os.kill(worker, 9)


async def test_c4_needs_a_process_of_the_probe_on_every_leased_gpu(processes):
    entry = processes()
    running = {0: [entry.pid]}
    nvml = fake_pynvml(gpus=2, processes=running)
    one = await watched(NvmlWatch("local", (0, 1), nvml=nvml, interval_s=0.05), entry.pid)
    assert (one.verdict().status, one.verdict().category) == ("fail", "no_gpu_use")
    assert "GPU 1" in one.verdict().reason and "GPU 0" not in one.verdict().reason
    running[1] = [entry.pid]
    both = await watched(NvmlWatch("local", (0, 1), nvml=nvml, interval_s=0.05), entry.pid)
    assert both.verdict().status == "pass"
    assert [gpu["pids"] for gpu in both.evidence()["per_gpu"]] == [[entry.pid], [entry.pid]]


async def test_a_containers_processes_are_known_by_its_container_id_only(tmp_path):
    cid = "ab" * 32
    proc = fake_proc(tmp_path, {
        4242: {"cgroup": f"0::/system.slice/docker-{cid}.scope\n"},
        77: {"stat": "77 (python) S 1 77 77 0"},  # a host process whose pgid equals the in-container pgid
    })
    nvml = fake_pynvml(gpus=1, processes={0: [4242, 77]})
    watch = NvmlWatch("local", (0,), nvml=nvml, interval_s=0.05, container_id=cid, proc_root=str(proc))
    use = await watched(watch, 77)  # a container's exec announces its pgid in the container's namespace
    assert use.verdict().status == "pass"
    assert use.evidence()["per_gpu"][0]["pids"] == [4242]
    assert use.evidence()["per_gpu"][0]["other_pids"] == [77]


async def test_no_driver_cannot_prove_either_way():
    nvml = fake_pynvml(init_error=FakeNVMLError("Driver Not Loaded"))
    use = await watched(NvmlWatch("local", (0,), nvml=nvml, interval_s=0.05), 1)
    verdict = use.verdict()
    assert (verdict.status, verdict.category) == ("error", "infra")
    assert "no NVIDIA driver" in verdict.reason and "Driver Not Loaded" in verdict.reason
    assert "\n" not in verdict.reason


async def test_without_nvidia_ml_py_the_host_cannot_be_observed(monkeypatch):
    def missing():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(gpuwatch, "load_pynvml", missing)
    use = await watched(NvmlWatch("local", (0,), interval_s=0.05), 1)
    assert (use.verdict().status, use.verdict().category) == ("error", "infra")
    assert "nvidia-ml-py" in use.verdict().reason


async def test_a_leased_gpu_the_driver_does_not_have_cannot_be_observed():
    use = await watched(NvmlWatch("local", (3,), nvml=fake_pynvml(gpus=2), interval_s=0.05), 1)
    assert (use.verdict().status, use.verdict().category) == ("error", "infra")
    assert "GPU 3" in use.verdict().reason


async def test_a_process_query_that_always_fails_proves_nothing(processes):
    entry = processes()
    nvml = fake_pynvml(processes={0: [entry.pid]}, processes_error=FakeNVMLError("Unknown Error"))
    use = await watched(NvmlWatch("local", (0,), nvml=nvml, interval_s=0.05), entry.pid)
    assert (use.verdict().status, use.verdict().category) == ("error", "infra")
    assert "Unknown Error" in use.verdict().reason
    assert use.evidence()["samples"] == 0 and use.evidence()["errors"]


async def test_a_short_run_is_caught_and_a_dead_process_is_not_listed(tmp_path, monkeypatch):
    driver = FakeDriverDir(tmp_path / "driver", gpus=1)
    for key, value in driver.engine_env().items():
        monkeypatch.setenv(key, value)
    watch = NvmlWatch("local", (0,), interval_s=0.1)  # the real loader, pointed at the fake driver
    await watch.start()
    entry = subprocess.Popen([sys.executable, "-c", driver.hold_context(mib=300) + "import time; time.sleep(0.3)"],
                             start_new_session=True, env={"CUDA_VISIBLE_DEVICES": "0", "PATH": os.environ["PATH"]})
    watch.started(entry.pid)
    await asyncio.to_thread(entry.wait)
    await asyncio.sleep(0.3)  # samples after its end list nothing
    use = await watch.stop()
    assert use.verdict().status == "pass"
    gpu = use.evidence()["per_gpu"][0]
    assert gpu["pids"] == [entry.pid] and gpu["peak_mib"] == 300.0
    assert gpu["samples"] < use.evidence()["samples"]


async def test_sampling_never_blocks_the_event_loop(processes):
    entry = processes()
    nvml = fake_pynvml(processes={0: [entry.pid]})
    query = nvml.nvmlDeviceGetComputeRunningProcesses

    def slow(handle):
        time.sleep(0.2)  # a driver call that takes its time
        return query(handle)

    nvml.nvmlDeviceGetComputeRunningProcesses = slow
    watch = NvmlWatch("local", (0,), nvml=nvml, interval_s=0.05)
    await watch.start()
    watch.started(entry.pid)
    gaps, last = [], time.monotonic()
    for _ in range(60):
        await asyncio.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    use = await watch.stop()
    assert max(gaps) < 0.1, max(gaps)
    assert use.verdict().status == "pass"


def test_peak_mib_is_what_the_probes_processes_held_together():
    use = gpuwatch.GpuUse("nvml", "h", (0,), 0.1)
    whose = {1: gpuwatch.OURS, 2: gpuwatch.OURS, 3: gpuwatch.OTHER}.__getitem__
    use.add_sample([(0, 1, 300.0), (0, 2, 200.0), (0, 3, 9000.0)], whose)
    use.add_sample([(0, 1, 400.0)], whose)
    use.add_sample([(0, 3, 9000.0)], whose)
    [gpu] = use.evidence()["per_gpu"]
    assert (gpu["pids"], gpu["peak_mib"], gpu["samples"], gpu["other_pids"]) == ([1, 2], 500.0, 2, [3])
    assert use.samples == 3


# ------------------------------------------------------------------------------------- the host decides
def test_each_host_kind_gets_its_source():
    sandbox = SimpleNamespace()
    local = watch_for(SimpleNamespace(kind="local", name="l"), sandbox, (0,))
    assert isinstance(local, NvmlWatch)
    ssh = watch_for(SimpleNamespace(kind="ssh", name="s", connection=object()), sandbox, (0,))
    assert isinstance(ssh, SmiWatch)
    slurm = watch_for(SimpleNamespace(kind="slurm", name="c", monitor=object()), sandbox, (0, 1))
    assert isinstance(slurm, Unobservable)


async def test_a_slurm_host_cannot_be_observed_and_says_why():
    watch = watch_for(SimpleNamespace(kind="slurm", name="cluster", monitor=object()), SimpleNamespace(), (0,))
    use = await watched(watch, 1, seconds=0)
    verdict = use.verdict()
    assert (verdict.status, verdict.category) == ("error", "infra")
    assert "Slurm" in verdict.reason and "cluster" in verdict.reason and "\n" not in verdict.reason
    assert use.evidence()["source"] is None and use.evidence()["unobservable"] in verdict.reason


# ------------------------------------------------------------------------------------- nvidia-smi (SSH)
def test_remote_rows_and_lineage_map_processes_to_the_probe():
    ctr = "c" * 64
    text = "\n".join([
        f"{GPU0_UUID}|101|1024||/w",             # the entrypoint itself (its pid is the root)
        f"{GPU0_UUID}|102|2048||/elsewhere",     # a torchrun worker: own session, parent is 101
        f"{GPU0_UUID}|103|5||/w",                # someone else's
        f"{GPU0_UUID}|104|7|{ctr}|/",            # in a container
        "lineage|101| 101:101 1:1",
        "lineage|102| 102:102 101:101 1:1",
        "lineage|103| 103:103 50:50 1:1",
        f"{GPU0_UUID}|105|9||",                  # not in the host's /proc: its chain is empty
        "lineage|104| 104:104 1:1",
        "lineage|105|",
    ])
    found = parse_probe_processes(text, "h", {GPU0_UUID: 0}, root=101, container_id=None)
    assert [(p.gpu, p.pid, p.used_mib) for p in found["ours"]] == [(0, 101, 1024.0), (0, 102, 2048.0)]
    assert sorted(p.pid for p in found["other"]) == [103, 104] and [p.pid for p in found["unseen"]] == [105]
    found = parse_probe_processes(text, "h", {GPU0_UUID: 0}, root=101, container_id=ctr)
    assert [p.pid for p in found["ours"]] == [104]


def test_the_remote_query_reads_the_lineage_from_the_hosts_proc(tmp_path, processes):
    contexts = FakeDriverDir(tmp_path / "driver", gpus=2)
    entry = processes(code=(
        "import subprocess, sys\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)'], start_new_session=True)\n"
        "print(w.pid, flush=True)"))
    worker = int(entry.stdout.readline())
    try:
        contexts.register(worker, 1, 700)
        contexts.register(os.getpid(), 1, 5)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").symlink_to(STANDIN)
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_GPUS": "2", "STANDIN_CONTEXTS": str(contexts.root)}
        out = subprocess.run(["sh", "-c", REMOTE_PROBE_PROCESSES], env=env, capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        gpu1 = GPU0_UUID[:-3] + "001"
        found = parse_probe_processes(out.stdout, "h", {GPU0_UUID: 0, gpu1: 1}, root=entry.pid, container_id=None)
        assert [(p.gpu, p.pid, p.used_mib) for p in found["ours"]] == [(1, worker, 700.0)], out.stdout
        assert [p.pid for p in found["other"]] == [os.getpid()] and found["unseen"] == []
    finally:
        os.kill(worker, 9)
