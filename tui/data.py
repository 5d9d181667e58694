"""The dashboard's data layer: what the TUI knows about a run, kept current by cheap indexed queries.

The store is the only interface with the engine. A `RunFeed` loads a run once (`load`) and then
only asks for what changed (`poll`): events of the run with `id` greater than the last one seen
(the `events_run` index), the jobs those events name (primary key), usage and GPU samples newer
than the last id seen (primary key ranges), and the acknowledgements of the controls this
dashboard sent. Every few seconds it re-reads the jobs' state columns to catch a change that came
with no event (a resumed engine re-queueing jobs, say): one narrow indexed scan, diffed here, so
the screen still only hears about rows that changed.

Polling runs in ONE background thread (`Poller`) for every open feed; the UI thread takes the
coalesced changes (`RunFeed.take`) on its paint timer. Job views are immutable and replaced, never
mutated, so the UI always reads a consistent row.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.results.eventtext import format_event, queue_text
from ..engine.money import add as add_spend, spend, usd
from ..engine.outcomes import errors_text
from ..engine.runref import find_run
from ..engine.store.schema import SCHEMA_VERSION
from ..engine.results.scorings import SCORINGS_SCHEMA, Scoring, header as scoring_header, list_scorings, resolve_scoring
from .views import ALL_TIERS, Changes, HostView, JobView, Sample

if TYPE_CHECKING:  # imported lazily: engine.store.db brings its writer's imports, engine.results.scoring the probes
    from ..engine.results.scoring import RunScores
    from ..engine.store.db import StoreReader


# Mirrors resenv.engine.runfacts (STALE_AFTER_S and engine_alive), written for the dashboard's rows.
# tests/tui/test_data.py checks that both agree.
STALE_AFTER_S = 15.0


def engine_alive(run: dict[str, Any]) -> bool:
    """A run is owned by a live engine if its heartbeat is fresh and (when local) its PID exists."""
    if run.get("heartbeat_at") is None or time.time() - run["heartbeat_at"] > STALE_AFTER_S:
        return False
    if run.get("engine_host") == platform.node() and run.get("engine_pid"):
        try:
            os.kill(run["engine_pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return run.get("state") in {"running", "paused"}


POLL_S = 0.25
IDLE_POLL_S = 1.0  # a run no live engine owns changes rarely (another process's controls, a resume)
RECONCILE_S = 5.0
HOSTS_EVERY_S = 2.0
SCORES_EVERY_S = 2.0
EVENTS_PER_POLL = 5000
MAX_POLL_ROUNDS = 4
GPU_HISTORY = 240
STALE_SAMPLE_S = 15.0
TRANSCRIPT_BACKFILL = 5000
TRANSCRIPT_KINDS = ("transcript", "command", "exit", "phase", "timeout", "tier", "interrupted", "agent_finished",
                    "error", "checkout", "leftover_killed", "tier_retry", "rescore", "slurm", "omitted",
                    # the agent session's own events (engine/agents/session.py), in time order with its transcript
                    "agent_version", "agent_prompt", "budget", "warning", "redacted", "agent_hung", "agent_stopped",
                    "integrity")
STATE_KINDS = ("job_state", "phase", "tier", "run_state", "control", "interrupted", "slurm")
USAGE_KIND = "usage"  # a session flushed its usage rows (updated in place): the job's spend is read again
JOB_COLUMNS = "id, key, repo_id, agent, gpus_needed, state, attempts, host, gpus, reason, started_at, finished_at"
# why a job in `error` ended: the category of its latest full attempt (scope exists from schema 2 on)
ENDED_BY = ("CASE WHEN state = 'error' THEN (SELECT a.category FROM attempts a WHERE a.job_id = jobs.id{scope}"
            " ORDER BY a.number DESC LIMIT 1) END")
USAGE_SUMS = ("SUM(u.input_tokens + u.cached_input_tokens + u.cache_write_tokens + u.output_tokens),"
              " SUM(u.cost_usd), COUNT(u.cost_usd), COUNT(*)")


def job_columns(version: int) -> str:
    """JOB_COLUMNS and the error category, for a store of schema `version`."""
    scope = " AND a.scope = 'job'" if version >= 2 else ""
    return f"{JOB_COLUMNS}, {ENDED_BY.format(scope=scope)}"


# -- read-only access ------------------------------------------------------------------------
class FeedError(Exception):
    """The store or the run cannot be read."""


class Reader:
    """A read-only connection as engine.store.db.connect(readonly=True) opens it, without importing
    engine.store.db, whose writer side (asyncio and the rest) the dashboard's start-up never needs."""

    def __init__(self, path: Path) -> None:
        if not Path(path).exists():
            raise FeedError(f"no resenv database at {path}")
        self.path = Path(path)
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA busy_timeout = 10000")
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise FeedError(f"database schema version {version} is newer than this resenv understands")
        if version == 0:
            raise FeedError(f"{path} is not a resenv database (no schema)")
        self.version = version  # the dashboard reads older stores as they are, without upgrading them

    def scorings(self, run_id: str) -> list[Scoring]:
        """The run's scorings (only its original one in a store from before scorings)."""
        return list_scorings(self.rows, run_id, versioned=self.version >= SCORINGS_SCHEMA)

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(sql, params)]

    def run(self, run_id: str) -> dict[str, Any] | None:
        found = self.rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        return found[0] if found else None

    def close(self) -> None:
        self.conn.close()


