"""Operator controls: rows in the `controls` table, applied by the engine that owns the run.

Any process (the CLI, the dashboard, another login) writes a row; the engine applies it within a
poll interval and acknowledges it with `applied` or `rejected` and a message saying why.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .scheduler import Engine

TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")
RUN_ACTIONS = {"pause", "resume", "cancel"}
JOB_ACTIONS = {"pause", "resume", "cancel", "retry"}
ACTIONS = RUN_ACTIONS | JOB_ACTIONS
FINISHED = ("done", "error", "cancelled")
PAUSE_CONFIRM_S = 60.0  # how long a pause's ack waits for a cluster's controller to confirm it
_ENDED = {"cancelled": "was cancelled", "error": "ended in an error", "done": "finished"}

Rows = Callable[[str, tuple[Any, ...]], list[dict[str, Any]]]


def run_tiers(run: Mapping[str, Any]) -> tuple[str, ...]:
    """The tiers a run scores (runs from before `--tiers` score them all)."""
    try:
        options = json.loads(run.get("options_json") or "{}")
    except ValueError:
        options = {}
    tiers = options.get("tiers", TIERS) if isinstance(options, dict) else TIERS
    return tuple(tier for tier in TIERS if isinstance(tiers, (list, tuple)) and tier in tiers)


def tier_never_ran(rows: Rows, run: Mapping[str, Any], job: Mapping[str, Any], tier: str) -> str | None:
    """Why a retry of `tier` on a finished `job` is refused because that tier never ran, or None.

    A tier retry judges the state the job's newest full attempt left, and its verdict replaces the
    tier's: a tier the run does not score, or one that attempt never reached (cancelled or failed
    before its probes), has no verdict to replace, and judging a state that was never judged would
    add a job to the tier's denominator.

    A tier that attempt skipped by rule is refused too: `not_applicable` is the repo's own
    declaration, and `insufficient_hardware` comes from the GPUs of the run's hosts, which are fixed
    in the run's stored spec, so a retry would only skip it again (after a new provision and a new
    attempt). To judge such a tier on GPUs, start a new run on a host that has them."""
    scored = run_tiers(run)
    if tier not in scored:
        return (f"tier {tier} never ran: run {run['id']} scores {', '.join(scored) or 'no tier'}, "
                "so there is nothing to retry")
    kept = rows("SELECT id, number, state, category, reason, workdir FROM attempts WHERE job_id = ? AND scope = 'job'"
                " ORDER BY number DESC LIMIT 1", (job["id"],))
    if not kept:
        return f"tier {tier} never ran: job {job['key']} has no attempt"
    attempt = kept[0]
    judged = rows(
        "SELECT t.status, t.category, t.evidence_json FROM tier_results t JOIN attempts a ON a.id = t.attempt_id"
        " WHERE t.job_id = ? AND t.tier = ? AND a.workdir = ?"
        " AND (t.scoring_id IS NULL OR t.scoring_id IN (SELECT id FROM scorings WHERE number = 0))"
        " ORDER BY t.id DESC LIMIT 1", (job["id"], tier, attempt["workdir"]))
    if judged and judged[0]["status"] == "skip":
        return (f"tier {tier} was skipped on job {job['key']} ({_skip_reason(judged[0])}): a retry would skip "
                "it again, so there is nothing to retry")
    if judged:
        return None
    phases = rows("SELECT name FROM phases WHERE attempt_id = ? AND name != 'teardown' ORDER BY id DESC LIMIT 1",
                  (attempt["id"],))
    how = _ENDED.get(attempt["state"], f"ended {attempt['state']}")
    if phases:
        how += f" in its {phases[0]['name']} phase"
    why = " ".join(str(attempt["reason"] or attempt["category"] or "").split())
    if why:
        how += f" ({why[:120]}{'…' if len(why) > 120 else ''})"
    return (f"tier {tier} never ran on job {job['key']}: attempt {attempt['number']} {how} before judging it, "
            "so there is nothing to retry")


def kept_attempt(rows: Rows, job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job's newest full attempt: the post-agent state a tier retry judges."""
    kept = rows("SELECT id, number, state, host, finished_at FROM attempts WHERE job_id = ? AND scope = 'job'"
                " ORDER BY number DESC LIMIT 1", (job["id"],))
    return dict(kept[0]) if kept else None


