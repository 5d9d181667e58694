"""A zero-overhead discrete-event simulation of the scheduler's dispatch policy (`engine.packing.plan`),
and the workloads its test and its benchmark judge it on.

Jobs start the moment the policy says so and end exactly `duration` later; the policy sees only
estimates (exact by default, or skewed by a factor per job), so what the simulation measures is the
policy's packing alone. `first_come_first_served` is the policy the engine used before (suite
order; once a GPU job waits, no later GPU job starts): the fairness bound is stated against it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from resenv.engine.run.packing import HostRoom, Plan, QueuedWork, RunningWork, ordered, plan


TIMEOUT_BOUND_S = 8820.0  # what every simulated job is certain to end by (the default timeouts' sum)


@dataclass(frozen=True)
class SimJob:
    job_id: int
    gpus: int
    duration: float
    estimate: float | None = None  # None: exact


@dataclass(frozen=True)
class SimHost:
    name: str
    slots: int
    gpus: int


@dataclass
class Outcome:
    makespan: float
    starts: dict[int, float] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)


def lower_bound(jobs: list[SimJob], hosts: list[SimHost], job_limit: int) -> float:
    """No schedule ends sooner: the longest job, the work per slot, the GPU-seconds per GPU."""
    slots = min(job_limit, sum(host.slots for host in hosts))
    gpus = max(sum(host.gpus for host in hosts), 1)
    return max(max(job.duration for job in jobs), sum(job.duration for job in jobs) / slots,
               sum(job.duration * job.gpus for job in jobs) / gpus)


Policy = Callable[[list[SimJob], dict[str, dict], list[tuple[SimJob, str, float]], float, int, dict], list[tuple[int, str]]]


def easy_plan(waiting, rooms, running, now, job_limit, promised) -> Plan:  # type: ignore[no-untyped-def]
    """The engine's policy on the simulated state: what starts, and the reservations it made."""
    queued = [QueuedWork(job.job_id, job.gpus, estimate(job), job.job_id) for job in waiting]
    live = [RunningWork(host, job.gpus, start + estimate(job), start + TIMEOUT_BOUND_S) for job, host, start in running]
    return plan(queued, [HostRoom(**room) for room in rooms.values()], live, now=now, job_limit=job_limit,
                promised=promised)


def easy_policy(waiting, rooms, running, now, job_limit, promised):  # type: ignore[no-untyped-def]
    return easy_plan(waiting, rooms, running, now, job_limit, promised).starts


def estimate(job: SimJob) -> float:
    return job.estimate if job.estimate is not None else job.duration


def first_come_first_served(waiting, rooms, running, now, job_limit, promised):  # type: ignore[no-untyped-def]
    """The engine's former policy: suite order; once a GPU job waits, no later GPU job may start."""
    rooms = {name: dict(room) for name, room in rooms.items()}
    starts, gpu_waiting, count = [], False, len(running)
    for job in sorted(waiting, key=lambda job: job.job_id):
        if count >= job_limit:
            break
        host = None if job.gpus and gpu_waiting else take_least_busy(rooms, job.gpus)
        if host is None:
            gpu_waiting = gpu_waiting or job.gpus > 0
            continue
        count += 1
        starts.append((job.job_id, host))
    return starts


def strict_order(waiting, rooms, running, now, job_limit, promised):  # type: ignore[no-untyped-def]
    """The policy's own order without backfilling: no job starts while one before it waits. A job's
    start under it is its fair start: where the published order alone puts it."""
    rooms = {name: dict(room) for name, room in rooms.items()}
    queued = [QueuedWork(job.job_id, job.gpus, estimate(job), job.job_id) for job in waiting]
    starts, count = [], len(running)
    for work in ordered(queued, [HostRoom(**room) for room in rooms.values()], job_limit):
        host = take_least_busy(rooms, work.gpus) if count < job_limit else None
        if host is None:
            break
        count += 1
        starts.append((work.job_id, host))
    return starts


