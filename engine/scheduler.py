"""The engine of one run: dispatches jobs onto host slots and GPUs, applies controls, keeps heartbeats.

Everything it knows lives in the store, so a run that dies can be resumed by another engine process:
`recover()` marks the attempts that were running as interrupted (`error`/`infra`), replays their raw
logs so no output line is lost, and queues their jobs again as new attempts.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .agents import adapter_for
from .checkout import PristineCache
from .controls import ControlApplier
from .durations import DurationEstimates, attempt_history, timeout_bound
from .fleet import start_fleet, stop_fleet  # SSH connections, host states, GPU telemetry
from .hosts import HostPool, Lease, build_hosts
from .lifecycle import AttemptOutcome, EventSink, JobAttempt, RunContext, attempt_dir
from .output import ROW_OVERHEAD, OutputBudget, limits_of
from .outcomes import INFRA_CATEGORIES, is_retried
from .packing import HostRoom, QueuedWork, RunningWork, plan
from .paths import absolute
from .recovery import replay_attempt_logs
from .runlock import EngineBusy, RunLock
from .sandbox.process import kill_stale_group
from .scorings import live_rescore
from .secrets import scrub_attempt
from .spec import Benchmark, benchmark_from_snapshot
from .store import (StoreFailure, StoreWriter, connect, disk_failure, dumps, mark_interrupted, rollback_quietly,
                    store_failure)
from .tiers import ALL_TIERS, ENTRYPOINT_OF, GPUS_FOR

HEARTBEAT_S = 2.0
CONTROL_POLL_S = 0.25
REPLAN_IDLE_S = 1.0
STALE_AFTER_S = 15.0
FINISHED_JOB_STATES = {"done", "error", "cancelled"}


class Display(Protocol):
    def started(self, run_id: str, total: int, db: Path, data_dir: Path) -> None: ...
    def job_finished(self, job: dict[str, Any], outcome: AttemptOutcome) -> None: ...
    def message(self, text: str) -> None: ...
    def finished(self, state: str) -> None: ...


class SecretsMissing(EngineBusy):
    """A declared secret of the run's agents cannot be loaded: the run is not resumed, nothing changes.

    Without the value, the crashed attempts' raw logs could be neither scrubbed nor replayed redacted."""


@dataclass(frozen=True)
class TierWork:
    """Tiers to judge again on the post-agent state an attempt of a job left; the agent does not run again.

    An operator's tier retry is one tier, recorded in the run's original scoring, on the newest full
    attempt. A rescore judges a job's tiers into a new scoring, on the attempt that scoring names
    (`kept`: its number, work dir and host, where that state lives), with `gpus` as many GPUs as the
    attempt had, so the tiers are judged as they were."""

    job_id: int
    tiers: tuple[str, ...]
    scope: str  # the new attempt's scope: the re-run tier, or `rescore`
    log_prefix: str  # its logs sit beside the kept attempt's as `<prefix><attempt number>-<log>`
    announce: tuple[str, dict[str, Any]]  # the event that opens the attempt's transcript
    scoring_id: int | None = None  # None: the run's original scoring
    kept: dict[str, Any] | None = None  # None: the job's newest full attempt, on any host
    gpus: int | None = None  # None: what the tiers need


@dataclass
class Running:
    """A job whose attempt is under way; `stop_reason` says why the engine cancelled it, if it did."""

    task: asyncio.Task
    attempt: JobAttempt | None = None
    stop_reason: str | None = None
    lease: Lease | None = None
    started: float = 0.0  # time.monotonic() when it was launched
    estimate_s: float = 0.0  # how long the dispatch policy expects it to hold its lease


