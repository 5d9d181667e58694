"""What a rescore changed: per job and tier the old verdict and the new, and per agent the pass
rates before and after, over the jobs the rescore judged (so a job whose state was gone does not
move a rate), with both rules versions named.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .scoring import TierScore, latest_results
from .scorings import Scoring
from ..store.db import StoreReader
from ..wording import counted


@dataclass(frozen=True)
class Change:
    job: str
    agent: str
    tier: str
    old: dict[str, Any] | None  # {"status", "category"}; None: the old scoring has no verdict
    new: dict[str, Any]


@dataclass
class ScoringDiff:
    run_id: str
    old: Scoring
    new: Scoring
    jobs: list[dict[str, Any]]  # job, agent, outcome (rescored | partial | not_rescored), kept_attempt, reason
    changes: list[Change]
    unchanged: int
    rates: dict[str, dict[str, tuple[TierScore, TierScore]]] = field(default_factory=dict)  # agent -> tier -> old, new

    @property
    def judged_jobs(self) -> int:
        return sum(1 for job in self.jobs if job["outcome"] != "not_rescored")


def compare_scorings(reader: StoreReader, run_id: str, old: Scoring, new: Scoring) -> ScoringDiff:
    """The verdicts of `new` beside those of `old`, for the tiers `new` judged."""
    tiers = new.tiers or new.run_tiers
    jobs = reader.rows(
        "SELECT j.id, j.key AS job, j.agent, s.outcome, s.kept_attempt, s.reason FROM scoring_jobs s"
        " JOIN jobs j ON j.id = s.job_id WHERE s.scoring_id = ? ORDER BY j.id", (new.id,))
    before, after = latest_results(reader, run_id, old), latest_results(reader, run_id, new)
    changes: list[Change] = []
    unchanged = 0
    rates: dict[str, dict[str, tuple[TierScore, TierScore]]] = {}
    for job in jobs:
        for tier in tiers:
            verdict = after.get(job["id"], {}).get(tier)
            if verdict is None:  # not judged by the new scoring: nothing to compare
                continue
            previous = before.get(job["id"], {}).get(tier)
            old_pair = _pair(previous)
            new_pair = {"status": verdict["status"], "category": verdict["category"]}
            if old_pair == new_pair:
                unchanged += 1
            else:
                changes.append(Change(job["job"], job["agent"], tier, old_pair, new_pair))
            tallies = rates.setdefault(job["agent"], {}).setdefault(tier, (TierScore(), TierScore()))
            _tally(tallies[0], previous)
            _tally(tallies[1], verdict)
    return ScoringDiff(run_id=run_id, old=old, new=new, jobs=[{k: v for k, v in job.items() if k != "id"}
                                                            for job in jobs],
                       changes=changes, unchanged=unchanged, rates=rates)


def _pair(result: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if result is None else {"status": result["status"], "category": result["category"]}


def _tally(score: TierScore, result: dict[str, Any] | None) -> None:
    if result is None:
        return
    if result["status"] == "pass":
        score.passed += 1
    elif result["status"] == "fail":
        score.failed += 1
    elif result["status"] == "skip":
        score.skipped += 1
    else:
        score.errors += 1


def _verdict(pair: dict[str, Any] | None) -> str:
    if pair is None:
        return "—"
    return pair["status"] + (f"/{pair['category']}" if pair.get("category") else "")


def _rate(score: TierScore) -> str:
    return f"{score.text()} ({'—' if score.rate is None else f'{100 * score.rate:.1f}%'})"


def render_text(diff: ScoringDiff) -> str:
    """The report `resenv rescore` prints: versions, what was judged, what changed, pass rates."""
    new, old = diff.new, diff.old
    tiers = new.tiers or new.run_tiers
    lines = [f"{new.label} of run {diff.run_id}: rules {new.rules_version}; compared with {old.label}: "
             f"rules {old.rules_version}"]
    state = "" if new.state == "done" else f" ({new.state})"
    lines.append(f"rescored {diff.judged_jobs} of {counted(len(diff.jobs), 'job')}{state}, tiers {', '.join(tiers)}")
    for job in diff.jobs:
        if job["outcome"] != "rescored":
            what = "not rescored" if job["outcome"] == "not_rescored" else "partly rescored"
            lines.append(f"{what}: {job['job']}" + (f" — {job['reason']}" if job["reason"] else ""))
    if diff.changes:
        lines.append(f"changes ({len(diff.changes)}):")
        width = max(len(change.job) for change in diff.changes)
        for change in diff.changes:
            lines.append(f"  {change.job:<{width}}  {change.tier}  {_verdict(change.old)} → {_verdict(change.new)}")
    else:
        lines.append("changes: none")
    lines.append(f"unchanged: {diff.unchanged} tier verdicts")
    if diff.rates:
        lines.append(f"pass rates, {old.label} → {new.label} (the {diff.judged_jobs} jobs it judged):")
        width = max(len(agent) for agent in diff.rates)
        for agent, per_tier in diff.rates.items():
            for tier in tiers:
                if tier in per_tier:
                    before, after = per_tier[tier]
                    lines.append(f"  {agent:<{width}}  {tier} {_rate(before)} → {_rate(after)}")
    return "\n".join(lines) + "\n"


def to_json(diff: ScoringDiff) -> dict[str, Any]:
    def rate(score: TierScore) -> dict[str, Any]:
        return {"passed": score.passed, "judged": score.denominator, "rate": score.rate,
                "skipped": score.skipped, "errors": score.errors}

    return {
        "run": diff.run_id, "scoring": diff.new.to_json(), "against": diff.old.to_json(),
        "tiers": list(diff.new.tiers or diff.new.run_tiers), "jobs": diff.jobs,
        "changes": [asdict(change) for change in diff.changes], "unchanged": diff.unchanged,
        "agents": {agent: {tier: {"old": rate(before), "new": rate(after)} for tier, (before, after) in per_tier.items()}
                   for agent, per_tier in diff.rates.items()},
    }


def render_json(diff: ScoringDiff) -> str:
    return json.dumps(to_json(diff), indent=2)