def checkpoint_removed(rows: Rows, run: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
    """Why a tier retry is refused because the kept state was a docker checkpoint image that has since
    been removed (`resenv prune`, or the run's end with `keep_checkpoints: false`), or None."""
    attempt = kept_attempt(rows, job)
    if attempt is None:
        return None
    events = rows("SELECT ts, data FROM events WHERE run_id = ? AND kind = 'docker_prune' AND ts >= ? ORDER BY id",
                  (run["id"], attempt["finished_at"] or 0))
    for event in events:
        try:
            data = json.loads(event["data"])
        except ValueError:
            continue
        removed = data.get("removed") if isinstance(data, dict) else None
        if data.get("host") != attempt["host"] or not isinstance(removed, dict) or not removed.get("images"):
            continue
        how = ("`resenv prune`" if data.get("by") == "resenv prune"
               else "the run's end (docker.keep_checkpoints: false)")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["ts"]))
        return (f"the state attempt {attempt['number']} of job {job['key']} left was a checkpoint image on docker host"
                f" {attempt['host']}, removed by {how} at {when}: no tier can be judged on it again"
                f" (`resenv control retry {run['id']} {job['key']}` runs a new attempt)")
    return None


def _skip_reason(result: Mapping[str, Any]) -> str:
    """`insufficient_hardware: needs 1 GPU, host gave 0`: a skip's category and the reason it recorded."""
    try:
        evidence = json.loads(result["evidence_json"] or "{}")
    except ValueError:
        evidence = {}
    reason = evidence.get("reason") if isinstance(evidence, dict) else None
    return f"{result['category']}: {reason}" if reason else str(result["category"])


def record_refused(db: Path, run_id: str, action: str, message: str, *, job_id: int | None = None,
                   tier: str | None = None, origin: str = "cli") -> int:
    """A control refused before any engine saw it, kept in the store as `rejected` with its reason."""
    from .store import open_for_writing

    now = time.time()
    conn = open_for_writing(db)
    try:
        with conn:
            cursor = conn.execute(
                "INSERT INTO controls (run_id, job_id, tier, action, created_at, origin, acked_at, ack, ack_message)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'rejected', ?)", (run_id, job_id, tier, action, now, origin, now, message))
        return int(cursor.lastrowid)
    finally:
        conn.close()


