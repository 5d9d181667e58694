"""Read-side shapes shared by `resenv show`, reports and the dashboard."""

from __future__ import annotations

import json
import time
from typing import Any

from .scoring import choose_scoring
from .scorings import Scoring
from .findings import findings_summary, job_findings
from ..money import spend, usd
from ..outcomes import is_infra, state_text
from ..runfacts import engine_alive
from ..store.db import StoreReader

TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")
GLYPHS = {"pass": "✓", "fail": "✗", "skip": "–", "error": "!", None: "·"}


def run_state(run: dict[str, Any]) -> str:
    """The state every listing gives a run: a `running` or `paused` one whose engine is gone (killed,
    its machine rebooted) is `interrupted`, which `resenv run --resume` picks up; the stored state
    stays what the engine last wrote."""
    if run["state"] in {"running", "paused"} and not engine_alive(run):
        return "interrupted"
    return run["state"]


def tier_glyphs(tiers: dict[str, str | None]) -> str:
    return "  ".join(GLYPHS.get(tiers.get(tier), "?") for tier in TIERS)


def tier_reason(evidence: dict[str, Any]) -> str | None:
    """Why a tier failed, on one line: the classifier's evidence line (the exception a run died
    with), else the probe's own reason, else the last line its command printed."""
    for key in ("evidence_line", "reason"):
        if isinstance(evidence.get(key), str) and evidence[key].strip():
            return " ".join(evidence[key].split())
    tail = [line.strip() for line in str(evidence.get("log_tail") or "").splitlines() if line.strip()]
    return tail[-1] if tail else None


def tier_log(evidence: dict[str, Any]) -> str | None:
    """The raw log to read first for a tier: its command's stderr, else the first log it kept."""
    logs = [str(log) for log in evidence.get("logs") or []]
    return next((log for log in logs if log.endswith(".stderr")), logs[0] if logs else None)


def job_rows(reader: StoreReader, run_id: str, scoring: Scoring | None = None) -> list[dict[str, Any]]:
    """One row per job: where it ran, its state (with the category of the attempt that ended it:
    `state_text` is ``error/model_api``), the latest status of each tier in `scoring` (default: the
    latest scoring) and its category, agent time, elapsed time, tokens and dollars. Numbers stay numbers
    (`agent_seconds`, `queue_seconds`, `elapsed_s`, `tokens`, `cost_usd`; None when unknown) beside the `*_text` forms
    that tables print."""
    if scoring is None:
        scoring, _ = choose_scoring(reader, run_id)
    where, params = scoring.where()
    tiers: dict[int, dict[str, str]] = {}
    tier_categories: dict[int, dict[str, str | None]] = {}
    failures: dict[int, dict[str, dict[str, Any]]] = {}  # per job, its failing tiers' latest evidence
    for result in reader.rows(
        f"SELECT job_id, tier, status, category, evidence_json FROM tier_results WHERE run_id = ? AND {where}"
        " ORDER BY id", (run_id, *params),
    ):
        tiers.setdefault(result["job_id"], {})[result["tier"]] = result["status"]
        tier_categories.setdefault(result["job_id"], {})[result["tier"]] = result["category"]
        failing = failures.setdefault(result["job_id"], {})
        failing.pop(result["tier"], None)
        if result["status"] in ("fail", "error"):
            failing[result["tier"]] = json.loads(result["evidence_json"] or "{}")
    times = {  # the latest full attempt's agent working time (no queue, hold or pause) and queue wait
        row["job_id"]: row for row in reader.rows(
            "SELECT a.job_id, SUM(CASE WHEN p.name = 'agent' THEN COALESCE(p.active_s, p.finished_at - p.started_at)"
            " END) AS seconds, SUM(p.queued_s) AS queued FROM phases p"
            " JOIN attempts a ON a.id = p.attempt_id WHERE a.run_id = ?"
            " AND a.number = (SELECT MAX(number) FROM attempts WHERE job_id = a.job_id AND scope = 'job')"
            " GROUP BY a.job_id",
            (run_id,),
        )
    }
    spend = {  # LLM agents: tokens and dollars of every attempt of each job
        row["job_id"]: row for row in reader.rows(
            "SELECT job_id, SUM(input_tokens + cached_input_tokens + cache_write_tokens + output_tokens) AS tokens,"
            " SUM(cost_usd) AS cost, COUNT(cost_usd) AS priced, COUNT(*) AS n FROM usage WHERE run_id = ?"
            " GROUP BY job_id", (run_id,))
    }
    ended = {  # the category of each job's latest full attempt: why a job in `error` ended so
        row["job_id"]: row["category"] for row in reader.rows(
            "SELECT a.job_id, a.category FROM attempts a WHERE a.run_id = ? AND a.scope = 'job'"
            " AND a.number = (SELECT MAX(number) FROM attempts WHERE job_id = a.job_id AND scope = 'job')",
            (run_id,))
    }
    findings = job_findings(reader, run_id)
    rows = []
    for job in reader.jobs(run_id):
        where = job["host"] or "—"
        if job["gpus"]:
            where += f":{job['gpus']}"
        spent = times.get(job["id"]) or {}
        seconds, queued = spent.get("seconds"), spent.get("queued")
        category = ended.get(job["id"]) if job["state"] == "error" else None
        failing = failures.get(job["id"], {})
        tier_reasons = {tier: tier_reason(evidence) for tier, evidence in failing.items()}
        reason = job["reason"]  # the job's own (an agent stopped by its budget: budget:dollars)
        if job["state"] == "done" and failing:  # it ended well: its failing tiers say why it scored so
            why_tiers = "; ".join(f"{tier}: {why}" if why else tier for tier, why in sorted(tier_reasons.items()))
            reason = f"{reason}; {why_tiers}" if reason else why_tiers
        rows.append({
            **job,
            "reason": reason,
            "tier_reasons": tier_reasons,  # failing tiers only
            "tier_logs": {tier: tier_log(evidence) for tier, evidence in failing.items()},
            "category": category,
            "state_text": state_text(job["state"], category),
            "infra": job["state"] == "error" and is_infra(category),
            "outside_denominators": job["state"] == "error" and is_infra(category),
            "where": where,
            "gpus": gpu_list(job["gpus"]),
            "tiers": {tier: tiers.get(job["id"], {}).get(tier) for tier in TIERS},  # None: not scored
            "tier_categories": {tier: tier_categories.get(job["id"], {}).get(tier) for tier in TIERS},
            "agent_seconds": seconds,
            "agent_time_text": f"{seconds:.1f}" if seconds is not None else "—",
            "queue_seconds": queued,  # None: no command of it waited in a cluster's queue
            "elapsed_s": (elapsed := _elapsed(job)),
            "elapsed_text": f"{elapsed:.1f}s" if elapsed is not None else "—",
            **_spend(spend.get(job["id"])),
            "findings": findings.get(job["id"], []),
            "integrity": findings_summary(findings.get(job["id"], [])),
        })
    return rows