def resolve_run(db_path: Path, ref: str | None) -> dict[str, Any]:
    """A run by id, unique id prefix, or `latest` / None (as StoreReader.resolve_run)."""
    reader = Reader(db_path)
    try:
        return find_run(reader.rows, ref, db_path, FeedError)
    finally:
        reader.close()


def store_reader(db_path: Path) -> StoreReader:
    from ..engine.store.db import StoreReader

    return StoreReader(db_path)


# -- the feed ---------------------------------------------------------------------------------
def attempt_scope(row: Any) -> str:
    """An attempt's scope: `job` (a full attempt), the tier a tier re-run re-ran (schema v2), or
    `rescore` (the tiers of a rescore, schema v4)."""
    try:
        return row["scope"] or "job"
    except (IndexError, KeyError):
        return "job"


def json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def packed(db: Reader, sql: str, params: Any = ()) -> Any:
    """The one JSON value `sql` selects (a `json_group_array` or `json_group_object`), decoded.

    A query read row by row releases and retakes the GIL at every row; on open, while the UI thread
    imports Textual and lays out its screen, each retake can wait out a switch interval, and the
    10,000 jobs and 60,000 tier results of a big run took half a second to read that way. Packed,
    the whole read is one step (SQLite's own work, without the GIL) and one `json.loads`."""
    return json.loads(db.conn.execute(sql, params).fetchone()[0])  # an aggregate: one row, even of no rows


def exact(column: str) -> str:
    """A REAL column as text that converts back to the same float (JSON would keep 15 digits; the
    reconcile compares timestamps exactly); NULL stays NULL."""
    return f"CASE WHEN {column} IS NULL THEN NULL ELSE printf('%!.17g', {column}) END"