def take_least_busy(rooms: dict[str, dict], gpus: int) -> str | None:
    """Take a slot and `gpus` GPUs on the least busy room that has them; its name, or None."""
    fits = [room for room in rooms.values()
            if room["free_slots"] >= 1 and room["gpus"] >= gpus and room["free_gpus"] >= gpus]
    if not fits:
        return None
    room = min(fits, key=lambda room: (room["slots"] - room["free_slots"]) / room["slots"])
    room["free_slots"] -= 1
    room["free_gpus"] -= gpus
    return room["name"]


def simulate(jobs: list[SimJob], hosts: list[SimHost], job_limit: int, policy: Policy = easy_policy) -> Outcome:
    """Run `jobs` to the end under `policy`; every decision point is a job's end (and the start)."""
    rooms = {host.name: {"name": host.name, "slots": host.slots, "gpus": host.gpus, "free_slots": host.slots,
                         "free_gpus": host.gpus} for host in hosts}
    waiting = {job.job_id: job for job in jobs}
    running: list[tuple[SimJob, str, float]] = []
    ends: list[tuple[float, int]] = []
    outcome, promised, now = Outcome(0.0), {}, 0.0
    while waiting or running:
        for job_id, host in policy(list(waiting.values()), rooms, running, now, job_limit, promised):
            job = waiting.pop(job_id)
            room = rooms[host]
            assert room["free_slots"] >= 1 and room["free_gpus"] >= job.gpus, "the policy over-committed a host"
            room["free_slots"] -= 1
            room["free_gpus"] -= job.gpus
            running.append((job, host, now))
            outcome.starts[job_id], outcome.hosts[job_id] = now, host
            heapq.heappush(ends, (now + job.duration, job_id))
        assert len(running) <= job_limit, "the policy broke the job limit"
        if not ends:
            raise AssertionError(f"deadlock: {sorted(waiting)} wait and nothing runs")
        now, ended = heapq.heappop(ends)
        finished = [ended]
        while ends and ends[0][0] <= now:
            finished.append(heapq.heappop(ends)[1])
        for item in [item for item in running if item[0].job_id in finished]:
            running.remove(item)
            rooms[item[1]]["free_slots"] += 1
            rooms[item[1]]["free_gpus"] += item[0].gpus
        outcome.makespan = max(outcome.makespan, now)
    return outcome


def mixed_workload() -> tuple[list[SimJob], list[SimHost], int]:
    """20 jobs of 1-6 s, 6 needing one GPU and 4 two, on one host of 4 slots and 2 GPUs (suite order
    interleaves the kinds, as a real suite does)."""
    kinds = [0, 1, 0, 2, 0, 1, 0, 2, 1, 0, 0, 1, 2, 0, 1, 0, 2, 1, 0, 0]
    durations = [3, 4, 2, 5, 6, 3, 1, 4, 5, 2, 4, 2, 6, 3, 3, 5, 2, 4, 1, 6]
    jobs = [SimJob(index, kind, float(duration)) for index, (kind, duration) in enumerate(zip(kinds, durations))]
    return jobs, [SimHost("local", 4, 2)], 4


def skewed_workload() -> tuple[list[SimJob], list[SimHost], int]:
    """Durations skewed over two orders of magnitude: a long 1-GPU job ahead of 2-GPU jobs, many
    short GPU jobs, long CPU jobs; two hosts (4 slots + 2 GPUs, 2 slots + 4 GPUs) under a job limit of 5."""
    spec = [(1, 40), (2, 8), (0, 30), (2, 12), (1, 2), (1, 1), (0, 25), (1, 3), (2, 20), (1, 2), (0, 1),
            (4, 10), (1, 1), (0, 2), (1, 15), (2, 2), (0, 1), (1, 5), (0, 20), (1, 1), (2, 6), (1, 2), (0, 3),
            (1, 8), (4, 4), (0, 2), (1, 1), (2, 3), (1, 2), (0, 10)]
    jobs = [SimJob(index, gpus, float(duration)) for index, (gpus, duration) in enumerate(spec)]
    return jobs, [SimHost("a", 4, 2), SimHost("b", 2, 4)], 5