def gpu_list(stored: str | None) -> list[int]:
    """A lease's GPUs as numbers (`"0,1"` in the store is `[0, 1]`; none leased is `[]`)."""
    return [int(gpu) for gpu in (stored or "").split(",") if gpu.strip()]


def _elapsed(job: dict[str, Any]) -> float | None:
    """Seconds since the job started, to its end if it ended; None if it never started."""
    if not job["started_at"]:
        return None
    return (job["finished_at"] or time.time()) - job["started_at"]


def _spend(row: dict[str, Any] | None) -> dict[str, Any]:
    """Tokens and cost of a job for tables ("—" when unknown; "≥" when some model had no price):
    `cost_usd` and `cost_partial` for JSON, `cost_text` (engine/money.py) for tables."""
    if row is None:
        return {"tokens": None, "cost_usd": None, "cost_partial": False, "tokens_text": "—", "cost_text": usd(None)}
    cost, partial = spend(row["cost"], row["priced"], row["n"])
    return {"tokens": row["tokens"], "cost_usd": cost, "cost_partial": partial, "tokens_text": _count(row["tokens"] or 0),
            "cost_text": usd(cost, partial)}


def error_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per agent, its jobs that ended in `error`, by category (engine/outcomes.py `errors_text`)."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        if row["state"] == "error":
            per = counts.setdefault(row["agent"], {})
            category = row["category"] or "uncategorized"
            per[category] = per.get(category, 0) + 1
    return counts


def _count(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def omitted_output(reader: StoreReader, run_id: str) -> dict[int, list[dict[str, Any]]]:
    """Per job, from its latest job attempt: the output each command's stream had left out of the
    store by the output budget (engine/output.py), as its final ``omitted`` counts."""
    found: dict[int, list[dict[str, Any]]] = {}
    for row in reader.rows(
        "SELECT e.job_id, json_extract(e.data, '$.log') AS log, json_extract(e.data, '$.stream') AS stream,"
        " json_extract(e.data, '$.lines') AS lines, json_extract(e.data, '$.bytes') AS bytes FROM events e"
        " JOIN attempts a ON a.id = e.attempt_id WHERE e.run_id = ? AND e.kind = 'omitted'"
        " AND json_extract(e.data, '$.final') AND a.number = (SELECT MAX(number) FROM attempts"
        " WHERE job_id = a.job_id AND scope = 'job') ORDER BY e.id", (run_id,),
    ):
        found.setdefault(row["job_id"], []).append(
            {"log": row["log"], "stream": row["stream"], "lines": row["lines"] or 0, "bytes": row["bytes"] or 0})
    return found