class RunFeed:
    """One run as the dashboard sees it. `load` and `poll` run in the poller thread; `take`,
    `watch` and `track_control` are called from the UI thread."""

    def __init__(self, db_path: Path, run_id: str) -> None:
        self.db_path = Path(db_path)
        self.run_id = run_id
        self.lock = threading.Lock()
        self.reader: Reader | None = None
        self.scoring_reader: StoreReader | None = None
        self.loaded = threading.Event()
        self.load_seconds: float | None = None
        self.run: dict[str, Any] = {}
        self.jobs: dict[int, JobView] = {}
        self.tiers_selected: tuple[str, ...] = ALL_TIERS
        self.scores: RunScores | None = None
        # The scoring the dashboard shows: the run's latest finished one (its original while it runs).
        self.scoring: Scoring | None = None
        self.scoring_header = ""
        self.hosts: dict[str, HostView] = {}
        self.gpu: dict[tuple[str, int], deque[Sample]] = {}
        self.tokens = 0
        self.cost: float | None = None  # the run's dollars; None: unknown
        self.cost_partial = False
        self.status_counts: dict[str, int] = {}
        self.polls = 0
        self.poll_seconds: deque[float] = deque(maxlen=50)
        self._pending = Changes()
        self._last_event = 0
        self._last_usage = 0
        self._last_gpu = 0
        self._last_reconcile = 0.0
        self._last_hosts = 0.0
        self._last_scores = 0.0
        self._scores_dirty = True
        self._watch_job: int | None = None
        self._watch_attempt: int | None = None
        self._watch_request: int | None | bool = False  # False: no change requested
        self._controls: dict[int, str] = {}
        self.closed = False
        self.scores_wanted = threading.Event()
        self.next_poll = 0.0

    # -- UI-thread API -------------------------------------------------------------------------
    def take(self) -> Changes:
        with self.lock:
            changes, self._pending = self._pending, Changes()
        return changes

    def watch(self, job_id: int | None) -> None:
        """Stream the transcript of `job_id` (None stops): backfilled, then every new line."""
        with self.lock:
            self._watch_request = job_id
            self._pending.transcript = []
        self.next_poll = 0.0

    def track_control(self, control_id: int, label: str) -> None:
        with self.lock:
            self._controls[control_id] = label
        self.next_poll = 0.0

    def gpu_series(self) -> dict[tuple[str, int], list[Sample]]:
        """A copy of every GPU's recent samples (the poller appends to them)."""
        with self.lock:
            return {key: list(series) for key, series in self.gpu.items()}

    @property
    def live(self) -> bool:
        return bool(self.run) and engine_alive(self.run)

    def close(self) -> None:
        self.closed = True

    # -- poller-thread side --------------------------------------------------------------------
    def _db(self) -> Reader:
        if self.reader is None:
            self.reader = Reader(self.db_path)
        return self.reader

    def shutdown(self) -> None:
        for reader in (self.reader, self.scoring_reader):
            if reader is not None:
                reader.close()
        self.reader = self.scoring_reader = None

    def load(self) -> None:
        """Everything the overview needs, in a handful of indexed queries."""
        started = time.perf_counter()
        db = self._db()
        run = db.run(self.run_id)
        if run is None:
            raise FeedError(f"no run {self.run_id} in {self.db_path}")
        options = json_object(run.get("options_json"))
        self.tiers_selected = tuple(options.get("tiers", ALL_TIERS))
        self.run = {key: value for key, value in run.items() if key != "spec_json"}
        self._last_event = db.conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM events WHERE run_id = ?", (self.run_id,)).fetchone()[0]
        running = {row["job_id"]: (row["id"], row["phase"]) for row in db.conn.execute(
            "SELECT * FROM attempts WHERE run_id = ? AND state = 'running'", (self.run_id,))
            if attempt_scope(row) == "job"}  # a tier re-run (scope = its tier) keeps the job's other results
        self._choose_scoring(db)
        tiers = self._scoring_tiers(db, running)
        usage: dict[int, tuple[int, float | None, bool]] = {}
        self._last_usage = db.conn.execute("SELECT COALESCE(MAX(id), 0) FROM usage").fetchone()[0]
        for job_id, tokens, cost, priced, n in db.conn.execute(
            f"SELECT u.job_id, {USAGE_SUMS} FROM jobs j JOIN usage u ON u.job_id = j.id WHERE j.run_id = ?"
            " GROUP BY u.job_id", (self.run_id,)
        ):
            usage[job_id] = (tokens or 0, *spend(cost, priced, n))
        queues: dict[int, str | None] = {}  # the latest Slurm state of each running attempt's command
        for job_id, (attempt_id, _) in running.items():
            latest = db.conn.execute("SELECT data FROM events WHERE attempt_id = ? AND kind = 'slurm'"
                                     " ORDER BY seq DESC LIMIT 1", (attempt_id,)).fetchone()
            if latest is not None:
                queues[job_id] = queue_text(json_object(latest[0]))
        jobs: dict[int, JobView] = {}
        rows = packed(db, f"SELECT json_group_array(json_array(id, key, repo_id, agent, gpus_needed, state, attempts,"
                          f" host, gpus, reason, {exact('started_at')}, {exact('finished_at')}, category))"
                          f" FROM (SELECT {job_columns(db.version)} AS category FROM jobs WHERE run_id = ?)",
                      (self.run_id,))
        rows.sort(key=itemgetter(0))  # the table's order of rows is by id
        for job_id, key, repo, agent, gpus_needed, state, attempts, host, gpus, reason, start, end, category in rows:
            current = running.get(job_id)
            tokens, cost, partial = usage.get(job_id, (0, None, False))
            jobs[job_id] = JobView(
                id=job_id, key=key, repo=repo, agent=agent, gpus_needed=gpus_needed, state=state, attempts=attempts,
                host=host, gpus=gpus, reason=reason, started_at=None if start is None else float(start),
                finished_at=None if end is None else float(end), tiers=tiers.get(job_id, {}),
                phase=current[1] if current else None, attempt_id=current[0] if current else None, tokens=tokens,
                cost=cost, cost_partial=partial, queue=queues.get(job_id), category=category,
            )
        self.jobs = jobs
        self._sum_spend()
        self._load_hosts(db)
        self._load_gpu_history(db)
        self._last_reconcile = time.monotonic()
        self._count_states()
        self.load_seconds = time.perf_counter() - started
        with self.lock:
            self._pending.job_set = True
            self._pending.run = self._pending.hosts = self._pending.gpu = self._pending.usage = True
        self.loaded.set()

    def _choose_scoring(self, db: Reader) -> bool:
        """Show the run's latest finished scoring; returns whether that changed (a rescore finished)."""
        scorings = db.scorings(self.run_id)
        chosen = resolve_scoring(scorings, "latest")
        changed = self.scoring is None or (chosen.id, chosen.number) != (self.scoring.id, self.scoring.number)
        self.scoring, self.scoring_header = chosen, scoring_header(chosen, scorings)
        return changed

    def _scoring_tiers(self, db: Reader, running: Mapping[int, tuple[int, Any]]) -> dict[int, dict[str, str]]:
        """The latest status of each tier of each job in the shown scoring.

        SQLite picks each (job, tier)'s latest result and packs them all into one JSON text (see
        `packed`). A job with a running attempt shows only that attempt's results in the original
        scoring; those few jobs are read row by row."""
        assert self.scoring is not None
        where, params = self.scoring.where("t.scoring_id")
        # bare columns beside MAX() come from the row holding the maximum: the latest result
        latest = (f"SELECT t.job_id, t.tier, t.status, MAX(t.id) FROM tier_results t WHERE t.run_id = ? AND {where}"
                  " GROUP BY t.job_id, t.tier")
        per_job = f"SELECT job_id, json_group_object(tier, status) AS shown FROM ({latest}) GROUP BY job_id"
        tiers: dict[int, dict[str, str]] = {
            int(job_id): shown for job_id, shown in packed(
                db, f"SELECT json_group_object(job_id, json(shown)) FROM ({per_job})", (self.run_id, *params)).items()}
        if not (self.scoring.original and running):
            return tiers
        for job_id in running:
            tiers.pop(job_id, None)
        for job_id, attempt_id, tier, status in db.conn.execute(
            f"SELECT t.job_id, t.attempt_id, t.tier, t.status FROM tier_results t WHERE t.run_id = ? AND {where}"
            " AND t.job_id IN (SELECT job_id FROM attempts WHERE run_id = ? AND state = 'running') ORDER BY t.id",
            (self.run_id, *params, self.run_id),
        ):
            current = running.get(job_id)
            if current is None:
                continue  # a tier re-run is running: the job keeps its latest results (read above)
            if current[0] != attempt_id:
                continue  # a running retry shows its own tiers, not the last attempt's
            tiers.setdefault(job_id, {})[tier] = status
        return tiers

    def _shown_tier_updates(
        self, db: Reader, updates: dict[int, list[tuple[int | None, str, str]]],
    ) -> dict[int, list[tuple[int | None, str, str]]]:
        """The `tier` events that belong to the shown scoring: a finished rescore never changes, and
        a rescore under way is not shown until it has finished."""
        if self.scoring is None or not self.scoring.original:
            return {}
        attempts = sorted({attempt for events in updates.values() for attempt, _, _ in events if attempt is not None})
        rescoring: set[int] = set()
        for start in range(0, len(attempts), 500):
            chunk = attempts[start:start + 500]
            rescoring |= {row[0] for row in db.conn.execute(
                f"SELECT id FROM attempts WHERE id IN ({','.join('?' * len(chunk))}) AND scope = 'rescore'", chunk)}
        if not rescoring:
            return updates
        return {job_id: [event for event in events if event[0] not in rescoring] for job_id, events in updates.items()}

    def _rescored(self, db: Reader) -> None:
        """A rescore finished: every job's tiers and the pyramid now come from it."""
        tiers = self._scoring_tiers(db, {})
        self.jobs = {job_id: replace(job, tiers=tiers.get(job_id, {})) for job_id, job in self.jobs.items()}
        self._count_states()
        self._scores_dirty = True
        with self.lock:
            self._pending.job_set = True
            self._pending.run = True

    def _sum_spend(self) -> None:
        """The run's tokens and dollars: the sum over its jobs, as `resenv report` sums them."""
        tokens, total = 0, (None, False)
        for job in self.jobs.values():
            tokens += job.tokens
            total = add_spend(total, (job.cost, job.cost_partial))
        self.tokens, (self.cost, self.cost_partial) = tokens, total

    @property
    def cost_text(self) -> str:
        return usd(self.cost, self.cost_partial)

    def error_counts(self) -> dict[str, dict[str, int]]:
        """Per agent, its jobs that ended in `error`, by category (outside every denominator)."""
        counts: dict[str, dict[str, int]] = {}
        for job in self.jobs.values():
            if job.state == "error":
                per = counts.setdefault(job.agent, {})
                per[job.category or "uncategorized"] = per.get(job.category or "uncategorized", 0) + 1
        return counts

    def errors_text(self) -> str:
        """`2 infra errors (1 model_api)` over the whole run; "" when no job ended in error."""
        total: dict[str, int] = {}
        for per in self.error_counts().values():
            for category, n in per.items():
                total[category] = total.get(category, 0) + n
        return errors_text(total)

    def _count_states(self) -> None:
        counts: dict[str, int] = {}
        failing = 0
        for job in self.jobs.values():
            counts[job.state] = counts.get(job.state, 0) + 1
            if job.failing and job.state != "error":
                failing += 1
        counts["failing"] = failing
        self.status_counts = counts

    def _load_hosts(self, db: Reader) -> None:
        hosts = {}
        for row in db.rows("SELECT * FROM hosts WHERE run_id = ? ORDER BY name", (self.run_id,)):
            hosts[row["name"]] = HostView(row["name"], row["kind"], row["state"], json_object(row["inventory_json"]),
                                          row["updated_at"])
        changed = {name: (host.state, host.inventory) for name, host in hosts.items()} != {
            name: (host.state, host.inventory) for name, host in self.hosts.items()}
        self.hosts = hosts
        self._last_hosts = time.monotonic()
        if changed:
            with self.lock:
                self._pending.hosts = True

    def _load_gpu_history(self, db: Reader) -> None:
        self._last_gpu = db.conn.execute("SELECT COALESCE(MAX(id), 0) FROM gpu_samples").fetchone()[0]
        history = {}
        for host in self.hosts.values():
            for gpu in host.gpu_ids:
                rows = db.conn.execute(
                    "SELECT ts, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c FROM gpu_samples"
                    " WHERE host = ? AND gpu = ? ORDER BY ts DESC LIMIT ?", (host.name, gpu, GPU_HISTORY)).fetchall()
                history[(host.name, gpu)] = deque((Sample(*row) for row in reversed(rows)), maxlen=GPU_HISTORY)
        with self.lock:
            self.gpu = history

    def poll(self) -> None:
        started = time.perf_counter()
        db = self._db()
        self._apply_watch_request(db)
        run = db.rows("SELECT * FROM runs WHERE id = ?", (self.run_id,))
        if run:
            fresh = {key: value for key, value in run[0].items() if key != "spec_json"}
            if fresh != self.run:
                self.run = fresh
                with self.lock:
                    self._pending.run = True
        touched: set[int] = set()
        tier_updates: dict[int, list[tuple[int | None, str, str]]] = {}
        phases: dict[int, tuple[int | None, str | None]] = {}
        new_attempts: dict[int, int | None] = {}
        queues: dict[int, str | None] = {}  # job id -> its command's Slurm queue state (None: not queued)
        spent: set[int] = set()  # jobs whose usage rows a session rewrote
        watch_lines: list[str] = []
        watch = self._watch_job
        kinds = (*STATE_KINDS, USAGE_KIND)
        for _ in range(MAX_POLL_ROUNDS):
            rows = db.conn.execute(
                "SELECT id, job_id, attempt_id, kind, data FROM events WHERE run_id = ? AND id > ?"
                f" AND (kind IN ({','.join('?' * len(kinds))}) OR job_id = ?) ORDER BY id LIMIT ?",
                (self.run_id, self._last_event, *kinds, -1 if watch is None else watch, EVENTS_PER_POLL),
            ).fetchall()
            for event_id, job_id, attempt_id, kind, text in rows:
                self._last_event = event_id
                if job_id is not None and job_id == watch and kind in TRANSCRIPT_KINDS:
                    if attempt_id is not None and attempt_id != self._watch_attempt:
                        if self._watch_attempt is not None:
                            watch_lines.append("══ a new attempt ══")
                        self._watch_attempt = attempt_id
                    watch_lines.extend(format_event(kind, json_object(text)))
                if kind == USAGE_KIND and job_id is not None:
                    spent.add(job_id)
                if kind not in STATE_KINDS:
                    continue
                if kind == "run_state":
                    continue
                if job_id is None:
                    continue
                touched.add(job_id)
                if kind == "tier":
                    data = json_object(text)
                    tier_updates.setdefault(job_id, []).append((attempt_id, data.get("tier"), data.get("status")))
                elif kind == "phase":
                    data = json_object(text)
                    if data.get("status") == "started":
                        phases[job_id] = (attempt_id, data.get("phase"))
                elif kind == "job_state":
                    data = json_object(text)
                    if data.get("state") == "running" and attempt_id is not None:
                        new_attempts[job_id] = attempt_id
                        phases.pop(job_id, None)
                        tier_updates.pop(job_id, None)
                    queues[job_id] = None
                elif kind == "slurm":  # a command of the job waits in (or left) the cluster's queue
                    queues[job_id] = queue_text(json_object(text))
            if len(rows) < EVENTS_PER_POLL:
                break
        if touched:
            tier_updates = self._shown_tier_updates(db, tier_updates) if tier_updates else tier_updates
            self._refresh_jobs(db, touched, tier_updates, phases, new_attempts, queues)
        self._poll_usage(db, spent)
        self._poll_gpu(db)
        now = time.monotonic()
        if now - self._last_reconcile >= RECONCILE_S:
            self._reconcile(db)
        if now - self._last_hosts >= HOSTS_EVERY_S:
            self._load_hosts(db)
        # The pyramid is scored once the jobs table has painted (the UI asks), then at most every
        # SCORES_EVERY_S while tier results change.
        if self._scores_dirty and self.scores_wanted.is_set() and now - self._last_scores >= SCORES_EVERY_S:
            self.compute_scores()
        self._poll_controls(db)
        if watch_lines:
            with self.lock:
                if self._watch_job == watch:
                    self._pending.transcript.extend(watch_lines)
        self.polls += 1
        self.poll_seconds.append(time.perf_counter() - started)
        busy = self.live or self._watch_job is not None or self._controls or self._watch_request is not False
        self.next_poll = time.monotonic() + (POLL_S if busy else IDLE_POLL_S)

    def compute_scores(self) -> None:
        """The pyramid panel's numbers, from engine/results/scoring.py (the same numbers as `resenv report`),
        of the scoring the jobs table shows."""
        from ..engine.results.scoring import score_run

        if self.scoring_reader is None:
            self.scoring_reader = store_reader(self.db_path)
        self.scores = score_run(self.scoring_reader, self.run_id, self.scoring or "latest")
        self._scores_dirty = False
        self._last_scores = time.monotonic()
        with self.lock:
            self._pending.scores = True

    def _refresh_jobs(
        self, db: Reader, ids: set[int], tier_updates: dict[int, list[tuple[int | None, str, str]]],
        phases: dict[int, tuple[int | None, str | None]], new_attempts: dict[int, int | None],
        queues: dict[int, str | None] | None = None,
    ) -> None:
        rows = []
        ordered = sorted(ids)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start:start + 500]
            rows += db.conn.execute(
                f"SELECT {job_columns(db.version)} FROM jobs WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
        added = False
        jobs = self.jobs
        for row in rows:
            job_id = row[0]
            old = jobs.get(job_id)
            if old is None:
                if self.jobs is jobs:
                    jobs = dict(jobs)
                added = True
                old = JobView(id=job_id, key=row[1], repo=row[2], agent=row[3], state=row[5])
            values: dict[str, Any] = dict(
                key=row[1], repo=row[2], agent=row[3], gpus_needed=row[4], state=row[5], attempts=row[6], host=row[7],
                gpus=row[8], reason=row[9], started_at=row[10], finished_at=row[11], category=row[12],
            )
            tiers = dict(old.tiers)
            if job_id in new_attempts:
                if self.scoring is None or self.scoring.original:  # a rescore's verdicts stay as they are
                    tiers = {}
                values["attempt_id"] = new_attempts[job_id]
                values["phase"] = None
            for attempt_id, tier, status in tier_updates.get(job_id, ()):
                if tier:
                    tiers[tier] = status
                    if attempt_id is not None:
                        values["attempt_id"] = attempt_id
            if job_id in phases:
                values["attempt_id"] = phases[job_id][0] or values.get("attempt_id", old.attempt_id)
                values["phase"] = phases[job_id][1]
            if row[5] not in ("running", "paused"):
                values["phase"] = None
            if queues and job_id in queues:
                values["queue"] = queues[job_id]
            if row[5] not in ("running", "paused"):
                values["queue"] = None
            values["tiers"] = tiers
            new = replace(old, **values)
            if new != old:
                jobs[job_id] = new
                if tiers != dict(old.tiers):
                    self._scores_dirty = True
                with self.lock:
                    self._pending.jobs.add(job_id)
        if added:
            self.jobs = jobs
            self._scores_dirty = True
            with self.lock:
                self._pending.job_set = True
        self._count_states()

    def _reconcile(self, db: Reader) -> None:
        """Catch job changes that came with no event: one narrow indexed scan, diffed here; and a
        rescore that finished since (its scoring is then the one shown)."""
        self._last_reconcile = time.monotonic()
        if self._choose_scoring(db):
            self._rescored(db)
        changed = set()
        for row in db.conn.execute(
            "SELECT id, state, attempts, host, gpus, reason, started_at, finished_at FROM jobs WHERE run_id = ?",
            (self.run_id,),
        ):
            job = self.jobs.get(row[0])
            if job is None or (job.state, job.attempts, job.host, job.gpus, job.reason, job.started_at,
                               job.finished_at) != tuple(row[1:]):
                changed.add(row[0])
        if changed:
            self._refresh_jobs(db, changed, {}, {}, {})

    def _poll_usage(self, db: Reader, spent: set[int] | None = None) -> None:
        """Read again the spend of the jobs with new usage rows or a `usage` event (a session updates
        its rows in place, so new ids alone would miss what an agent spent since its first flush)."""
        rows = db.conn.execute(
            "SELECT id, run_id, job_id FROM usage WHERE id > ? ORDER BY id LIMIT 20000", (self._last_usage,)).fetchall()
        jobs = set(spent or ())
        for usage_id, run_id, job_id in rows:
            self._last_usage = usage_id
            if run_id == self.run_id:
                jobs.add(job_id)
        jobs &= set(self.jobs)
        if not jobs:
            return
        ordered = sorted(jobs)
        found: dict[int, tuple[int, float | None, bool]] = {}
        for start in range(0, len(ordered), 500):
            chunk = ordered[start:start + 500]
            for job_id, tokens, cost, priced, n in db.conn.execute(
                f"SELECT u.job_id, {USAGE_SUMS} FROM usage u WHERE u.job_id IN ({','.join('?' * len(chunk))})"
                " GROUP BY u.job_id", chunk):
                found[job_id] = (tokens or 0, *spend(cost, priced, n))
        changed = False
        for job_id in ordered:
            tokens, cost, partial = found.get(job_id, (0, None, False))
            old = self.jobs[job_id]
            if (old.tokens, old.cost, old.cost_partial) != (tokens, cost, partial):
                self.jobs[job_id] = replace(old, tokens=tokens, cost=cost, cost_partial=partial)
                changed = True
                with self.lock:
                    self._pending.jobs.add(job_id)
        if changed:
            self._sum_spend()
            with self.lock:
                self._pending.usage = True

    def _poll_gpu(self, db: Reader) -> None:
        rows = db.conn.execute(
            "SELECT id, host, gpu, ts, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c FROM gpu_samples"
            " WHERE id > ? ORDER BY id LIMIT 20000", (self._last_gpu,)).fetchall()
        if not rows:
            return
        got = False
        with self.lock:  # the UI copies the series under this lock (gpu_series)
            for row in rows:
                self._last_gpu = row[0]
                if row[1] not in self.hosts:
                    continue
                series = self.gpu.get((row[1], row[2]))
                if series is None:
                    self.gpu = {**self.gpu, (row[1], row[2]): deque(maxlen=GPU_HISTORY)}
                    series = self.gpu[(row[1], row[2])]
                series.append(Sample(*row[3:]))
                got = True
            if got:
                self._pending.gpu = True

    def _poll_controls(self, db: Reader) -> None:
        with self.lock:
            waiting = dict(self._controls)
        if not waiting:
            return
        ids = list(waiting)
        acked = db.conn.execute(
            f"SELECT id, ack, ack_message FROM controls WHERE id IN ({','.join('?' * len(ids))}) AND ack IS NOT NULL",
            ids).fetchall()
        if acked:
            with self.lock:
                for control_id, ack, message in acked:
                    label = self._controls.pop(control_id, None)
                    if label is not None:
                        self._pending.acks.append((label, ack, message or ""))

    def _apply_watch_request(self, db: Reader) -> None:
        with self.lock:
            request, self._watch_request = self._watch_request, False
        if request is False:
            return
        self._watch_job = request if isinstance(request, int) else None
        self._watch_attempt = None
        lines: list[str] = []
        if self._watch_job is not None:
            lines = self.backfill(db, self._watch_job)
        with self.lock:
            self._pending.transcript = lines
            self._pending.transcript_reset = True

    def backfill(self, db: Reader, job_id: int) -> list[str]:
        """The latest attempt's transcript so far (its last TRANSCRIPT_BACKFILL events), by the
        attempt index; everything after it comes through the tail."""
        attempts = list(db.conn.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,)))
        if not attempts:
            return ["(no attempt yet: the job is queued)"]
        # The newest full attempt and the tier re-runs after it (they probe the state it left).
        start = max((index for index, row in enumerate(attempts) if attempt_scope(row) == "job"), default=0)
        shown = attempts[start:]
        lines: list[str] = []
        budget = TRANSCRIPT_BACKFILL
        chunks = []
        for attempt in reversed(shown):
            if budget <= 0:
                break
            rows = db.conn.execute(
                "SELECT id, kind, data FROM events WHERE attempt_id = ? AND id <= ? ORDER BY seq DESC LIMIT ?",
                (attempt["id"], self._last_event, budget)).fetchall()
            budget -= len(rows)
            chunks.append((attempt, rows))
        if budget <= 0:
            lines.append(f"(earlier lines omitted: showing the last {TRANSCRIPT_BACKFILL} events; the Raw log tab has all)")
        for attempt, rows in reversed(chunks):
            scope = attempt_scope(attempt)
            what = {"job": "", "rescore": " · rescore"}.get(scope, f" · re-run of tier {scope}")
            lines.append(f"══ attempt {attempt['number']}{what} · {attempt['state']} ══")
            for _, kind, text in reversed(rows):
                if kind in TRANSCRIPT_KINDS:
                    lines.extend(format_event(kind, json_object(text)))
        self._watch_attempt = shown[-1]["id"]
        return lines


