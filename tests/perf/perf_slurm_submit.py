"""Slurm submission and status at scale, against a private real cluster (tests/slurm_rig.py).

1. Submit: 500 jobs through `SlurmHost.submit` — resenv's own batch script and sbatch options, at most
   `SUBMIT_CONCURRENCY` sbatch calls at once, backoff on controller errors — all held (`--hold`), so
   the 2-core machine measures the controller's intake, not 500 running jobs. Target: ≤ 15 s for
   500, and no controller error (every ControllerUnavailable retry is counted).
2. Status: `SlurmMonitor.poll_once()` with the 500 jobs tracked — one `squeue --me -O ...` call for
   all — repeated; target ≤ 1 s per refresh. `squeue --json` is timed beside it for comparison (up
   to 22.05 it ignores filters and serialises the whole queue).
3. The jobs are cancelled and the cluster stopped.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge. Run:
`.venv/bin/python tests/perf/perf_slurm_submit.py [--jobs 500] [--polls 20] [--keep]`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _perfutil import REPO_ROOT, clean_up, summary, verdict, write_result

sys.path.insert(0, str(REPO_ROOT))

from resenv.engine.hosts.slurm import host as slurm_host  # noqa: E402
from resenv.engine.hosts.slurm.client import ControllerUnavailable, SlurmClient  # noqa: E402
from resenv.engine.hosts.slurm.host import build_slurm_host  # noqa: E402
from resenv.engine.hosts.slurm.script import JobFiles, batch_script, sbatch_options  # noqa: E402
from resenv.engine.spec import SlurmHost as SlurmSpec  # noqa: E402
from tests.slurm_rig import make_cluster, slurm_available  # noqa: E402


class CountingClient(SlurmClient):
    """The real client, counting the controller errors it meets."""

    controller_errors = 0

    async def run(self, argv, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return await super().run(argv, **kwargs)
        except ControllerUnavailable:
            CountingClient.controller_errors += 1
            raise


async def measure(cluster, root: Path, jobs: int, polls: int) -> dict:
    spec = SlurmSpec(kind="slurm", slurm_conf=str(cluster.conf), gpus=0, cpus=1, poll_s=1.0)
    host = build_slurm_host("perf", spec)
    host.client = CountingClient(host.client.runner)
    host.monitor.client = host.client
    host.run_id = "perf"
    assert await host.start()
    resources = host.resources(0)
    latencies: list[float] = []

    async def one(index: int) -> str:
        files = JobFiles.for_prefix(root / "logs" / f"job-{index}")
        files.spool.mkdir(parents=True, exist_ok=True)
        script = batch_script(files, timeout_s=600)
        options = sbatch_options(files, resources, name=host.job_name(), comment=host.submission_token(), timeout_s=600)
        started = time.perf_counter()
        job_id = await host.submit(script, [*options, "--hold"])
        latencies.append(time.perf_counter() - started)
        return job_id

    started = time.perf_counter()
    ids = await asyncio.gather(*(one(i) for i in range(jobs)))
    submit_s = time.perf_counter() - started
    print(f"submitted {len(ids)} jobs in {submit_s:.2f} s ({len(ids) / submit_s:.0f}/s), "
          f"median sbatch {statistics.median(latencies) * 1000:.1f} ms, controller errors {CountingClient.controller_errors}")

    for job_id in ids:
        host.monitor.track(job_id)
    poll_times, json_times = [], []
    for _ in range(polls):
        t0 = time.perf_counter()
        await host.monitor.poll_once()
        poll_times.append(time.perf_counter() - t0)
    seen = sum(1 for tracked in host.monitor.jobs.values() if tracked.seen)
    for _ in range(max(3, polls // 4)):
        t0 = time.perf_counter()
        answer = await host.client.query_json()
        json_times.append(time.perf_counter() - t0)
    print(f"status of {len(ids)} jobs: median {statistics.median(poll_times) * 1000:.0f} ms per refresh "
          f"(squeue -O, {seen} seen); squeue --json: median {statistics.median(json_times) * 1000:.0f} ms "
          f"({len(answer)} jobs in its answer)")
    cancel_started = time.perf_counter()
    await host.client.cancel(ids)
    cancel_s = time.perf_counter() - cancel_started
    await host.close()
    return {"submit_s": submit_s, "sbatch_latency_s": summary(latencies), "poll_s": summary(poll_times),
            "squeue_json_s": summary(json_times), "seen": seen, "cancel_s": cancel_s,
            "controller_errors": CountingClient.controller_errors, "submit_concurrency": slurm_host.SUBMIT_CONCURRENCY}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not slurm_available():
        print("SKIP: needs root and slurmctld, slurmd, slurm-client, munge")
        return 0
    root = Path(tempfile.mkdtemp(prefix="resenv-perf-slurm-"))
    cluster = make_cluster(root / "cluster", nodes=("n1",), gpus_per_node=0)
    try:
        figures = asyncio.run(measure(cluster, root / "work", args.jobs, args.polls))
    finally:
        cluster.stop()
    submit_ok = figures["submit_s"] <= 15.0 * args.jobs / 500 and figures["controller_errors"] == 0
    status_ok = figures["poll_s"]["median"] <= 1.0 and figures["seen"] == args.jobs
    print(f"submit {args.jobs}: {figures['submit_s']:.2f} s (target ≤ 15 s for 500, no controller error): {verdict(submit_ok)}")
    print(f"status of {args.jobs}: median {figures['poll_s']['median'] * 1000:.0f} ms (target ≤ 1 s): {verdict(status_ok)}")
    write_result("perf_slurm_submit", {"params": vars(args), "figures": figures,
                                       "pass": {"submit": submit_ok, "status": status_ok}})
    clean_up(root, args.keep)
    return 0 if submit_ok and status_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