def engine_alive(run: dict[str, Any]) -> bool:
    """A run is owned by a live engine if its heartbeat is fresh and (when local) its PID exists."""
    if run["heartbeat_at"] is None or time.time() - run["heartbeat_at"] > STALE_AFTER_S:
        return False
    if run["engine_host"] == platform.node() and run["engine_pid"]:
        try:
            os.kill(run["engine_pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return run["state"] in {"running", "paused"}


class Engine:
    """Runs one run; at most one process holds a run at a time (`RunLock`, taken in `_load`).

    If the store fails under it (a full disk, a read-only or corrupt file, a lock held past the busy
    timeout), or the disk under the run's raw logs does, the engine stops the run as Ctrl-C does
    (sandboxes killed, attempts recorded as interrupted where the store still takes writes) and
    `execute` raises a StoreFailure whose one-line message says what failed and how to resume."""

    lock_role = "engine"

    def __init__(
        self, db_path: Path, run_id: str, display: Display, *, jobs_limit: int | None = None,
        install_signals: bool = True,
    ) -> None:
        self.db_path = absolute(db_path)
        # False when the engine runs in a worker thread (the dashboard owns the main thread and
        # its signals); stop it from another thread with request_stop().
        self.install_signals = install_signals
        self._loop: asyncio.AbstractEventLoop | None = None
        self.run_id = run_id
        self.display = display
        self.jobs_limit = jobs_limit
        self.pending: deque[int] = deque()
        self.running: dict[int, Running] = {}
        self.jobs: dict[int, dict[str, Any]] = {}
        self.paused = False
        self.cancelled = False
        self.interrupted = False
        self.wake = asyncio.Event()
        self.controls = ControlApplier(self)
        self.requeue_after: dict[int, float] = {}
        self.tier_retries: deque[TierWork] = deque()
        self.promised: dict[int, tuple[str, float]] = {}  # job -> (host, start) a reservation first promised it
        self._idle_plan_state: tuple[Any, ...] | None = None  # the state of the last round that started nothing
        self.lock: RunLock | None = None
        self.claimed = False  # this engine wrote itself into the run's row
        self.recorded = False  # the run's end state is in the store
        self.failure: StoreFailure | None = None  # the store (or the run's disk) failed: the run stopped
        self.crash: BaseException | None = None  # a background task of the engine died of a bug
        self.stop_cause: str | None = None  # why the engine stopped its jobs, when not an operator's Ctrl-C

    # -- setup ------------------------------------------------------------------------------
    def _load(self) -> None:
        reader = connect(self.db_path)
        try:
            run = dict(reader.execute("SELECT * FROM runs WHERE id = ?", (self.run_id,)).fetchone())
            self.jobs = {row["id"]: dict(row) for row in reader.execute(
                "SELECT * FROM jobs WHERE run_id = ? ORDER BY id", (self.run_id,))}
            history = attempt_history(reader)
        finally:
            reader.close()
        self.run_dir = absolute(run["data_dir"])
        try:
            self.lock = RunLock.take(self.run_dir, self.run_id, self.lock_role)  # EngineBusy if held
        except OSError as error:
            raise store_failure(error, self.run_dir) from error  # type: ignore[misc]
        if self._held_elsewhere(run):
            raise EngineBusy(f"run {self.run_id} is being run by engine PID {run['engine_pid']} on {run['engine_host']}")
        self._refuse_if_rescoring()
        self.run = run
        options = json.loads(run["options_json"])
        self.bench: Benchmark = benchmark_from_snapshot(json.loads(run["spec_json"]), Path(run["base_dir"]))
        self.suite = self.bench.suite(run["suite"])
        self.pool = HostPool(build_hosts({name: self.bench.host(name) for name in options["hosts"]}))
        self.limit = self.jobs_limit or options.get("jobs") or self.bench.defaults.concurrency
        self.durations = DurationEstimates(timeout_bound(self.bench.defaults.timeouts), history)
        agents = {name: adapter_for(name, self.bench.agent(name)) for name in options["agents"]}
        self.ctx = RunContext(
            writer=self.writer, run_id=self.run_id, run_dir=self.run_dir, bench=self.bench, suite=self.suite,
            pristines=PristineCache(self.run_dir / "pristine", self._pinned_commits()), agents=agents,
            tiers=tuple(options.get("tiers", ALL_TIERS)),
        )

    def _pinned_commits(self) -> dict[str, str]:
        """The commit each repo's jobs were checked out at, as the engine recorded it (never as the
        pristine copy says: a copy an agent reached could say anything)."""
        reader = connect(self.db_path)
        try:
            found = reader.execute(
                "SELECT j.repo_id, json_extract(e.data, '$.commit') FROM events e JOIN jobs j ON j.id = e.job_id"
                " WHERE e.run_id = ? AND e.kind = 'checkout' AND json_extract(e.data, '$.commit') IS NOT NULL"
                " ORDER BY e.id", (self.run_id,)).fetchall()
        finally:
            reader.close()
        pins: dict[str, str] = {}
        for repo_id, commit in found:
            pins.setdefault(repo_id, commit)
        return pins

    @staticmethod
    def _held_elsewhere(run: dict[str, Any]) -> bool:
        """Whether a live engine on another machine sharing this store holds the run (its heartbeat
        tells). On this machine the run's lock, which this engine holds, already says no: a row
        naming a local engine is a dead one's, even if its PID is a zombie's or was reused."""
        return run["engine_host"] != platform.node() and engine_alive(run)

    def _refuse_without_secrets(self) -> None:
        """Every secret the run's agents declare must load before anything is touched: the secrets
        registry (filled as the adapters were built) is what scrubs and redacts the crashed attempts."""
        problems = [f"agent {name!r}: {problem}" for name, adapter in self.ctx.agents.items()
                    for problem in getattr(getattr(adapter, "secrets", None), "problems", ())]
        if problems:
            raise SecretsMissing(f"cannot resume run {self.run_id}: " + "; ".join(problems)
                                 + " (set it and resume again; nothing was changed)")

    def _refuse_if_rescoring(self) -> None:
        """A run being rescored keeps its states as they are until the rescore ends."""
        conn = connect(self.db_path, readonly=True)
        try:
            holder = live_rescore(lambda sql, params: [dict(row) for row in conn.execute(sql, params)],
                                  self.run_id, STALE_AFTER_S)
        finally:
            conn.close()
        if holder is not None and holder["engine_pid"] != os.getpid():
            raise EngineBusy(f"run {self.run_id} is being rescored ({holder['label']}) by PID {holder['engine_pid']}"
                             f" on {holder['engine_host']}")

    async def execute(self) -> str:
        """Run (or resume) until every job is finished or the run is cancelled; returns the run state.

        Raises StoreFailure (one line: what failed, whether the run is marked interrupted, how to
        resume) when the store or the run's disk failed, EngineBusy when another process holds the run."""
        self._loop = asyncio.get_running_loop()
        state = "interrupted"
        try:
            try:
                self.writer = StoreWriter(self.db_path, on_failure=self._store_failed)
                try:
                    self.writer.start()
                    state = await self._execute()
                finally:
                    await stop_fleet(self)  # ssh hosts' connections and telemetry
                    self._close_censuses()
                    await self.writer.close()
            except (StoreFailure, sqlite3.Error, OSError) as error:
                failure = self._as_failure(error)
                if failure is None:
                    raise
                self.failure = self.failure or failure
            if self.failure is not None:
                raise self._stopped_by(self.failure) from None
            if self.crash is not None:
                raise self.crash
            return state
        finally:
            self._release()

    def _as_failure(self, error: BaseException) -> StoreFailure | None:
        """The store's failure an error means (any error of the store; an OSError only when the disk failed)."""
        if isinstance(error, StoreFailure):
            return error
        if isinstance(error, sqlite3.Error):
            return store_failure(error, self.db_path)
        return disk_failure(error, getattr(self, "run_dir", self.db_path.parent))

    def _stopped_by(self, failure: StoreFailure) -> StoreFailure:
        """The one-line failure to report: what failed, what became of the run, how to resume it."""
        resume = f"`resenv run --resume {self.run_id}`"
        if not self.claimed:
            return StoreFailure(f"{failure}; run {self.run_id} did not start: resume it with {resume} once that is fixed")
        why = None if self.recorded else mark_interrupted(self.db_path, self.run_id, str(failure))
        if why is None:
            return StoreFailure(f"{failure}; run {self.run_id} stopped and is marked interrupted: resume it with "
                                f"{resume} once that is fixed")
        return StoreFailure(f"{failure}; run {self.run_id} stopped, but the store could not record that ({why}): "
                            f"{resume} recovers it once that is fixed")

    def _close_censuses(self) -> None:
        """End the run's census workers (there are none when the run never loaded)."""
        ctx: RunContext | None = getattr(self, "ctx", None)
        if ctx is not None:
            ctx.censuses.close()

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    async def _execute(self) -> str:
        self._load()
        self._refuse_without_secrets()
        await self._claim()
        self.fleet = await start_fleet(self)  # ssh hosts, host up/down, GPU telemetry
        await self._recover()
        self.pending.extend(job_id for job_id, job in self.jobs.items() if job["state"] == "queued")
        # Controls sent while no engine ran (a retry of a finished job, say) apply before dispatch.
        await self._apply_controls()
        self.display.started(self.run_id, len(self.jobs), self.db_path, self.run_dir)
        if self.paused:  # paused before this engine began (a pause sent while none ran, say): say so now
            self.display.message(f"run {self.run_id} is paused: no job starts until"
                                 f" `resenv control resume {self.run_id}`")
        background = [
            asyncio.create_task(self._heartbeat(), name="heartbeat"),
            asyncio.create_task(self._poll_controls(), name="controls"),
        ]
        for task in background:
            task.add_done_callback(self._background_ended)
        loop = asyncio.get_running_loop()
        if self.install_signals:
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
            loop.add_signal_handler(signal.SIGTERM, self._interrupt)
        try:
            state = await self._dispatch_loop()
        finally:
            if self.install_signals:
                loop.remove_signal_handler(signal.SIGINT)
                loop.remove_signal_handler(signal.SIGTERM)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
        if self.failure is None:
            self.writer.update("runs", self.run_id, {"state": state, "finished_at": time.time(), "heartbeat_at": None})
            self.writer.event(self.run_id, "run_state", {"state": state})
            await self.writer.flush()
            self.recorded = True
        if self.failure is None and self.crash is None:
            self.display.finished(state)
        return state

    def _background_ended(self, task: asyncio.Task) -> None:
        """A heartbeat or control poller must never die silently: the run stops if one does."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        failure = self._as_failure(error)
        if failure is not None:
            self._store_failed(failure)
            return
        self.crash = self.crash or error
        self._interrupt(cause=f"the engine's {task.get_name()} task failed: {type(error).__name__}: {error}")

    def _store_failed(self, failure: StoreFailure) -> None:
        """The store, or the disk under the run, failed: stop every job now as Ctrl-C would (their
        events could not be kept), then `execute` reports it."""
        if self.failure is None:
            self.failure = failure
        self._interrupt(cause=str(failure))

    async def _claim(self) -> None:
        """Write this engine into the run's row, in one transaction with the check that no live engine
        on another machine holds it (on this one, the run's lock already tells)."""
        now = time.time()
        conn = connect(self.db_path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                run = dict(conn.execute("SELECT * FROM runs WHERE id = ?", (self.run_id,)).fetchone())
                if self._held_elsewhere(run):
                    raise EngineBusy(f"run {self.run_id} is being run by engine PID {run['engine_pid']}"
                                     f" on {run['engine_host']}")
                self.paused = run["state"] == "paused"  # an operator's pause outlives the engine
                conn.execute(
                    "UPDATE runs SET state = ?, started_at = ?, finished_at = NULL, engine_pid = ?, engine_host = ?,"
                    " heartbeat_at = ? WHERE id = ?",
                    ("paused" if self.paused else "running", run["started_at"] or now, os.getpid(), platform.node(),
                     now, self.run_id))
                conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(conn)
                raise
        finally:
            conn.close()
        self.claimed = True
        for host in self.pool.hosts:
            self.writer.execute(
                "INSERT OR REPLACE INTO hosts (run_id, name, kind, state, inventory_json, updated_at) VALUES (?, ?, ?, 'up', ?, ?)",
                (self.run_id, host.name, host.kind, dumps(host.inventory()), now),
            )
        self.writer.event(self.run_id, "run_state", {"state": "running", "pid": os.getpid()})
        await self.writer.flush()

    async def _recover(self) -> None:
        """Attempts left `running` by a dead engine become error/infra; their jobs run again."""
        conn = connect(self.db_path)
        try:
            stale = [dict(row) for row in conn.execute(
                "SELECT * FROM attempts WHERE run_id = ? AND state = 'running'", (self.run_id,))]
            # An attempt that lost its SSH host ended (error/infra) while its commands ran on there; the
            # dead engine meant to kill them when the host came back, and only the store remembers them.
            remote = {host.name for host in self.pool.hosts if hasattr(host, "note_orphan")}
            cut_off = [dict(row) for row in conn.execute(
                "SELECT * FROM attempts WHERE run_id = ? AND state = 'error' AND category = 'infra'", (self.run_id,))
                if row["host"] in remote]
            seqs = {row[0]: row[1] or 0 for row in conn.execute(
                "SELECT attempt_id, MAX(seq) FROM events WHERE run_id = ? GROUP BY attempt_id", (self.run_id,))}
            announced: dict[int, set[str]] = {}
            for attempt_id, log in conn.execute(
                "SELECT attempt_id, json_extract(data, '$.log') FROM events WHERE run_id = ? AND kind = 'command'",
                (self.run_id,)):
                announced.setdefault(attempt_id, set()).add(log)
            groups = [(row[0], row[1]) for row in conn.execute(
                "SELECT attempt_id, json_extract(data, '$.pgid') FROM events WHERE run_id = ? AND kind = 'process'",
                (self.run_id,))]
            logged = {(row[0], row[1], row[2]): row[3] for row in conn.execute(
                "SELECT attempt_id, json_extract(data, '$.log'), json_extract(data, '$.stream'),"
                " MAX(json_extract(data, '$.line_no')) FROM events WHERE run_id = ? AND kind IN ('output', 'transcript')"
                " GROUP BY 1, 2, 3", (self.run_id,))}
            spent = {row[0]: row[1] or 0 for row in conn.execute(  # of each attempt's output budget
                "SELECT attempt_id, SUM(length(data)) + COUNT(*) * ? FROM events WHERE run_id = ?"
                " AND kind IN ('output', 'transcript') GROUP BY attempt_id", (ROW_OVERHEAD, self.run_id))}
        finally:
            conn.close()
        now = time.time()
        stale_ids = {attempt["id"]: attempt for attempt in stale}
        owners = {attempt["id"]: attempt for attempt in cut_off} | stale_ids
        await self._kill_leftovers([(owners[attempt_id], pgid) for attempt_id, pgid in groups
                                    if attempt_id in owners and pgid is not None])
        for attempt in stale:
            job = self.jobs[attempt["job_id"]]
            sink = EventSink(self.writer, self.run_id, job["id"], attempt["id"], seqs.get(attempt["id"], 0))
            adapter = self.ctx.agents.get(job["agent"])
            # Before anything reads what the attempt left (the replay below, any excerpt), its raw logs
            # and the files it wrote lose every secret: the agent may have been killed mid-sentence.
            since = attempt["started_at"] - 1 if attempt["started_at"] is not None else None
            scrubbed = await asyncio.to_thread(scrub_attempt, Path(attempt["workdir"]).parent, since)
            if scrubbed:
                sink.emit("redacted", {"files": len(scrubbed), "paths": [str(p) for p in scrubbed[:20]],
                                       "when": "resume"})
            head, tail = limits_of(self.bench)
            budget = OutputBudget(sink, head - spent.get(attempt["id"], 0), tail)
            replayed = replay_attempt_logs(Path(attempt["workdir"]).parent / "logs", attempt["id"],
                                           announced.get(attempt["id"], set()), logged, sink, adapter, budget)
            sink.emit("interrupted", {"reason": "engine stopped while the attempt ran", "replayed_lines": replayed})
            self.writer.update("attempts", attempt["id"], {
                "state": "error", "category": "infra", "reason": "interrupted: engine stopped", "finished_at": now,
            })
            self.writer.execute("UPDATE leases SET ended_at = ? WHERE attempt_id = ? AND ended_at IS NULL", (now, attempt["id"]))
        for job in self.jobs.values():
            if job["state"] in {"running", "paused"}:
                job["state"] = "queued"
                self.writer.update("jobs", job["id"], {"state": "queued", "reason": "re-queued after interruption"})
        await self.writer.flush()

    async def _kill_leftovers(self, groups: list[tuple[dict[str, Any], int]]) -> None:
        """Kill the process groups the dead engine's attempts left running (or, on an SSH host that
        was cut off, may have left), each where it ran: on
        this machine directly; on an SSH host over its connection — now if it is up, else as soon as
        it is back (its pids mean nothing here; the fleet stores those kills). Each kill is stored as
        a `leftover_killed` event. A group is killed only while it still runs inside its attempt's
        work dir (a recycled pgid of another program is left alone)."""
        hosts = {host.name: host for host in self.pool.hosts}
        remote: dict[str, Any] = {}
        for attempt, pgid in groups:
            host = hosts.get(attempt["host"])
            workdir = Path(attempt["workdir"])
            if host is not None and hasattr(host, "note_orphan"):
                host.note_orphan(pgid, workdir)
                remote[host.name] = host
            elif kill_stale_group(pgid, workdir):
                self.writer.event(self.run_id, "leftover_killed",
                                  {"pgid": pgid, "host": attempt["host"], "workdir": str(workdir)},
                                  attempt_id=None, job_id=attempt["job_id"])
        for host in remote.values():
            if host.available():
                await host.reap_orphans()

    # -- dispatch ---------------------------------------------------------------------------
    async def _dispatch_loop(self) -> str:
        while True:
            if not self.cancelled and not self.paused:
                self._dispatch()
            idle = not self.pending and not self.requeue_after and not self.tier_retries
            if not self.running and (self.cancelled or idle):
                if self.interrupted:
                    return "interrupted"
                return "cancelled" if self.cancelled else "finished"
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=CONTROL_POLL_S)
            except TimeoutError:
                pass
            self._release_backoffs()

    def _end_jobs_no_host_can_run(self) -> None:
        """When every host of the run is broken for good (a host key, a refused user, a data dir its
        user cannot create), the waiting jobs end now, each with the hosts' reasons, instead of waiting
        for a host that cannot come back. One attempt is recorded per job so that every view shows its
        category (`host_setup`: infrastructure, outside every denominator, never retried)."""
        hosts = self.pool.hosts
        if not hosts or not all(host.broken for host in hosts):
            return
        waiting = [*self.pending, *self.requeue_after, *(work.job_id for work in self.tier_retries)]
        if not waiting:
            return
        self.pending.clear()
        self.requeue_after.clear()
        self.tier_retries.clear()
        reason = "no host of the run can run it: " + "; ".join(
            f"host {host.name}: {(host.broken or '').removeprefix(f'host {host.name}: ')}" for host in hosts)
        now = time.time()
        for job_id in dict.fromkeys(waiting):
            job = self.jobs[job_id]
            if job["state"] in FINISHED_JOB_STATES or job_id in self.running:
                continue
            job["attempts"] += 1
            self.writer.execute(
                "INSERT INTO attempts (run_id, job_id, number, state, category, reason, started_at, finished_at)"
                " VALUES (?, ?, ?, 'error', 'host_setup', ?, ?, ?)",
                (self.run_id, job_id, job["attempts"], reason, now, now))
            self._finish_unstarted(job, AttemptOutcome("error", "host_setup", reason))

    def _finish_unstarted(self, job: dict[str, Any], outcome: AttemptOutcome) -> None:
        now = time.time()
        job["state"] = outcome.state
        self.writer.update("jobs", job["id"], {"state": outcome.state, "attempts": job["attempts"],
                                               "reason": outcome.reason, "finished_at": now})
        self.writer.event(self.run_id, "job_state", {"state": outcome.state, "attempt_state": outcome.state,
                                                     "category": outcome.category, "reason": outcome.reason},
                          job_id=job["id"], attempt_id=None)
        self.display.job_finished(job, outcome)

    def _dispatch(self) -> None:
        """Start queued jobs as `engine.packing` plans: widest and longest first, later jobs
        backfilled onto free slots and GPUs only where they cannot delay the job waiting longest for
        them (its docstring says why and what is guaranteed)."""
        self._end_jobs_no_host_can_run()
        self._dispatch_tier_retries()
        if not self.pending or len(self.running) >= self.limit:
            return
        # A round that started nothing is redone at once when anything changed (a job ended or was queued,
        # a host came up); with nothing changed, only time moves estimates along: once a second will do.
        now = time.monotonic()
        state = (tuple(self.pending), tuple(self.running), self.limit, int(now / REPLAN_IDLE_S),
                 tuple((host.busy_slots, len(host.free_gpus), host.available()) for host in self.pool.hosts))
        if state == self._idle_plan_state:
            return
        queued = [QueuedWork(job_id, self.pool.grantable(self.jobs[job_id]["gpus_needed"]), self._estimate(job_id),
                          position) for position, job_id in enumerate(self.pending)]
        rooms = [HostRoom(host.name, host.slots, len(host.gpu_ids), host.slots - host.busy_slots,
                          len(host.free_gpus), host.available(), host.gpus_shared) for host in self.pool.hosts]
        running = [RunningWork(item.lease.host.name, len(item.lease.gpus), item.started + item.estimate_s,
                               item.started + self.durations.bound_s)
                   for item in self.running.values() if item.lease is not None]
        decided = plan(queued, rooms, running, now=now, job_limit=self.limit, promised=self.promised,
                       place=self._place)
        started: set[int] = set()
        for job_id, host in decided.starts:
            job = self.jobs[job_id]
            lease = self.pool.lease(job["gpus_needed"], on=host)
            if lease is not None:
                self._start(job, lease)
                started.add(job_id)
        self.pending = deque(job_id for job_id in self.pending if job_id not in started)
        for job_id in set(self.promised) - set(self.pending):  # started, cancelled or retried: no promise left
            del self.promised[job_id]
        self._idle_plan_state = None if started else state

    @staticmethod
    def _place(work: QueuedWork, allowed: list[HostRoom]) -> HostRoom:
        """The pool's own host preference, on the policy's view of the hosts."""
        return min(allowed, key=lambda room: HostPool.preference(
            room.gpus > 0, (room.slots - room.free_slots) / room.slots, work.gpus))

    def _estimate(self, job_id: int) -> float:
        job = self.jobs[job_id]
        return self.durations.estimate(job["repo_id"], job["agent"])

    def queue_tier_retry(self, job_id: int, tier: str) -> None:
        self.tier_retries.append(TierWork(job_id, (tier,), scope=tier, log_prefix="retry",
                                          announce=("tier_retry", {"tier": tier})))
        self.wake.set()

    def _dispatch_tier_retries(self) -> None:
        waiting: deque[TierWork] = deque()
        while self.tier_retries and len(self.running) < self.limit:
            work = self.tier_retries.popleft()
            job = self.jobs[work.job_id]
            gpus = work.gpus if work.gpus is not None else max(self._tier_gpus(job, tier) for tier in work.tiers)
            host = work.kept["host"] if work.kept else None
            lease = None if work.job_id in self.running else self.pool.lease(gpus, on=host)
            if lease is None:
                waiting.append(work)
                continue
            self._launch(job, lambda running: self._run_tier(job, work, running, lease),
                         f"tier-{job['key']}-{'-'.join(work.tiers)}", lease)
        waiting.extend(self.tier_retries)
        self.tier_retries = waiting

    def _tier_gpus(self, job: dict[str, Any], tier: str) -> int:
        if tier == "C5":
            # The audit compares GPU claims with the framework probe and with the lease itself: it must
            # see the GPUs the agent worked with, the job's own count.
            return job["gpus_needed"]
        if tier not in GPUS_FOR:
            return 0
        entry = self.suite.repo(job["repo_id"]).tiers().get(ENTRYPOINT_OF.get(tier, ""))
        return getattr(entry, "gpus", GPUS_FOR[tier]) if entry is not None and not isinstance(entry, str) else GPUS_FOR[tier]

    async def _run_tier(self, job: dict[str, Any], work: TierWork, running: Running, lease: Lease) -> None:
        """Tiers judged again: a new attempt (scope = the re-run tier, or `rescore`) over a kept work dir."""
        kept = work.kept or self._latest_full_attempt(job["id"])
        job["attempts"] += 1
        number, now = job["attempts"], time.time()
        gpus = ",".join(str(gpu) for gpu in lease.gpus)
        outcome = AttemptOutcome("error", "infra", "tier re-run did not start")
        attempt_id: int | None = None
        try:
            attempt_id = await self.writer.insert("attempts", {
                "run_id": self.run_id, "job_id": job["id"], "number": number, "state": "running", "scope": work.scope,
                "host": lease.host.name, "gpus": gpus, "workdir": kept["workdir"], "started_at": now, "heartbeat_at": now,
            })
            self.writer.update("jobs", job["id"], {"attempts": number})
            self.writer.execute(
                "INSERT INTO leases (run_id, job_id, attempt_id, host, gpus, started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (self.run_id, job["id"], attempt_id, lease.host.name, gpus, now),
            )
            sink = EventSink(self.writer, self.run_id, job["id"], attempt_id)
            running.attempt = JobAttempt(self.ctx, job, kept["number"], attempt_id, lease, sink,
                                         log_prefix=f"{work.log_prefix}{number}-", scoring_id=work.scoring_id,
                                         recorded_number=number)
            kind, data = work.announce
            sink.emit(kind, {**data, "kept_attempt": kept["number"]})
            outcome = await running.attempt.execute_tiers(work.tiers, self._original_tier_rows(job["id"]))
        except asyncio.CancelledError:
            outcome = AttemptOutcome("cancelled", reason=running.stop_reason)
        except StoreFailure as failure:  # the store or the run's disk failed: the run stops
            outcome = AttemptOutcome("error", "infra", f"interrupted: {failure}")
            self._store_failed(failure)
        except Exception as error:  # the run goes on
            outcome = AttemptOutcome("error", "infra", f"{type(error).__name__}: {error}")
        finally:
            self.pool.release(lease)
            del self.running[job["id"]]
            self.wake.set()
        end = time.time()
        if attempt_id is not None:
            self.writer.update("attempts", attempt_id, {
                "state": outcome.state, "category": outcome.category, "reason": outcome.reason,
                "finished_at": end, "phase": None})
            self.writer.execute("UPDATE leases SET ended_at = ? WHERE attempt_id = ?", (end, attempt_id))
        self._tier_work_finished(job, work, kept, attempt_id, outcome)

    def _tier_work_finished(
        self, job: dict[str, Any], work: TierWork, kept: dict[str, Any], attempt_id: int | None,
        outcome: AttemptOutcome,
    ) -> None:
        why = f": {outcome.reason}" if outcome.state == "error" and outcome.reason else ""
        self.display.message(f"{job['key']}: tier {work.tiers[0]} re-run {outcome.state}{why}")

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        """A short read on its own read-only connection (what the writer committed so far)."""
        conn = connect(self.db_path, readonly=True)
        try:
            return [dict(row) for row in conn.execute(sql, params)]
        finally:
            conn.close()

    def _latest_full_attempt(self, job_id: int) -> dict[str, Any]:
        return self._read(
            "SELECT number, workdir FROM attempts WHERE job_id = ? AND scope = 'job' ORDER BY number DESC LIMIT 1",
            (job_id,))[0]

    def _original_tier_rows(self, job_id: int) -> dict[str, Any]:
        """The newest verdict of each tier of the job in the run's own (original) scoring."""
        rows = self._read(
            "SELECT tier, status, category FROM tier_results WHERE job_id = ? AND (scoring_id IS NULL OR scoring_id"
            " IN (SELECT id FROM scorings WHERE number = 0)) ORDER BY id", (job_id,))
        return {row["tier"]: row for row in rows}

    def _release_backoffs(self) -> None:
        now = time.monotonic()
        for job_id, when in list(self.requeue_after.items()):
            if when <= now:
                del self.requeue_after[job_id]
                self.pending.append(job_id)

    def _start(self, job: dict[str, Any], lease: Lease) -> None:
        job["attempts"] += 1
        job["state"] = "running"
        self._launch(job, lambda running: self._run_job(job, running, lease), f"job-{job['key']}", lease)

    def _launch(self, job: dict[str, Any], work: Callable[[Running], Coroutine[Any, Any, None]], name: str,
                lease: Lease) -> None:
        """Run `work` as the job's task; the task gets its own `Running` so a stop reason can reach it."""
        running = Running(task=None, lease=lease, started=time.monotonic(),  # type: ignore[arg-type]
                          estimate_s=self._estimate(job["id"]))  # task set just below, before anything awaits
        running.task = asyncio.create_task(work(running), name=name)
        self.running[job["id"]] = running

    async def _run_job(self, job: dict[str, Any], running: Running, lease: Lease) -> None:
        number = job["attempts"]
        now = time.time()
        gpus = ",".join(str(gpu) for gpu in lease.gpus)
        job["started_at"] = job["started_at"] or now
        self.writer.update("jobs", job["id"], {
            "state": "running", "attempts": number, "host": lease.host.name, "gpus": gpus,
            "started_at": job["started_at"], "finished_at": None, "reason": None,
        })
        workdir = attempt_dir(self.run_dir, job["repo_id"], job["agent"], number) / "work"
        attempt_id: int | None = None
        outcome = AttemptOutcome("error", "infra", "attempt did not start")
        try:
            attempt_id = await self.writer.insert("attempts", {
                "run_id": self.run_id, "job_id": job["id"], "number": number, "state": "running",
                "host": lease.host.name, "gpus": gpus, "workdir": str(workdir), "started_at": now,
                "heartbeat_at": now,
            })
            self.writer.execute(
                "INSERT INTO leases (run_id, job_id, attempt_id, host, gpus, started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (self.run_id, job["id"], attempt_id, lease.host.name, gpus, now),
            )
            sink = EventSink(self.writer, self.run_id, job["id"], attempt_id)
            running.attempt = JobAttempt(self.ctx, job, number, attempt_id, lease, sink)
            sink.emit("job_state", {"state": "running", "attempt": number, "host": lease.host.name, "gpus": list(lease.gpus)})
            outcome = await running.attempt.execute()
        except asyncio.CancelledError:
            outcome = AttemptOutcome("cancelled", reason=running.stop_reason)
        except StoreFailure as failure:  # the store or the run's disk failed: the run stops
            outcome = AttemptOutcome("error", "infra", f"interrupted: {failure}")
            self._store_failed(failure)
        except Exception as error:  # a bug or an unexpected infrastructure fault: the run goes on
            outcome = AttemptOutcome("error", "infra", f"{type(error).__name__}: {error}")
        finally:
            self.pool.release(lease)
            del self.running[job["id"]]
            self.wake.set()
        self._finish_attempt(job, attempt_id, running, outcome)

    def _finish_attempt(
        self, job: dict[str, Any], attempt_id: int | None, running: Running, outcome: AttemptOutcome
    ) -> None:
        now = time.time()
        stop = running.stop_reason
        attempt_state, category, reason = outcome.state, outcome.category, outcome.reason
        if stop == "shutdown":
            why = f"interrupted: {self.stop_cause}" if self.stop_cause else "interrupted by operator"
            attempt_state, category, reason = "error", "infra", why
        elif stop == "retry":
            reason = "superseded by a retry"
        elif stop == "cancel":
            reason = "cancelled by operator"
        if stop is None and attempt_state in {"done", "error"} and category not in INFRA_CATEGORIES:
            self.durations.record(job["repo_id"], job["agent"], time.monotonic() - running.started)
        if attempt_id is not None:
            self.writer.update("attempts", attempt_id, {
                "state": attempt_state, "category": category, "reason": reason, "finished_at": now, "phase": None,
            })
            self.writer.execute("UPDATE leases SET ended_at = ? WHERE attempt_id = ?", (now, attempt_id))
        if stop in {"retry", "shutdown"}:
            job_state = "queued"
            if stop == "retry":
                self.pending.append(job["id"])
        elif outcome.state == "error" and is_retried(outcome.category) and self._may_retry_infra(job):
            job_state = "queued"
            self.requeue_after[job["id"]] = time.monotonic() + self.bench.defaults.retries.backoff_s * job["attempts"]
        else:
            job_state = outcome.state
        job["state"] = job_state
        self.writer.update("jobs", job["id"], {
            "state": job_state, "reason": reason, "finished_at": now if job_state in FINISHED_JOB_STATES else None,
        })
        self.writer.event(
            self.run_id, "job_state",
            {"state": job_state, "attempt_state": attempt_state, "category": category, "reason": reason},
            job_id=job["id"], attempt_id=None,
        )
        if job_state in FINISHED_JOB_STATES:
            self.display.job_finished(job, AttemptOutcome(attempt_state, category, reason))

    def _may_retry_infra(self, job: dict[str, Any]) -> bool:
        infra_attempts = job.get("infra_failures", 0) + 1
        job["infra_failures"] = infra_attempts
        return infra_attempts <= self.bench.defaults.retries.infra

    # -- heartbeats and shutdown ------------------------------------------------------------
    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            now = time.time()
            self.writer.update("runs", self.run_id, {"heartbeat_at": now})
            self.writer.execute(
                "UPDATE attempts SET heartbeat_at = ? WHERE run_id = ? AND state = 'running'", (now, self.run_id)
            )

    def request_stop(self) -> None:
        """Thread-safe Ctrl-C: interrupt the run from any thread (the dashboard quitting, say)."""
        loop = self._loop
        if loop is None:  # not started yet: it stops as soon as it starts dispatching
            self._interrupt()
            return
        try:
            loop.call_soon_threadsafe(self._interrupt)
        except RuntimeError:  # the loop is closed: the engine has already finished
            pass

    def interrupt_message(self) -> str:
        return f"interrupted: stopping jobs (resume with `resenv run --resume {self.run_id}`)"

    def _interrupt(self, cause: str | None = None) -> None:
        """Ctrl-C / SIGTERM (or the store failing, `cause`): kill every sandbox, record the attempts as
        interrupted, stop."""
        if self.cancelled:
            return
        self.stop_cause = cause
        self.display.message(self.interrupt_message())
        self.cancelled = True
        self.interrupted = True
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no loop running yet
            current = None
        for running in self.running.values():
            running.stop_reason = "shutdown"
            if running.task is not current:  # a job that hit the failure itself is already ending
                running.task.cancel()
        self.wake.set()

    # -- controls ---------------------------------------------------------------------------
    async def _poll_controls(self) -> None:
        while True:
            await asyncio.sleep(CONTROL_POLL_S)
            await self._apply_controls()

    async def _apply_controls(self) -> None:
        """Apply and acknowledge every control not yet acknowledged, oldest first."""
        rows = self._read("SELECT * FROM controls WHERE run_id = ? AND acked_at IS NULL ORDER BY id", (self.run_id,))
        if rows:
            await self.writer.flush()  # a control may read what the engine recorded (a tier retry: the verdicts)
        for control in rows:
            ack, message = await self.controls.apply(control)
            self.writer.update("controls", control["id"], {"acked_at": time.time(), "ack": ack, "ack_message": message})
            self.writer.event(self.run_id, "control", {**control, "ack": ack, "ack_message": message},
                              job_id=control["job_id"])
        if rows:
            await self.writer.flush()
