"""Integrity findings as the read side shows them: per job, from its latest job attempt."""

from __future__ import annotations

import json
from typing import Any

from ..store.db import StoreReader


def job_findings(reader: StoreReader, run_id: str) -> dict[int, list[dict[str, Any]]]:
    """Integrity findings on each job's kept state: what the agent changed that the probes do not
    judge on (an edited tracked file, a shadowing file, a start-up hook), and what was done. They come
    from its latest job attempt and every tier re-run or rescore on that attempt's state since (a
    rescore under newer rules may be the first to see one); the same change is listed once."""
    found: dict[int, list[dict[str, Any]]] = {}
    seen: set[tuple[int, str, str]] = set()
    for row in reader.rows(
        "SELECT f.job_id, f.kind, f.path, f.action, f.detail_json FROM findings f JOIN attempts a ON a.id = f.attempt_id"
        " WHERE f.run_id = ? AND a.number >= (SELECT MAX(number) FROM attempts WHERE job_id = a.job_id AND scope = 'job')"
        " ORDER BY f.id", (run_id,),
    ):
        if (row["job_id"], row["kind"], row["path"]) in seen:
            continue
        seen.add((row["job_id"], row["kind"], row["path"]))
        detail = json.loads(row["detail_json"] or "{}")
        found.setdefault(row["job_id"], []).append(
            {"kind": row["kind"], "path": row["path"], "action": row["action"], "detail": detail})
    return found


def findings_summary(findings: list[dict[str, Any]]) -> str:
    """``2 shadow, 1 tracked_modified`` for a table cell; empty when there are none."""
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding["kind"]] = counts.get(finding["kind"], 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
