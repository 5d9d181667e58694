"""Which queued jobs start now, and where: the largest first, with backfilling that never delays
the job a reservation was made for.

Strict first-come-first-served dispatch wastes GPUs: once a 2-GPU job waits for both of a host's GPUs,
the one that is free idles until the other's job ends. Letting any later job take it instead starves
the wide job. The policy here is EASY backfilling (Lifka, 1995) on every host's slots and GPUs and the
run's job limit, with three choices:

* **Order**: the largest share of the lower bound first (`ordered`), then the suite's order: the
  longest-processing-time rule of list scheduling, measured in whichever of places and GPUs binds,
  so a long job never starts last and short ones fill the gaps at the end. Without estimates (every
  job at the same bound) it is widest first, then the suite's order.
* **Reservation**: the first job in that order that cannot start gets, on the host where it could start
  soonest, a *shadow time*: when, by the running jobs' estimated ends, a slot and its GPUs (and a
  place under the job limit) are free. Each host holds at most one reservation.
* **Backfill**: a later job may start on a reserved host only if it is estimated to end before the
  shadow time, or if it takes only what is left over at the shadow time (slots, GPUs, job limit
  beyond the reserved job's need). Once a shadow time has passed and the reserved job still waits
  (estimates were wrong), only left-over resources may be backfilled: from then on it waits at most
  for the jobs already running, each bounded by its timeouts. A running job past its estimate is
  expected to run until its bound, so a hung job never makes its host look about to free up.

What holds (tests/unit/test_packing.py, by simulation): with right estimates the first job in the
order starts by its shadow time. Measured over random workloads, not proven: no job starts more
than the longest job's duration after its *fair start* (the start strict dispatch in this order,
no job passing a waiting one, gives it) with right estimates, two with estimates off by up to 3x.
Estimates come from `engine.durations`; a repo never seen is estimated at its timeout budget, an
upper bound, so the policy backfills nothing a reservation needs on a guess. The module is pure
(no engine, no store, no clock): the scheduler and the simulation call the same `plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class RunningWork:
    """A job holding a slot (and `gpus` GPUs) on `host`, estimated to end at `ends_at`, and certain to
    end by `bound_at` (its timeouts; None: unknown)."""

    host: str
    gpus: int
    ends_at: float
    bound_at: float | None = None

    def end_after(self, now: float) -> float:
        """When it is expected to end, seen at `now`: a job past its estimate is taken to run until its
        bound, not to end at once (the one most overdue is the least likely to end next)."""
        if self.ends_at > now:
            return self.ends_at
        return self.bound_at if self.bound_at is not None and self.bound_at > now else now


@dataclass(frozen=True)
class QueuedWork:
    """A job waiting to start: how many GPUs it will be granted, its estimated duration, its place."""

    job_id: int
    gpus: int
    estimate_s: float
    position: int


@dataclass
class HostRoom:
    """What one host has in all and free now (slots, GPUs) and whether it takes work."""

    name: str
    slots: int
    gpus: int
    free_slots: int
    free_gpus: int
    available: bool = True
    gpus_shared: bool = False  # the host's own scheduler hands out its GPUs (Slurm): a job takes none of them


@dataclass
class Reservation:
    """The resources promised to `job_id` on `host` at `shadow` and what is left over beyond them then."""

    job_id: int
    host: str
    shadow: float
    extra_slots: int
    extra_gpus: int
    extra_jobs: int
    promise_broken: bool = False


@dataclass
class Plan:
    """The jobs to start now, each with its host, and the reservations made for those that wait."""

    starts: list[tuple[int, str]] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)


def ordered(queued: Iterable[QueuedWork], hosts: Sequence[HostRoom], job_limit: int) -> list[QueuedWork]:
    """The queue in the policy's order: the largest share of the lower bound first, then the suite's order.

    A job's share is what it adds to the bound no schedule can beat: its estimated duration per place
    (the run's slots, capped by its job limit) or, for GPU work, its GPU-seconds per GPU, whichever
    is larger. Ordering by it is the longest-processing-time rule of list scheduling measured in the
    resource that binds: wide and long jobs start early and short ones fill the gaps at the end."""
    places = max(min(job_limit, sum(host.slots for host in hosts if host.available)), 1)
    gpus = sum(host.gpus for host in hosts if host.available)

    def share(work: QueuedWork) -> float:
        return work.estimate_s * max(1 / places, work.gpus / gpus if gpus else 0.0)

    return sorted(queued, key=lambda work: (-share(work), work.position))


def plan(
    queued: Iterable[QueuedWork], hosts: Sequence[HostRoom], running: Sequence[RunningWork], *, now: float,
    job_limit: int, promised: dict[int, tuple[str, float]] | None = None,
    place: Callable[[QueuedWork, list[HostRoom]], HostRoom] | None = None,
) -> Plan:
    """Decide which of `queued` start now and where, given the hosts' room and the running work.

    `promised` maps a job to the host and first shadow time a reservation gave it there; the caller
    keeps it across rounds (this fills it; a reservation moved to another host is a new promise), so
    a promise that estimates broke is noticed. `place` picks a host among those
    allowed (the pool's own preference; by default the least busy). The starts come in the order to
    lease them, each on the host named."""
    promised = {} if promised is None else promised
    rooms = {host.name: replace(host) for host in hosts}
    live = list(running)
    result = Plan()
    reservations: dict[str, Reservation] = {}  # by host: at most one each
    for work in ordered(queued, hosts, job_limit):
        if len(live) >= job_limit or not any(room.available and room.free_slots for room in rooms.values()):
            break  # nothing more can start this round, so no later job needs a reservation's limits
        room = _startable(work, rooms, live, now, job_limit, reservations, place or _least_busy)
        if room is not None:
            _take(work, room, now, reservations.values())
            live.append(RunningWork(room.name, work.gpus, now + work.estimate_s))
            result.starts.append((work.job_id, room.name))
            continue
        reservation = _reserve(work, rooms, live, now, job_limit, reservations)
        if reservation is not None:
            made = promised.get(work.job_id)
            if made is None or made[0] != reservation.host:  # a promise holds for the host it was made on
                made = promised[work.job_id] = (reservation.host, reservation.shadow)
            reservation.promise_broken = now > made[1]
            reservations[reservation.host] = reservation
            result.reservations.append(reservation)
    return result


def _startable(
    work: QueuedWork, rooms: dict[str, HostRoom], live: list[RunningWork], now: float, job_limit: int,
    reservations: dict[str, Reservation], place: Callable[[QueuedWork, list[HostRoom]], HostRoom],
) -> HostRoom | None:
    """The host `work` starts on now, or None: it must fit there and leave every reservation whole."""
    if len(live) >= job_limit or not all(_spares_limit(work, now, held) for held in reservations.values()):
        return None
    allowed = [room for room in rooms.values() if _fits_now(work, room)
               and (room.name not in reservations or _spares_host(work, now, reservations[room.name]))]
    return place(work, allowed) if allowed else None


def _fits_now(work: QueuedWork, room: HostRoom) -> bool:
    return room.available and room.free_slots >= 1 and room.gpus >= work.gpus and (
        room.gpus_shared or room.free_gpus >= work.gpus)


def _ends_in_time(work: QueuedWork, now: float, reservation: Reservation) -> bool:
    """Whether `work` is estimated to end before the reserved job needs anything (while the promise holds)."""
    return not reservation.promise_broken and now + work.estimate_s <= reservation.shadow


def _spares_host(work: QueuedWork, now: float, reservation: Reservation) -> bool:
    return _ends_in_time(work, now, reservation) or (
        reservation.extra_slots >= 1 and reservation.extra_gpus >= work.gpus)


def _spares_limit(work: QueuedWork, now: float, reservation: Reservation) -> bool:
    return _ends_in_time(work, now, reservation) or reservation.extra_jobs >= 1


def _take(work: QueuedWork, room: HostRoom, now: float, reservations: Iterable[Reservation]) -> None:
    """Account for `work` starting on `room`: the host's room, and the left-overs it eats into."""
    room.free_slots -= 1
    if not room.gpus_shared:
        room.free_gpus -= work.gpus
    for reservation in reservations:
        if _ends_in_time(work, now, reservation):
            continue
        reservation.extra_jobs -= 1
        if reservation.host == room.name:
            reservation.extra_slots -= 1
            if not room.gpus_shared:
                reservation.extra_gpus -= work.gpus


def _reserve(
    work: QueuedWork, rooms: dict[str, HostRoom], live: list[RunningWork], now: float, job_limit: int,
    reservations: dict[str, Reservation],
) -> Reservation | None:
    """The earliest shadow time for `work` over the hosts that could ever run it and hold no reservation."""
    best: Reservation | None = None
    for room in rooms.values():
        if room.available and room.gpus >= work.gpus and room.name not in reservations:
            candidate = _shadow_on(work, room, live, now, job_limit)
            if candidate is not None and (best is None or candidate.shadow < best.shadow):
                best = candidate
    return best


def _shadow_on(work: QueuedWork, room: HostRoom, live: list[RunningWork], now: float,
               job_limit: int) -> Reservation | None:
    """When `work` could start on `room` if nothing else started, by the running work's expected ends,
    and what is left over beyond its need at that moment."""
    ends = [(item.end_after(now), item) for item in live]
    for when in sorted({now, *(end for end, _ in ends)}):
        done = [item for end, item in ends if end <= when]
        here = [item for item in done if item.host == room.name]
        slots = room.free_slots + len(here)
        gpus = room.gpus if room.gpus_shared else min(room.gpus, room.free_gpus + sum(item.gpus for item in here))
        jobs = job_limit - len(live) + len(done)
        if slots >= 1 and gpus >= work.gpus and jobs >= 1:
            return Reservation(work.job_id, room.name, when, slots - 1, gpus - work.gpus, jobs - 1)
    return None


def _least_busy(work: QueuedWork, allowed: list[HostRoom]) -> HostRoom:
    return min(allowed, key=lambda room: (room.slots - room.free_slots) / max(room.slots, 1))
