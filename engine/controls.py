"""Operator controls: rows in the `controls` table, applied by the engine that owns the run.

Any process (the CLI, the dashboard, another login) writes a row; the engine applies it within a
poll interval and acknowledges it with `applied` or `rejected` and a message saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .scheduler import Engine

TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")
RUN_ACTIONS = {"pause", "resume", "cancel"}
JOB_ACTIONS = {"pause", "resume", "cancel", "retry"}
ACTIONS = RUN_ACTIONS | JOB_ACTIONS


class ControlApplier:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def apply(self, control: dict[str, Any]) -> tuple[str, str]:
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
        return handler(job) if handler else ("rejected", f"unknown action {action!r}")

    # -- run level --------------------------------------------------------------------------
    def run_pause(self) -> tuple[str, str]:
        self.engine.paused = True
        self.engine.writer.update("runs", self.engine.run_id, {"state": "paused"})
        return "applied", "run paused: no new jobs start; running jobs go on"

    def run_resume(self) -> tuple[str, str]:
        self.engine.paused = False
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

    def job_pause(self, job: dict[str, Any]) -> tuple[str, str]:
        if (sandbox := self._sandbox(job)) is None:
            return "rejected", f"job {job['key']} is {job['state']}, not running"
        sandbox.pause()
        self._set_job_state(job, "paused")
        return "applied", f"job {job['key']} paused (processes stopped)"

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
        if job["id"] in engine.running or job["state"] not in ("done", "error", "cancelled"):
            return "rejected", f"job {job['key']} is {job['state']}; retry a tier once the job has finished"
        if job["attempts"] == 0:
            return "rejected", f"job {job['key']} never ran: there is no post-agent state to probe"
        engine.queue_tier_retry(job["id"], tier)
        return "applied", f"job {job['key']}: tier {tier} queued to re-run on the state attempt {job['attempts']} left"

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
