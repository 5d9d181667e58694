"""The scorings of a run: the verdicts it recorded live (`original`) and every later rescore.

Scoring rules change; a run judged under old rules is compared with a new one only after its kept
post-agent states were judged again (`resenv rescore`). Each judgement is a scoring with the rules
version that made it, so every reader picks one scoring (`original`, `latest` — the newest finished
one — or a rescore's number) and says which one it shows and under which rules.

The run's own tier results belong to its original scoring (`tier_results.scoring_id` NULL, or the
original's id); a rescore's results carry its id. A store from before scorings existed (schema 3,
which the dashboard reads without upgrading) has only original results, by unknown rules.

No third-party imports: the dashboard uses this module, so every query goes through a `rows`
function (as `runref.find_run` does).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runfacts import pid_exists

Rows = Callable[[str, tuple[Any, ...]], list[dict[str, Any]]]

SCORINGS_SCHEMA = 4
"""The first schema version with the `scorings` table and `tier_results.scoring_id`."""
UNKNOWN_RULES = "unknown (before versioning)"
ORIGINAL = "original"


class ScoringLookupError(Exception):
    """No scoring of the run matches what was asked for; the message lists the ones there are."""


@dataclass(frozen=True)
class Scoring:
    """One scoring of a run. `id` is None for a run with no `scorings` row (an un-upgraded store)."""

    id: int | None
    run_id: str
    number: int  # 0: the original scoring; N: rescore N
    label: str
    rules_version: str
    tiers: tuple[str, ...] | None = None  # what a rescore judged; None: every tier the run scored
    run_tiers: tuple[str, ...] = ()
    state: str = "done"  # running | done | interrupted (stopped before it finished) | empty (judged nothing)
    created_at: float | None = None
    finished_at: float | None = None
    versioned: bool = True  # False: the store predates scorings (every tier result is original)

    @property
    def original(self) -> bool:
        return self.number == 0

    def where(self, column: str = "scoring_id") -> tuple[str, tuple[Any, ...]]:
        """An SQL condition (and its parameters) that selects this scoring's tier results."""
        if not self.versioned:
            return "1", ()
        if self.original:
            if self.id is None:
                return f"{column} IS NULL", ()
            return f"({column} IS NULL OR {column} = ?)", (self.id,)
        return f"{column} = ?", (self.id,)

    def describe(self) -> str:
        """`rescore 1 (rules 2026.12)`, with the tiers when it judged only some and its state if unfinished."""
        notes = [f"rules {self.rules_version}"]
        if self.tiers is not None and set(self.tiers) != set(self.run_tiers):
            notes.append("tiers " + ", ".join(self.tiers))
        if self.state != "done":
            notes.append(self.state)
        return f"{self.label} ({'; '.join(notes)})"

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "label": self.label, "rules_version": self.rules_version,
                "tiers": list(self.tiers or self.run_tiers), "state": self.state,
                "created_at": self.created_at, "finished_at": self.finished_at}


def list_scorings(rows: Rows, run_id: str, *, versioned: bool = True) -> list[Scoring]:
    """Every scoring of the run, the original first; `versioned=False` for a store at schema < 4."""
    run = rows("SELECT options_json, created_at, finished_at FROM runs WHERE id = ?", (run_id,))
    options = json.loads(run[0]["options_json"] or "{}") if run else {}
    run_tiers = tuple(options.get("tiers") or ())
    created = run[0]["created_at"] if run else None
    found = rows("SELECT * FROM scorings WHERE run_id = ? ORDER BY number", (run_id,)) if versioned else []
    scorings = [Scoring(
        id=row["id"], run_id=run_id, number=row["number"], label=row["label"], rules_version=row["rules_version"],
        tiers=tuple(json.loads(row["tiers_json"])) if row["tiers_json"] else None, run_tiers=run_tiers,
        state=row["state"], created_at=row["created_at"],
        # the original scoring is judged as the run goes: it is finished when the run is
        finished_at=row["finished_at"] or (run[0]["finished_at"] if run and row["number"] == 0 else None),
    ) for row in found]
    if not scorings or not scorings[0].original:
        # A run inserted without one (a store from before scorings, or written by hand) still has
        # what it recorded: its original scoring, by rules nobody wrote down.
        scorings.insert(0, Scoring(id=None, run_id=run_id, number=0, label=ORIGINAL, rules_version=UNKNOWN_RULES,
                                   run_tiers=run_tiers, created_at=created, versioned=versioned))
    return scorings


