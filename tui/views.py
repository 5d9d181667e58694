"""What the dashboard shows of a run, as immutable rows: a job (`JobView`), a host (`HostView`), a GPU
sample, and the coalesced `Changes` a screen is handed on its paint timer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.money import usd
from ..engine.outcomes import is_infra, state_text


# The tiers, as resenv.engine.tiers names them (that module imports the whole probe kit).
PROBE_TIERS = ("C0", "C1", "C2", "C3", "C4")
ALL_TIERS = (*PROBE_TIERS, "C5")
PYRAMID = PROBE_TIERS

FINISHED = {"done", "error", "cancelled"}
# -- views ------------------------------------------------------------------------------------
@dataclass(slots=True)
class JobView:
    """One job as the dashboard shows it; replaced (never mutated) when anything about it changes,
    so the UI thread always reads a consistent row. (Not `frozen`: a frozen dataclass's __init__
    costs several times more, and a 10,000-job run builds 10,000 of them on open.)"""

    id: int
    key: str
    repo: str
    agent: str
    state: str
    attempts: int = 0
    host: str | None = None
    gpus: str | None = None
    gpus_needed: int = 0
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    tiers: Mapping[str, str] = field(default_factory=dict)  # tier -> latest status
    phase: str | None = None  # the current attempt's phase while it runs
    attempt_id: int | None = None  # the current (or latest known) attempt
    tokens: int = 0
    cost: float | None = None  # None: unknown (no usage, or none of it priced)
    queue: str | None = None  # "slurm PD Resources" while a command waits in the cluster's queue

    cost_partial: bool = False  # some tokens had no price: `cost` is a lower bound
    category: str | None = None  # why a job in `error` ended (engine/outcomes.py)

    @property
    def cost_text(self) -> str:
        return usd(self.cost, self.cost_partial)

    @property
    def state_text(self) -> str:
        """`error/model_api` for a job that ended in error; the state otherwise."""
        return state_text(self.state, self.category)

    @property
    def infra(self) -> bool:
        return self.state == "error" and is_infra(self.category)

    @property
    def where(self) -> str:
        if not self.host:
            return "—"
        return f"{self.host}:{self.gpus}" if self.gpus else self.host

    @property
    def failing(self) -> bool:
        return self.state == "error" or any(status in ("fail", "error") for status in self.tiers.values())

    @property
    def attention(self) -> int:
        """Sort group: 0 needs attention (error or a failing tier), 1 running, 2 queued, 3 the rest."""
        if self.failing:
            return 0
        if self.state in ("running", "paused"):
            return 1
        if self.state == "queued":
            return 2
        return 3

    def elapsed(self, now: float | None = None) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at if self.state in FINISHED and self.finished_at else (now or time.time())
        return max(0.0, end - self.started_at)

    def tier_display(self, selected: Iterable[str]) -> dict[str, str | None]:
        """Status per tier for the glyphs: a result, `running` (the tier the current phase is judging),
        `pending`, or None (the run does not score that tier)."""
        selected, judging = set(selected), None
        if self.state in ("running", "paused"):
            judging = next((tier for tier in ALL_TIERS if tier in selected and self.tiers.get(tier) is None
                            and ((self.phase == "probes" and tier in PROBE_TIERS)
                                 or (self.phase == "audit" and tier == "C5"))), None)
        return displayed_tiers(self.tiers, selected, judging)

    def search_text(self) -> str:
        statuses = " ".join(sorted(set(self.tiers.values())))
        return (f"#{self.id} {self.key} {self.state_text} {self.where} {statuses} {self.reason or ''}"
                f" {self.queue or ''}").lower()


@dataclass
class HostView:
    name: str
    kind: str
    state: str
    inventory: dict[str, Any]
    updated_at: float

    @property
    def gpu_ids(self) -> list[int]:
        ids = []
        for gpu in self.inventory.get("gpus") or []:
            if isinstance(gpu, dict):
                gpu = gpu.get("index", gpu.get("id"))
            if isinstance(gpu, int):
                ids.append(gpu)
        return ids

    @property
    def state_line(self) -> str | None:
        """Why a host runs no jobs, in the words the plain display uses: waited for since when, or for good."""
        reason = self.inventory.get("reason")
        if self.state == "down":
            since = self.inventory.get("down_since")
            when = f" since {time.strftime('%H:%M:%S', time.localtime(since))}" if isinstance(since, (int, float)) else ""
            return f"waiting for this host{when} (reconnecting with backoff)" + (f": {reason}" if reason else "")
        if self.state == "broken":
            return "cannot run jobs" + (f": {reason}" if reason else "")
        return None

    def gpu_name(self, gpu: int) -> str | None:
        for item in self.inventory.get("gpus") or []:
            if isinstance(item, dict) and item.get("index", item.get("id")) == gpu:
                return item.get("name")
        return None


@dataclass(frozen=True)
class Sample:
    ts: float
    util: float | None
    mem_used: float | None
    mem_total: float | None
    power: float | None
    temp: float | None


@dataclass
class Changes:
    """What changed since the UI last looked: coalesced over any number of polls."""

    jobs: set[int] = field(default_factory=set)
    job_set: bool = False  # jobs were added: the table's rows must be rebuilt
    run: bool = False
    scores: bool = False
    hosts: bool = False
    gpu: bool = False
    usage: bool = False
    transcript: list[str] = field(default_factory=list)
    transcript_reset: bool = False
    acks: list[tuple[str, str, str]] = field(default_factory=list)  # (label, ack, message)
    errors: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.job_set or self.run or self.scores or self.hosts or self.gpu or self.usage
                    or self.transcript or self.transcript_reset or self.acks or self.errors)


def displayed_tiers(results: Mapping[str, str], selected: Iterable[str],
                    judging: str | None = None) -> dict[str, str | None]:
    """Status per tier for the glyphs of a job with these ``results``: its result, `running` for the
    tier being ``judging`` now, `pending`, or None for a tier the run does not score."""
    chosen = set(selected)
    return {tier: ("running" if tier == judging else results.get(tier) or "pending") if tier in chosen else None
            for tier in ALL_TIERS}
