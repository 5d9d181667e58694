"""Remote hosts and containers: three figures against their targets.

1. **SSH round trip**: `SshConnection.run("true")` over one warm connection to a real sshd on
   loopback (tests/sshd_rig.py), 300 times. Target: median <= 20 ms.
2. **Telemetry cost**: 8 hosts x 8 GPUs sampled at 1 Hz — 8 connections (to one loopback sshd),
   each running one long-lived `nvidia-smi --query-gpu=... -lms 1000` stream (the recorded-output
   stand-in, 8 rows per tick), parsed and written to a real store by `TelemetrySink` once a
   second, for DURATION seconds, plus the GPU-process query (`REMOTE_PROCESSES`) every 2 s per
   host. The engine's CPU = this process's user+system time (all threads) over the window / wall
   time. Target: < 5 % of one core.
3. **Container start**: time of a job's first command in a `DockerSandbox` (create + start the
   container, make the work dir, `docker exec true`) minus the same first `true` in a
   `ProcessSandbox`, N times, against a private dockerd with the locally built test image.
   Target: median <= 1.5 s beyond the engine's own. Skipped without root/dockerd.

    .venv/bin/python tests/perf/perf_remote.py [--duration 20] [--containers 10] [--skip-docker]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _perfutil import summary, verdict, write_result  # sets up sys.path for resenv and tests

from resenv.engine.sandbox.remote import SshConnection, SshTarget
from resenv.engine.store.db import StoreWriter
from resenv.engine.hosts.telemetry import SMI_STREAM, ProcessMap, SmiStreamSampler, TelemetrySink
from tests.sshd_rig import make_sshd, standin_bin


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def round_trips(server, count: int) -> list[float]:
    target = SshTarget(name="rtt", address=server.address, port=server.port, user="root",
                       key=str(server.client_key), known_hosts=str(server.known_hosts))
    connection = SshConnection(target)
    await connection.connect()
    try:
        for _ in range(20):  # warm-up
            await connection.run("true")
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await connection.run("true")
            times.append(time.perf_counter() - started)
        return times
    finally:
        await connection.close()


async def telemetry(server, root: Path, hosts: int, duration: float) -> dict:
    writer = StoreWriter(root / "telemetry.db")
    writer.start()
    sink = TelemetrySink(writer, "perf")
    connections, samplers = [], []
    for index in range(hosts):
        target = SshTarget(name=f"h{index}", address=server.address, port=server.port, user="root",
                           key=str(server.client_key), known_hosts=str(server.known_hosts))
        connection = SshConnection(target)
        await connection.connect()
        connections.append(connection)
        sampler = SmiStreamSampler(f"h{index}", connection, sink, command=SMI_STREAM, processes=ProcessMap())
        sampler.start()
        samplers.append(sampler)
    flusher = asyncio.create_task(sink.run(1.0))
    await asyncio.sleep(3)  # streams started, first rows in
    first_written, cpu0, wall0 = sink.written, cpu_seconds(), time.perf_counter()
    await asyncio.sleep(duration)
    cpu1, wall1 = cpu_seconds(), time.perf_counter()
    rows = sink.written - first_written
    flusher.cancel()
    for sampler in samplers:
        await sampler.stop()
    for connection in connections:
        await connection.close()
    await writer.close()
    return {"cpu_pct_of_one_core": 100 * (cpu1 - cpu0) / (wall1 - wall0), "rows_written": rows,
            "rows_per_s": rows / (wall1 - wall0), "expected_rows_per_s": hosts * 8}


async def container_starts(count: int) -> dict | None:
    from tests.docker_rig import build_rootfs, docker_available, import_image, start_dockerd

    if not docker_available():
        return None
    from resenv.engine.hosts.pool import Host
    from resenv.engine.sandbox.process import ProcessSandbox
    from resenv.engine.spec import LocalHost

    daemon = start_dockerd()
    root = Path(tempfile.mkdtemp(prefix="perf-docker-"))
    try:
        import_image(daemon.client(), build_rootfs(root / "rootfs"))
        os.environ["DOCKER_HOST"] = daemon.socket
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        spec = LocalHost(kind="local", sandbox="docker", image="resenv-test/tiny:1", gpus=0,
                         docker={"memlock": -1 if memlock == resource.RLIM_INFINITY else memlock})
        host = Host(name="box", kind="local", slots=1, gpu_ids=[], spec=spec)
        docker_times, process_times = [], []
        for index in range(count):
            work = root / f"job{index}" / "work"
            started = time.perf_counter()
            box = host.sandbox(work)
            result = await box.exec(["true"], log_prefix=root / "logs" / f"d{index}")
            docker_times.append(time.perf_counter() - started)
            assert result.returncode == 0
            await box.close()
            started = time.perf_counter()
            plain = ProcessSandbox(root / f"plain{index}")
            await plain.exec(["true"], log_prefix=root / "logs" / f"p{index}")
            process_times.append(time.perf_counter() - started)
        beyond = [d - p for d, p in zip(docker_times, process_times)]
        return {"docker_first_exec_s": summary(docker_times), "process_first_exec_s": summary(process_times),
                "beyond_s": summary(beyond), "median_beyond_s": statistics.median(beyond)}
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--round-trips", type=int, default=300)
    parser.add_argument("--containers", type=int, default=10)
    parser.add_argument("--skip-docker", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="perf-remote-"))
    bin_dir = standin_bin(root)
    server = make_sshd(root / "sshd", max_sessions=20,
                       set_env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "STANDIN_GPUS": "8"})
    results: dict = {}
    ok = True
    try:
        rtt = await round_trips(server, args.round_trips)
        median_ms = statistics.median(rtt) * 1000
        results["round_trip_ms"] = summary(rtt, scale=1000)
        print(f"ssh round trip over a warm connection: median {median_ms:.2f} ms, p90 "
              f"{results['round_trip_ms'].get('p90', float('nan')):.2f} ms  (target <= 20 ms) "
              f"{verdict(median_ms <= 20)}")
        ok &= median_ms <= 20
        tele = await telemetry(server, root, 8, args.duration)
        results["telemetry"] = tele
        print(f"telemetry 8 hosts x 8 GPUs @1 Hz: engine CPU {tele['cpu_pct_of_one_core']:.2f} % of one core, "
              f"{tele['rows_per_s']:.1f} rows/s (expected {tele['expected_rows_per_s']})  (target < 5 %) "
              f"{verdict(tele['cpu_pct_of_one_core'] < 5)}")
        ok &= tele["cpu_pct_of_one_core"] < 5 and tele["rows_per_s"] > 0.8 * tele["expected_rows_per_s"]
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    if not args.skip_docker:
        starts = await container_starts(args.containers)
        if starts is None:
            print("container start: skipped (needs root, dockerd and the docker SDK)")
        else:
            results["container_start"] = starts
            beyond = starts["median_beyond_s"]
            print(f"container start: first command median {starts['docker_first_exec_s']['median']:.3f} s vs "
                  f"process sandbox {starts['process_first_exec_s']['median']:.3f} s; beyond: {beyond:.3f} s "
                  f"(target <= 1.5 s) {verdict(beyond <= 1.5)}")
            ok &= beyond <= 1.5
    results["pass"] = ok
    write_result("perf_remote", results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
