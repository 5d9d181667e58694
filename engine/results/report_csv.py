"""`resenv report --format csv`: one tidy table per file, for pandas, R or a spreadsheet.

A CSV file holds one table: one header row, then one row per agent (`summary`), per job (`jobs`),
per job that ended in error (`errors`) or per integrity finding (`findings`); `--table` chooses. A
job a rescore left out says so in the jobs table's `not_rescored` column (`not_rescored`, or
`partial`), empty otherwise.
Numbers are numbers: a pass rate is a fraction in 0..1 in its own column beside its `passed` and
`denominator` counts, never text like "6/7 (85.7%)"; booleans are `true`/`false`; an empty cell is
unknown (no price, nothing judged). Which scoring the figures come from is in columns of every row
(`run_id`, `scoring`, `rules_version`), not in comment lines, so that the tables of several runs
concatenate. The values are those of `--format json`, from the same `RunScores`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from ..outcomes import is_infra
from .scoring import HALLUCINATION_KINDS, RunScores
from ..tiers import ALL_TIERS

TABLES = ("summary", "jobs", "errors", "findings")
"""The tables `--table` chooses from; `summary` (one row per agent) is the default."""

TIER_FIELDS = ("passed", "failed", "denominator", "rate", "skipped", "insufficient_hardware", "errors")
REPORT_PROBLEMS = ("missing_report", "invalid_report")


def csv_table(scores: RunScores, table: str = "summary") -> str:
    """The named table of the report as CSV text."""
    build = {"summary": _summary, "jobs": _jobs, "errors": _errors, "findings": _findings}[table]
    header, rows = build(scores)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_cell(value) for value in row] for row in rows])
    return out.getvalue()


def _cell(value: Any) -> Any:
    """CSV's spelling of a value: empty for unknown, `true`/`false` for booleans, numbers as written."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _which(scores: RunScores) -> dict[str, Any]:
    scoring = scores.scoring
    return {"run_id": scores.run["id"], "scoring": scoring.label if scoring else None,
            "rules_version": scoring.rules_version if scoring else None}


def _table(rows: Iterable[dict[str, Any]], header: list[str]) -> tuple[list[str], list[list[Any]]]:
    return header, [[row[column] for column in header] for row in rows]


def _summary(scores: RunScores) -> tuple[list[str], list[list[Any]]]:
    rows = []
    for score in scores.agents.values():
        row = {**_which(scores), "agent": score.agent, "jobs": score.jobs,
               "c0_paper_ratio": score.c0_paper_ratio, "c0_third_party_ratio": score.c0_third_party_ratio,
               "c0_missing": score.c0_missing, "c0_total": score.c0_total,
               "c0_third_party_missing": score.c0_third_party_missing,
               "c0_third_party_total": score.c0_third_party_total}
        for tier in ALL_TIERS:
            tally = score.tiers[tier]
            row |= {f"{tier}_{name}": getattr(tally, name) for name in TIER_FIELDS}
        counts = score.hallucination_counts() or {}  # empty cells: C5 judged none of the agent's jobs
        row |= {f"hallucinations_{kind}": counts.get(kind) for kind in HALLUCINATION_KINDS}
        row |= {name: score.report_problems.get(name, 0) for name in REPORT_PROBLEMS}
        row |= {"agent_seconds": score.agent_seconds, "queue_seconds": score.queue_seconds,
                "input_tokens": score.input_tokens,
                "output_tokens": score.output_tokens, "cost_usd": score.cost_usd, "cost_partial": score.cost_partial,
                "env_bytes_median": score.env_bytes_median, "errors": sum(score.errors.values()),
                "infra_errors": sum(n for category, n in score.errors.items() if is_infra(category))}
        rows.append(row)
    header = [*_which(scores), "agent", "jobs", "c0_paper_ratio", "c0_third_party_ratio", "c0_missing", "c0_total",
              "c0_third_party_missing", "c0_third_party_total",
              *(f"{tier}_{name}" for tier in ALL_TIERS for name in TIER_FIELDS),
              *(f"hallucinations_{kind}" for kind in HALLUCINATION_KINDS), *REPORT_PROBLEMS, "agent_seconds", "queue_seconds",
              "input_tokens",
              "output_tokens", "cost_usd", "cost_partial", "env_bytes_median", "errors", "infra_errors"]
    return _table(rows, header)


def _jobs(scores: RunScores) -> tuple[list[str], list[list[Any]]]:
    left_out = {row["job"]: row["outcome"] for row in scores.not_rescored}  # empty for the original scoring
    rows = []
    for job in scores.repos:
        row = {**_which(scores), "repo": job["repo"], "agent": job["agent"], "state": job["state"],
               "error_category": job["category"], "not_rescored": left_out.get(f"{job['repo']}/{job['agent']}")}
        for tier in ALL_TIERS:
            result = job[tier] or {}
            row |= {tier: result.get("status"), f"{tier}_category": result.get("category")}
        rows.append(row)
    header = [*_which(scores), "repo", "agent", "state", "error_category", "not_rescored",
              *(column for tier in ALL_TIERS for column in (tier, f"{tier}_category"))]
    return _table(rows, header)


def _errors(scores: RunScores) -> tuple[list[str], list[list[Any]]]:
    header = [*_which(scores), "repo", "agent", "category", "infra", "reason"]
    return _table(({**_which(scores), **error} for error in scores.errors), header)


def _findings(scores: RunScores) -> tuple[list[str], list[list[Any]]]:
    header = [*_which(scores), "repo", "agent", "kind", "path", "action"]
    return _table(({**_which(scores), **finding} for finding in scores.findings), header)