def resolve_scoring(scorings: list[Scoring], ref: str | int | None = "latest") -> Scoring:
    """`original` (or 0), `latest` (the newest finished rescore, else the original) or a rescore's number."""
    text = str(ref if ref is not None else "latest").strip().lower()
    if text == "latest":
        finished = [scoring for scoring in scorings if scoring.state == "done"]
        return finished[-1] if finished else scorings[0]
    if text == ORIGINAL:
        return scorings[0]
    number = text.removeprefix("rescore").strip()
    if number.isdecimal():
        for scoring in scorings:
            if scoring.number == int(number):
                return scoring
    original = f"`original` (rules {scorings[0].rules_version})"
    rescores = [f"{s.number} for {s.describe()}" for s in scorings if not s.original]
    if rescores:
        choices = f"`latest`, {original} or a rescore's number: {', '.join(rescores)}"
    else:
        choices = f"`latest` or {original} (the run has no rescore)"
    raise ScoringLookupError(f"run {scorings[0].run_id} has no scoring {ref!r}; choose {choices}")


def header(chosen: Scoring, scorings: list[Scoring]) -> str:
    """One line for the top of every report: the scoring shown, its rules, and the other end to compare with.

    `scoring: rescore 1 (rules 2026.12), original: rules unknown (before versioning)`; a report of the
    original names the latest rescore instead, if there is one."""
    line = f"scoring: {chosen.describe()}"
    if not chosen.original:
        return f"{line}, original: rules {scorings[0].rules_version}"
    latest = resolve_scoring(scorings, "latest")
    if not latest.original:
        return f"{line}, latest: {latest.describe()}"
    return line


def not_rescored(rows: Rows, scoring: Scoring) -> list[dict[str, Any]]:
    """Jobs a rescore did not (fully) judge, each with its key, outcome and why; none for the original."""
    if scoring.original or scoring.id is None:
        return []
    return rows(
        "SELECT j.key AS job, s.outcome, s.reason FROM scoring_jobs s JOIN jobs j ON j.id = s.job_id"
        " WHERE s.scoring_id = ? AND s.outcome != 'rescored' ORDER BY j.id", (scoring.id,))


def not_rescored_lines(missing: list[dict[str, Any]]) -> list[str]:
    """`not rescored: two/a — the kept state of attempt 1 is gone: …` per job a rescore left out."""
    lines = []
    for row in missing:
        what = "not rescored" if row["outcome"] == "not_rescored" else "partly rescored"
        lines.append(f"{what}: {row['job']}" + (f" — {row['reason']}" if row.get("reason") else ""))
    return lines


def holder_alive(pid: int | None, host: str | None, heartbeat_at: float | None, stale_after_s: float) -> bool:
    """Whether the process that claimed a run (an engine, a rescore) still holds it: its heartbeat is
    fresh and, when it ran on this machine, its PID exists."""
    if heartbeat_at is None or time.time() - heartbeat_at > stale_after_s:
        return False
    return not (host == platform.node() and pid) or pid_exists(pid)


def live_rescore(rows: Rows, run_id: str, stale_after_s: float) -> dict[str, Any] | None:
    """The run's rescore that a live process is doing now, if any (a run has one at a time)."""
    for row in rows("SELECT * FROM scorings WHERE run_id = ? AND state = 'running'", (run_id,)):
        if holder_alive(row["engine_pid"], row["engine_host"], row["heartbeat_at"], stale_after_s):
            return row
    return None