class Poller(threading.Thread):
    """The one background thread that loads and polls every open feed."""

    def __init__(self, interval: float = POLL_S) -> None:
        super().__init__(name="resenv-tui-poller", daemon=True)
        self.interval = interval
        self.feeds: list[RunFeed] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.wakeup = threading.Event()

    def add(self, feed: RunFeed) -> RunFeed:
        with self.lock:
            self.feeds.append(feed)
        self.wakeup.set()
        return feed

    def remove(self, feed: RunFeed) -> None:
        feed.close()
        self.wakeup.set()

    def poke(self) -> None:
        """Poll now (after a control was sent, say)."""
        self.wakeup.set()

    def stop(self) -> None:
        self.stopped.set()
        self.wakeup.set()

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            with self.lock:
                feeds = list(self.feeds)
            for feed in feeds:
                if feed.closed:
                    feed.shutdown()
                    with self.lock:
                        self.feeds.remove(feed)
                    continue
                try:
                    if not feed.loaded.is_set():
                        feed.load()
                    elif time.monotonic() >= feed.next_poll:
                        feed.poll()
                except Exception as error:  # a DB hiccup must not kill the dashboard
                    with feed.lock:
                        feed._pending.errors.append(f"{type(error).__name__}: {error}")
                    if not feed.loaded.is_set():
                        feed.closed = True
                        feed.loaded.set()
            self.wakeup.wait(max(0.0, self.interval - (time.monotonic() - started)))
            self.wakeup.clear()
        with self.lock:
            for feed in self.feeds:
                feed.shutdown()
