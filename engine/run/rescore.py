"""`resenv rescore RUN`: judge a run's kept post-agent states again, under the current rules, into a
new scoring beside the ones it has.

Scoring rules change (a classifier signature, an audit check); a run judged before the change is
comparable with a newer one only once its environments are judged by the same rules. A rescore
does that without running any agent again: it is the engine's tier-retry machinery (`TierWork`)
applied to every job — one new attempt of scope `rescore` per job reopens a sandbox over the work
dir of the job's latest scored attempt (on a docker host, a container from that attempt's
checkpoint image), on the host that keeps it, with the GPUs it had, and judges the chosen tiers in
pyramid order. Its verdicts carry the new scoring's id; the run's own rows, its jobs' states and
the run's state are left as they were.

Every job ends in `scoring_jobs` as `rescored`, `partial` or `not_rescored` with the reason (its
state is gone, it never ran, its host is down, the rescore was interrupted): nothing is silently
dropped. A rescore holds the run like an engine does, by a heartbeat on its scoring row, so a
`run --resume`, `prune` or another rescore of the run waits for it to end; one that died is
recorded as `interrupted` by the next.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...probes import rules
from ..hosts.fleet import start_fleet, stop_fleet
from ..attempt import AttemptOutcome
from .scheduler import HEARTBEAT_S, Display, Engine, EngineBusy, TierWork
from ..results.scorings import Scoring, live_rescore
from ..runfacts import STALE_AFTER_S
from ..store.db import StoreWriter, open_for_writing
from ..tiers import ALL_TIERS
from ..wording import counted

GPU_TIERS = ("C2", "C3", "C4", "C5")  # C5 reads what the frameworks saw on the leased GPUs


class RescoreRefused(Exception):
    """The run cannot be rescored now (a dead engine left attempts running, or a tier it never scored)."""


@dataclass
class Planned:
    """A job the rescore judges: the attempt whose state it probes, and how its own attempt ended."""

    job: dict[str, Any]
    kept: dict[str, Any]
    attempt_id: int | None = None
    outcome: AttemptOutcome | None = None


class Rescorer(Engine):
    """An engine that only judges kept states: no agent, no controls, no change to the run's record."""

    lock_role = "rescore"

    def __init__(
        self, db_path: Path, run_id: str, display: Display, *, tiers: tuple[str, ...] | None = None,
        jobs_limit: int | None = None, install_signals: bool = True,
    ) -> None:
        super().__init__(db_path, run_id, display, jobs_limit=jobs_limit, install_signals=install_signals)
        self.asked_tiers = tiers
        self.tiers: tuple[str, ...] = ()
        self.scoring: Scoring | None = None
        self.planned: dict[int, Planned] = {}
        self.not_rescored: dict[int, str] = {}

    async def execute(self) -> str:
        """Rescore the run; returns the new scoring's state: `done`, `empty` (no job's state could be
        judged) or `interrupted` (Ctrl-C)."""
        self._loop = asyncio.get_running_loop()
        self.writer = StoreWriter(self.db_path, on_failure=self._store_failed)
        self.writer.start()
        try:
            self._load()  # an engine or another rescore holding the run refuses it (EngineBusy)
            self.tiers = self._chosen_tiers()
            stale = self._stale_attempts()
            self.scoring = self._claim_scoring()
            self._settle(stale)
            self.fleet = await start_fleet(self)
            self._plan()
            self.display.message(
                f"{self.scoring.label} of run {self.run_id} (rules {self.scoring.rules_version}): "
                f"{len(self.planned)} of {counted(len(self.jobs), 'job')}, tiers {', '.join(self.tiers)}")
            heartbeat = asyncio.create_task(self._heartbeat(), name="heartbeat")
            loop = asyncio.get_running_loop()
            if self.install_signals:
                loop.add_signal_handler(signal.SIGINT, self._interrupt)
                loop.add_signal_handler(signal.SIGTERM, self._interrupt)
            try:
                ended = await self._dispatch_loop()
            finally:
                if self.install_signals:
                    loop.remove_signal_handler(signal.SIGINT)
                    loop.remove_signal_handler(signal.SIGTERM)
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
            return await self._record("done" if ended == "finished" else "interrupted")
        finally:
            if self.scoring is not None and self.scoring.state == "running":  # it failed on the way
                self.writer.update("scorings", self.scoring_id, {"state": "interrupted", "heartbeat_at": None,
                                                                 "finished_at": time.time()})
            await stop_fleet(self)
            self._close_censuses()
            await self.writer.close()
            self._release()

    @property
    def scoring_id(self) -> int:
        assert self.scoring is not None and self.scoring.id is not None
        return self.scoring.id

    @property
    def label(self) -> str:
        return self.scoring.label if self.scoring is not None else "the rescore"

    # -- before: what to judge, and the claim ---------------------------------------------------
    def _chosen_tiers(self) -> tuple[str, ...]:
        """The tiers asked for (default: every tier the run scored), in pyramid order; only those the
        run scored, so the new scoring compares with the original tier by tier."""
        scored = tuple(self.ctx.tiers)
        asked = self.asked_tiers if self.asked_tiers is not None else scored
        extra = [tier for tier in asked if tier not in scored]
        if extra:
            raise RescoreRefused(f"run {self.run_id} did not score {', '.join(extra)} (it scored "
                                 f"{', '.join(scored) or 'no tier'}): there is nothing to compare with")
        tiers = tuple(tier for tier in ALL_TIERS if tier in asked)
        if not tiers:
            raise RescoreRefused(f"no tier to rescore in run {self.run_id}")
        return tiers

    def _stale_attempts(self) -> list[dict[str, Any]]:
        """Attempts a dead rescore left `running` (no live process holds the run: `_load` checked); those
        of a dead engine refuse the rescore, as `run --resume` recovers them, with their logs."""
        stale = self.read_rows("SELECT id, scope, job_id FROM attempts WHERE run_id = ? AND state = 'running'",
                           (self.run_id,))
        engine_left = [row for row in stale if row["scope"] != "rescore"]
        if engine_left:
            keys = ", ".join(sorted({self.jobs[row["job_id"]]["key"] for row in engine_left}))
            raise RescoreRefused(f"run {self.run_id} has attempts a stopped engine left running ({keys}); "
                                 f"`resenv run --resume {self.run_id}` first")
        return stale

    def _settle(self, stale: list[dict[str, Any]]) -> None:
        """A dead rescore's attempts end as error/infra (its scoring was marked interrupted by `_claim_scoring`)."""
        now = time.time()
        for row in stale:
            self.writer.update("attempts", row["id"], {
                "state": "error", "category": "infra", "reason": "interrupted: the rescore stopped",
                "finished_at": now, "phase": None})
            self.writer.execute("UPDATE leases SET ended_at = ? WHERE attempt_id = ? AND ended_at IS NULL",
                                (now, row["id"]))

    def _claim_scoring(self) -> Scoring:
        """Insert the new scoring as `running` with this process's heartbeat, in one transaction with
        the check that no live rescore holds the run (two rescores never share one)."""
        conn = open_for_writing(self.db_path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                holder = live_rescore(lambda sql, params: [dict(row) for row in conn.execute(sql, params)],
                                      self.run_id, STALE_AFTER_S)
                if holder is not None:
                    raise EngineBusy(f"run {self.run_id} is being rescored ({holder['label']}) by PID "
                                     f"{holder['engine_pid']} on {holder['engine_host']}")
                conn.execute("UPDATE scorings SET state = 'interrupted', heartbeat_at = NULL"
                             " WHERE run_id = ? AND state = 'running'", (self.run_id,))
                number = (conn.execute("SELECT MAX(number) FROM scorings WHERE run_id = ?",
                                       (self.run_id,)).fetchone()[0] or 0) + 1
                now = time.time()
                label = f"rescore {number}"
                cursor = conn.execute(
                    "INSERT INTO scorings (run_id, number, label, rules_version, tiers_json, state, created_at,"
                    " engine_pid, engine_host, heartbeat_at) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                    (self.run_id, number, label, rules.RULES_VERSION, json.dumps(list(self.tiers)), now,
                     os.getpid(), platform.node(), now))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()
        return Scoring(id=cursor.lastrowid, run_id=self.run_id, number=number, label=label,
                       rules_version=rules.RULES_VERSION, tiers=self.tiers, run_tiers=tuple(self.ctx.tiers),
                       state="running", created_at=now)

    def _plan(self) -> None:
        """Per job, the newest full attempt whose verdicts the run recorded, and where its state lives;
        a job without one, or whose host is down, is recorded as not rescored."""
        scored = {(row["job_id"], row["workdir"]) for row in self.read_rows(
            "SELECT DISTINCT a.job_id, a.workdir FROM tier_results t JOIN attempts a ON a.id = t.attempt_id"
            " WHERE t.run_id = ? AND (t.scoring_id IS NULL OR t.scoring_id IN"
            " (SELECT id FROM scorings WHERE number = 0))", (self.run_id,))}
        full: dict[int, list[dict[str, Any]]] = {}
        for row in self.read_rows("SELECT * FROM attempts WHERE run_id = ? AND scope = 'job' ORDER BY number",
                              (self.run_id,)):
            full.setdefault(row["job_id"], []).append(row)
        hosts = {host.name: host for host in self.pool.hosts}
        for job in self.jobs.values():
            kept = next((row for row in reversed(full.get(job["id"], []))
                         if (job["id"], row["workdir"]) in scored), None)
            if kept is None:
                self.not_rescored[job["id"]] = (
                    "it never ran" if not full.get(job["id"]) else
                    f"no attempt of it was scored (job {job['state']}" + (f": {job['reason']})" if job["reason"] else ")"))
                continue
            host = hosts.get(kept["host"])
            if host is None or not host.available():
                self.not_rescored[job["id"]] = f"host {kept['host']}, which keeps the state of attempt " \
                                               f"{kept['number']}, is {'down' if host else 'not in the run'}"
                continue
            leased = len([gpu for gpu in (kept["gpus"] or "").split(",") if gpu.strip()])
            gpus = leased if any(tier in GPU_TIERS for tier in self.tiers) else 0
            self.planned[job["id"]] = Planned(job, kept)
            self.tier_retries.append(TierWork(
                job["id"], self.tiers, scope="rescore", log_prefix="rescore",
                announce=("rescore", {"scoring": self.label, "rules_version": rules.RULES_VERSION,
                                      "tiers": list(self.tiers)}),
                scoring_id=self.scoring_id, kept={"number": kept["number"], "workdir": kept["workdir"],
                                                  "host": kept["host"]}, gpus=gpus))

    # -- while it runs ----------------------------------------------------------------------------
    def _tier_work_finished(
        self, job: dict[str, Any], work: TierWork, kept: dict[str, Any], attempt_id: int | None,
        outcome: AttemptOutcome,
    ) -> None:
        planned = self.planned[job["id"]]
        planned.attempt_id, planned.outcome = attempt_id, outcome
        verdict = "judged" if outcome.state == "done" else f"not judged ({_why(outcome)})"
        self.display.message(f"{job['key']}: {verdict}")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            now = time.time()
            self.writer.update("scorings", self.scoring_id, {"heartbeat_at": now})
            self.writer.execute("UPDATE attempts SET heartbeat_at = ? WHERE run_id = ? AND state = 'running'"
                                " AND scope = 'rescore'", (now, self.run_id))

    def interrupt_message(self) -> str:
        return f"interrupted: stopping {self.label}; what it judged so far is kept, as an interrupted scoring"

    # -- after: what each job got -----------------------------------------------------------------
    async def _record(self, state: str) -> str:
        """One `scoring_jobs` row per job, from the verdicts the store holds; then the scoring's end
        state, returned: `empty` when it judged nothing (it never becomes the `latest` scoring)."""
        await self.writer.flush()
        judged: dict[int, set[str]] = {}
        for row in self.read_rows("SELECT attempt_id, tier FROM tier_results WHERE scoring_id = ?", (self.scoring_id,)):
            judged.setdefault(row["attempt_id"], set()).add(row["tier"])
        if state == "done" and not judged:
            state = "empty"
        for job_id, job in self.jobs.items():
            planned = self.planned.get(job_id)
            kept_number = planned.kept["number"] if planned else None
            if planned is None:
                outcome, reason, attempt_id = "not_rescored", self.not_rescored.get(job_id), None
            else:
                attempt_id = planned.attempt_id
                tiers = judged.get(attempt_id, set()) if attempt_id is not None else set()
                missing = [tier for tier in self.tiers if tier not in tiers]
                why = _why(planned.outcome) if planned.outcome is not None else None
                if not missing:
                    outcome, reason = "rescored", None
                elif tiers:
                    outcome, reason = "partial", f"{', '.join(missing)} not judged" + (f": {why}" if why else "")
                else:
                    outcome = "not_rescored"
                    reason = why or ("the rescore was interrupted before it got to this job"
                                     if planned.outcome is None else "no tier was judged")
            self.writer.execute(
                "INSERT INTO scoring_jobs (scoring_id, job_id, kept_attempt, attempt_id, outcome, reason)"
                " VALUES (?, ?, ?, ?, ?, ?)", (self.scoring_id, job_id, kept_number, attempt_id, outcome, reason))
        self.writer.update("scorings", self.scoring_id, {"state": state, "finished_at": time.time(),
                                                         "heartbeat_at": None})
        self.scoring = replace(self.scoring, state=state) if self.scoring is not None else None
        self.writer.event(self.run_id, "rescore", {"scoring": self.label, "state": state, "tiers": list(self.tiers)})
        await self.writer.flush()
        return state


def _why(outcome: AttemptOutcome) -> str | None:
    """Why a job's rescore attempt judged less than asked, in words for the report."""
    if outcome.state == "cancelled":
        return "the rescore was interrupted while it judged this job"
    if outcome.state == "error":
        return outcome.reason or f"error/{outcome.category}"
    return outcome.reason
