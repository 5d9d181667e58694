"""The engine's dispatch order: GPU work is first come, first served; CPU work fills free slots."""

from __future__ import annotations

from collections import deque
from pathlib import Path

from resenv.engine.display import NoDisplay
from resenv.engine.hosts import Host, HostPool
from resenv.engine.scheduler import Engine


def engine_with(jobs: dict[int, int], gpus: list[int], slots: int = 8) -> tuple[Engine, list[int]]:
    """An engine whose `_start` only records which job ids it started (and keeps their leases)."""
    engine = Engine(Path("unused.db"), "run", NoDisplay())
    engine.jobs = {job_id: {"id": job_id, "gpus_needed": need} for job_id, need in jobs.items()}
    engine.pending = deque(jobs)
    engine.pool = HostPool([Host("h", "local", slots, gpus)])
    engine.limit = slots
    started: list[int] = []
    engine._start = lambda job, lease: started.append(job["id"])  # type: ignore[method-assign]
    return engine, started


def test_a_waiting_two_gpu_job_is_not_overtaken_by_later_one_gpu_jobs():
    engine, started = engine_with({1: 1, 2: 2, 3: 1, 4: 0}, gpus=[0, 1])
    engine._dispatch()
    # job 1 holds GPU 0; job 2 needs both and waits; job 3 must not take GPU 1 ahead of it;
    # the CPU job 4 still starts.
    assert started == [1, 4]
    assert list(engine.pending) == [2, 3]


def test_jobs_start_in_order_while_gpus_and_slots_allow():
    engine, started = engine_with({1: 1, 2: 1, 3: 1}, gpus=[0, 1], slots=8)
    engine._dispatch()
    assert started == [1, 2] and list(engine.pending) == [3]


def test_a_c5_retry_leases_the_gpus_of_the_job_it_audits():
    """C5 compares GPU claims with what the framework probe sees and with the job's lease: a re-run
    of C5 alone must see as many GPUs as the agent did, or true claims would read as false."""
    engine, _ = engine_with({1: 2}, gpus=[0, 1])
    engine.jobs[1] |= {"repo_id": "r", "key": "r/a"}
    launched: list[tuple[int, str]] = []
    engine._launch = lambda job, factory, name: launched.append((job["id"], name))  # type: ignore[method-assign]
    leases: list[int] = []
    lease = engine.pool.lease
    engine.pool.lease = lambda needed, on=None: leases.append(needed) or lease(needed, on=on)  # type: ignore[method-assign]
    engine.queue_tier_retry(1, "C5")
    engine._dispatch_tier_retries()
    assert leases == [2] and [job_id for job_id, _ in launched] == [1]
