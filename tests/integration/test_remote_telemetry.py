"""Remote GPU telemetry through a real sshd: one `nvidia-smi -lms` stream per host, replayed by a
stand-in printing the recorded H200 output (this machine has no GPU), in the engine and alone; and the
C3/C4 GPU-use watcher's `nvidia-smi --query-compute-apps` over the host's connection."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from resenv.engine.gpuwatch import SmiWatch
from resenv.engine.sandbox.remote import SshConnection, SshTarget
from resenv.engine.hosts.telemetry import NO_DRIVER, SMI_STREAM, SmiStreamSampler

from ..conftest import cli_environ, rows
from ..fakes.nvml import FakeDriverDir
from ..sshd_rig import make_sshd, sshd_available, standin_bin
from ..unit.test_telemetry import ListSink
from .test_ssh_hosts import MAIN, bench_text

pytestmark = [pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server"),
              pytest.mark.timeout(120)]


def target(server, name="h") -> SshTarget:
    return SshTarget(name=name, address=server.address, port=server.port, user="root",
                     key=str(server.client_key), known_hosts=str(server.known_hosts))


async def test_stream_sampler_reads_recorded_rows_and_survives_a_cut_stream(tmp_path):
    bin_dir = standin_bin(tmp_path)
    server = make_sshd(tmp_path / "sshd", set_env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                                                    "STANDIN_GPUS": "8", "STANDIN_TICKS": "3", "STANDIN_CUT": "1"})
    connection = SshConnection(target(server))
    try:
        await connection.connect()
        sink = ListSink()
        sampler = SmiStreamSampler("h", connection, sink, command=SMI_STREAM.replace("1000", "100"),
                                   backoff_start_s=0.1)
        sampler.start()
        deadline = time.monotonic() + 20
        while sampler.restarts < 2:  # the stream ended (cut mid-row) and was started again
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await sampler.stop()
        samples = sink._buffer
        assert len(samples) >= 2 * 3 * 8 and {s.gpu for s in samples} == set(range(8))
        assert all(s.mem_total_mib == 143771 and s.temp_c in (32, 33) for s in samples)
        assert ("h", "ok") in sink.states
    finally:
        await connection.close()
        server.stop()


async def test_host_without_driver_is_a_state(tmp_path):
    bin_dir = standin_bin(tmp_path)
    server = make_sshd(tmp_path / "sshd", set_env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_NO_DRIVER": "1"})
    connection = SshConnection(target(server))
    try:
        await connection.connect()
        sink = ListSink()
        sampler = SmiStreamSampler("h", connection, sink)
        assert await sampler._stream_once() is False
        assert sink.states[-1][1].startswith(NO_DRIVER) and "couldn't communicate" in sink.states[-1][1]
    finally:
        await connection.close()
        server.stop()


async def test_host_without_nvidia_smi_is_a_state(tmp_path):
    server = make_sshd(tmp_path / "sshd", set_env={"PATH": "/usr/bin:/bin"})
    connection = SshConnection(target(server))
    try:
        await connection.connect()
        sink = ListSink()
        assert await SmiStreamSampler("h", connection, sink)._stream_once() is False
        assert sink.states[-1][1].startswith(NO_DRIVER)
    finally:
        await connection.close()
        server.stop()


def test_engine_samples_a_remote_gpu_host_into_the_store(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    bin_dir = standin_bin(tmp_path)
    server = make_sshd(tmp_path / "sshd", hide=[data],
                       set_env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "STANDIN_GPUS": "2"})
    try:
        hosts = server.host_yaml("gpubox", gpus="auto", slots=1)
        bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
        # the agent takes ~5 s so that the 1 Hz stream delivers samples while the job runs, in a
        # process the stand-in lists as a GPU process
        text = bench.read_text().replace(
            "echo agent on", "python3 -c 'import time; time.sleep(5)' resenv-gpu-marker; echo agent on")
        bench.write_text(text)
        done = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--host", "gpubox",
                               "--display", "plain", "--tiers", "C1"], env=cli_environ(tmp_path), cwd=tmp_path,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stdout + done.stderr
        db = tmp_path / "store.db"
        samples = rows(db, "SELECT host, gpu, util_pct, mem_total_mib, power_w FROM gpu_samples")
        assert len(samples) >= 4 and {s["gpu"] for s in samples} == {0, 1}
        assert all(s["host"] == "gpubox" and s["mem_total_mib"] == 143771 for s in samples)
        inventory = json.loads(rows(db, "SELECT inventory_json FROM hosts WHERE name = 'gpubox'")[0]["inventory_json"])
        assert inventory["gpus"] == [0, 1] and inventory["driver"] == "580.159.04" and inventory["cuda"] == "13.0"
        assert inventory.get("telemetry") == "ok"
        # the host's GPU process was mapped to the job through its working directory on the host
        job_id = rows(db, "SELECT id FROM jobs")[0]["id"]
        seen = [json.loads(r["data"]) for r in rows(db, "SELECT data FROM events WHERE kind = 'gpu_processes'")]
        mapped = [p for event in seen if event["host"] == "gpubox" for p in event["processes"]]
        assert mapped and all(p["gpu"] == 0 and p["used_mib"] == 1024 for p in mapped), seen
        assert {p["job_id"] for p in mapped} == {job_id}, seen
    finally:
        server.stop()


# ------------------------------------------------------------------------------ GPU use of C3/C4
async def test_gpu_use_watcher_asks_the_hosts_nvidia_smi_for_the_probes_processes(tmp_path):
    driver = FakeDriverDir(tmp_path / "driver", gpus=2)
    server = make_sshd(tmp_path / "sshd", set_env={"PATH": f"{standin_bin(tmp_path)}:/usr/bin:/bin",
                                                    "STANDIN_GPUS": "2", "STANDIN_CONTEXTS": str(driver.root)})
    connection = SshConnection(target(server))
    # the "remote" host is this machine: a process started here is one of its processes
    entry = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        await connection.connect()
        driver.register(entry.pid, 1, 800)
        driver.register(os.getpid(), 1, 5)  # another job's process on the same GPU
        watch = SmiWatch("h", connection, (1,))
        await watch.start()
        watch.started(entry.pid)
        await asyncio.sleep(1.5)
        use = await watch.stop()
        assert use.verdict().status == "pass", use.evidence()
        evidence = use.evidence()
        assert evidence["source"] == "nvidia-smi" and evidence["samples"] >= 3, evidence  # fast enough for short runs
        assert evidence["per_gpu"] == [{"gpu": 1, "pids": [entry.pid], "peak_mib": 800.0,
                                        "samples": evidence["samples"], "other_pids": [os.getpid()],
                                        "unseen_pids": []}]
        watch = SmiWatch("h", connection, (0,))  # nothing of the probe on GPU 0
        await watch.start()
        watch.started(entry.pid)
        await asyncio.sleep(0.3)
        verdict = (await watch.stop()).verdict()
        assert (verdict.status, verdict.category) == ("fail", "no_gpu_use") and "GPU 0" in verdict.reason
    finally:
        entry.kill()
        entry.wait()
        await connection.close()
        server.stop()


async def test_gpu_use_on_a_host_without_nvidia_smi_cannot_be_proven(tmp_path):
    server = make_sshd(tmp_path / "sshd", set_env={"PATH": "/usr/bin:/bin"})
    connection = SshConnection(target(server))
    try:
        await connection.connect()
        watch = SmiWatch("h", connection, (0,))
        await watch.start()
        watch.started(1)
        verdict = (await watch.stop()).verdict()
        assert (verdict.status, verdict.category) == ("error", "infra") and NO_DRIVER in verdict.reason, verdict
    finally:
        await connection.close()
        server.stop()


def test_engine_judges_gpu_use_on_an_ssh_host(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    driver = FakeDriverDir(tmp_path / "driver", gpus=2)
    server = make_sshd(tmp_path / "sshd", hide=[data], set_env={
        "PATH": f"{standin_bin(tmp_path)}:/usr/local/bin:/usr/bin:/bin", "STANDIN_GPUS": "2",
        "STANDIN_CONTEXTS": str(driver.root)})
    try:
        bench = bench_text(tmp_path, server.host_yaml("gpubox", gpus="auto", slots=2), {
            "uses-gpu": {"main.py": driver.hold_context(mib=640) + "import time\ntime.sleep(1)\n"},
            "cpu-fallback": {"main.py": "print('CUDA not available, falling back to CPU')\n"}})
        bench.write_text(bench.read_text().replace(
            "      not_applicable: {single_gpu: no GPU code, multi_gpu: no GPU code}\n",
            '        single_gpu: {command: "{python} main.py"}\n      not_applicable: {multi_gpu: single GPU}\n'))
        done = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--host", "gpubox",
                               "--display", "plain", "--tiers", "C3"], env=cli_environ(tmp_path), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        found = {r["repo_id"]: (r["status"], r["category"], json.loads(r["evidence_json"])) for r in rows(
            tmp_path / "store.db", "SELECT j.repo_id, t.status, t.category, t.evidence_json FROM tier_results t"
                                   " JOIN jobs j ON j.id = t.job_id")}
        status, category, evidence = found["uses-gpu"]
        assert (status, category) == ("pass", None), evidence
        use = evidence["gpu_use"]  # the host's process group, announced over SSH, found on the host's GPU
        assert use["source"] == "nvidia-smi" and use["host"] == "gpubox" and use["per_gpu"][0]["peak_mib"] == 640.0
        status, category, evidence = found["cpu-fallback"]
        assert (status, category) == ("fail", "no_gpu_use"), evidence
    finally:
        server.stop()