class ControlApplier:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def apply(self, control: dict[str, Any]) -> tuple[str, str]:
        """Apply one control; returns (ack, message) with ack `applied` or `rejected`."""
        action = control["action"]
        if control["job_id"] is None:
            handler = getattr(self, f"run_{action}", None)
            return handler() if handler else ("rejected", f"{action!r} needs a job")
        job = self.engine.jobs.get(control["job_id"])
        if job is None:
            return "rejected", f"job {control['job_id']} is not in this run"
        if action == "retry" and control.get("tier"):
            return self.tier_retry(job, control["tier"])
        handler = getattr(self, f"job_{action}", None)
        if handler is None:
            return "rejected", f"unknown action {action!r}"
        outcome = handler(job)
        return await outcome if asyncio.iscoroutine(outcome) else outcome  # a pause waits for its confirmation

    # -- run level --------------------------------------------------------------------------
    def run_pause(self) -> tuple[str, str]:
        self.engine.paused = True
        self.engine.writer.update("runs", self.engine.run_id, {"state": "paused"})
        return "applied", "run paused: no new jobs start; running jobs go on"

    def run_resume(self) -> tuple[str, str]:
        self.engine.paused = False
        self.engine.promised.clear()  # made before the pause: the time it stood still broke them all
        self.engine.writer.update("runs", self.engine.run_id, {"state": "running"})
        self.engine.wake.set()
        return "applied", "run resumed"

    def run_cancel(self) -> tuple[str, str]:
        engine = self.engine
        engine.cancelled = True
        for job_id in list(engine.pending) + list(engine.requeue_after):
            self._mark_cancelled(engine.jobs[job_id])
        engine.pending.clear()
        engine.requeue_after.clear()
        for running in engine.running.values():
            self._stop(running, "cancel")
        engine.wake.set()
        return "applied", "run cancelled: running jobs killed, results kept"

    # -- job level --------------------------------------------------------------------------
    def _sandbox(self, job: dict[str, Any]) -> Any | None:
        """The sandbox of the job's running attempt, if it has one yet."""
        running = self.engine.running.get(job["id"])
        return None if running is None or running.attempt is None else running.attempt.sandbox

    async def job_pause(self, job: dict[str, Any]) -> tuple[str, str]:
        """Stop the job's commands and say what was done: a sandbox whose pause is carried out by
        someone else (a cluster's controller) confirms it first, so the ack never claims more than
        happened."""
        if (sandbox := self._sandbox(job)) is None:
            return "rejected", f"job {job['key']} is {job['state']}, not running"
        sandbox.pause()
        self._set_job_state(job, "paused")
        confirm = getattr(sandbox, "confirm_pause", None)
        if confirm is None:  # signals this engine sent itself: done when pause() returns
            return "applied", f"job {job['key']} paused (processes stopped)"
        try:
            done = await asyncio.wait_for(confirm(), PAUSE_CONFIRM_S)
        except TimeoutError:
            done = f"asked, but not confirmed within {PAUSE_CONFIRM_S:g} s"
        return "applied", f"job {job['key']} paused: {done}"

    def job_resume(self, job: dict[str, Any]) -> tuple[str, str]:
        if (sandbox := self._sandbox(job)) is None:
            return "rejected", f"job {job['key']} is {job['state']}, not paused"
        sandbox.resume()
        self._set_job_state(job, "running")
        return "applied", f"job {job['key']} resumed"

    def job_cancel(self, job: dict[str, Any]) -> tuple[str, str]:
        running = self.engine.running.get(job["id"])
        if running is not None:
            self._stop(running, "cancel")
            return "applied", f"job {job['key']} cancelled (sandbox killed)"
        if job["id"] in self.engine.pending or job["id"] in self.engine.requeue_after:
            self._drop_pending(job["id"])
            self._mark_cancelled(job)
            return "applied", f"job {job['key']} cancelled before it started"
        return "rejected", f"job {job['key']} is already {job['state']}"

    def job_retry(self, job: dict[str, Any]) -> tuple[str, str]:
        engine = self.engine
        if engine.cancelled:
            return "rejected", "the run is being cancelled"
        running = engine.running.get(job["id"])
        if running is not None:
            self._stop(running, "retry")
            return "applied", f"job {job['key']}: attempt {job['attempts']} stopped, a new attempt is queued"
        if job["id"] in engine.pending or job["id"] in engine.requeue_after:
            return "rejected", f"job {job['key']} is already queued"
        self._set_job_state(job, "queued")
        engine.pending.append(job["id"])
        engine.wake.set()
        return "applied", f"job {job['key']}: attempt {job['attempts'] + 1} queued"

    def tier_retry(self, job: dict[str, Any], tier: str) -> tuple[str, str]:
        """Re-run one probe on the kept post-agent state; earlier results stay in the store."""
        engine = self.engine
        if tier not in TIERS:
            return "rejected", f"unknown tier {tier!r}; choose from {', '.join(TIERS)}"
        if engine.cancelled:
            return "rejected", "the run is being cancelled"
        if job["id"] in engine.running or job["state"] not in FINISHED:
            return "rejected", f"job {job['key']} is {job['state']}; retry a tier once the job has finished"
        if job["attempts"] == 0:
            return "rejected", f"job {job['key']} never ran: there is no post-agent state to probe"
        refused = tier_never_ran(engine._read, engine.run, job, tier) or checkpoint_removed(engine._read, engine.run, job)
        if refused is not None:
            return "rejected", refused
        kept = kept_attempt(engine._read, job)
        engine.queue_tier_retry(job["id"], tier)
        number = kept["number"] if kept else job["attempts"]
        return "applied", f"job {job['key']}: tier {tier} queued to re-run on the state attempt {number} left"

    # -- helpers ----------------------------------------------------------------------------
    def _stop(self, running: Any, reason: str) -> None:
        running.stop_reason = reason
        running.task.cancel()

    def _drop_pending(self, job_id: int) -> None:
        if job_id in self.engine.pending:
            self.engine.pending.remove(job_id)
        self.engine.requeue_after.pop(job_id, None)

    def _mark_cancelled(self, job: dict[str, Any]) -> None:
        self._set_job_state(job, "cancelled", reason="cancelled by operator")

    def _set_job_state(self, job: dict[str, Any], state: str, reason: str | None = None) -> None:
        job["state"] = state
        values: dict[str, Any] = {"state": state}
        if reason is not None:
            values["reason"] = reason
        self.engine.writer.update("jobs", job["id"], values)
        self.engine.writer.event(self.engine.run_id, "job_state", {"state": state, "reason": reason}, job_id=job["id"])
