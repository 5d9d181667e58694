"""The engine's dispatch on its own state: widest first, backfilling only what cannot delay a waiting wide job.

The policy itself is judged by simulation in test_packing.py; these tests check the engine feeds it
the truth (leases held, estimates) and acts on what it decides."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import time

from resenv.engine.cli.display import NoDisplay
from resenv.engine.run.durations import DurationEstimates
from resenv.engine.hosts.pool import Host, HostPool
from resenv.engine.run.scheduler import Engine, Running

BOUND_S = 8820.0  # what a job never seen before is estimated at


def engine_with(jobs: dict[int, int], gpus: list[int], slots: int = 8,
                history: tuple[tuple[str, str, float], ...] = ()) -> tuple[Engine, list[int]]:
    """An engine whose `_start` only records which job ids it started (its leases stay held); job N
    is repo `rN` of agent `a`."""
    engine = Engine(Path("unused.db"), "run", NoDisplay())
    engine.jobs = {job_id: {"id": job_id, "gpus_needed": need, "repo_id": f"r{job_id}", "agent": "a"}
                   for job_id, need in jobs.items()}
    engine.pending = deque(jobs)
    engine.pool = HostPool([Host("h", "local", slots, gpus)])
    engine.limit = slots
    engine.durations = DurationEstimates(BOUND_S, history)
    started: list[int] = []
    engine._start = lambda job, lease: started.append(job["id"])  # type: ignore[method-assign]
    return engine, started


def hold(engine: Engine, job_id: int, gpus: int, ran_s: float, estimate_s: float) -> None:
    """Job `job_id` has been running for `ran_s` seconds with `gpus` GPUs, expected to take `estimate_s`."""
    lease = engine.pool.lease(gpus)
    assert lease is not None
    engine.running[job_id] = Running(task=None, lease=lease, started=time.monotonic() - ran_s,  # type: ignore[arg-type]
                                     estimate_s=estimate_s)


def test_the_widest_job_goes_first_and_cpu_work_fills_the_other_slots():
    engine, started = engine_with({1: 1, 2: 2, 3: 1, 4: 0}, gpus=[0, 1])
    engine._dispatch()
    assert started == [2, 4] and list(engine.pending) == [1, 3]


def test_a_waiting_two_gpu_job_is_not_overtaken_by_a_one_gpu_job_of_unknown_length():
    engine, started = engine_with({2: 2, 3: 1, 4: 0}, gpus=[0, 1])
    hold(engine, 1, gpus=1, ran_s=1.0, estimate_s=10.0)  # holds GPU 0 for about 9 s more
    engine._dispatch()
    # job 2 needs both GPUs and waits for job 1; job 3 could run for hours: it must not take GPU 1;
    # the CPU job 4 still starts.
    assert started == [4] and list(engine.pending) == [2, 3]


def test_a_short_job_backfills_the_free_gpu_when_it_ends_before_the_wide_job_could_start():
    engine, started = engine_with({2: 2, 3: 1, 5: 1}, gpus=[0, 1], history=(("r3", "a", 3.0), ("r5", "a", 30.0)))
    hold(engine, 1, gpus=1, ran_s=1.0, estimate_s=10.0)
    engine._dispatch()
    # job 3 (about 3 s) ends before job 1 frees GPU 0: it cannot delay job 2. Job 5 (30 s) could.
    assert started == [3] and list(engine.pending) == [2, 5]


def test_once_the_promised_start_has_passed_nothing_backfills_on_a_guess():
    engine, started = engine_with({2: 2, 3: 1}, gpus=[0, 1], history=(("r3", "a", 3.0),))
    hold(engine, 1, gpus=1, ran_s=1.0, estimate_s=10.0)
    engine.promised[2] = ("h", time.monotonic() - 1.0)  # job 2 was promised a start on h that is already past
    engine._dispatch()
    assert started == [] and list(engine.pending) == [2, 3]


def test_jobs_of_one_width_start_in_suite_order_while_gpus_and_slots_allow():
    engine, started = engine_with({1: 1, 2: 1, 3: 1}, gpus=[0, 1], slots=8)
    engine._dispatch()
    assert started == [1, 2] and list(engine.pending) == [3]


def test_a_finished_attempt_teaches_the_estimate_of_its_repo():
    engine, _ = engine_with({1: 0}, gpus=[])
    assert engine._estimate(1) == BOUND_S
    engine.durations.record("r1", "a", 12.0)
    assert engine._estimate(1) == 12.0


def test_a_c5_retry_leases_the_gpus_of_the_job_it_audits():
    """C5 compares GPU claims with what the framework probe sees and with the job's lease: a re-run
    of C5 alone must see as many GPUs as the agent did, or true claims would read as false."""
    engine, _ = engine_with({1: 2}, gpus=[0, 1])
    engine.jobs[1] |= {"repo_id": "r", "key": "r/a"}
    launched: list[tuple[int, str]] = []
    engine._launch = lambda job, factory, name, lease: launched.append((job["id"], name))  # type: ignore[method-assign]
    leases: list[int] = []
    lease = engine.pool.lease
    engine.pool.lease = lambda needed, on=None: leases.append(needed) or lease(needed, on=on)  # type: ignore[method-assign]
    engine.queue_tier_retry(1, "C5")
    engine._dispatch_tier_retries()
    assert leases == [2] and [job_id for job_id, _ in launched] == [1]
