"""The one-shot queries of the screens that show more than the feed keeps: a job's detail (attempts,
evidence, logs), a log's tail, the hosts' leases, the history of every run and the comparison of
runs. Each opens its own read-only connection and runs in a worker thread, never on the UI thread.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from ..engine.money import spend
from ..engine.results.scorings import SCORINGS_SCHEMA, header as scoring_header, resolve_scoring
from .data import Reader, attempt_scope, engine_alive, json_object
from .views import ALL_TIERS


# -- one-shot queries for the detail, hosts and history screens (run in worker threads) ------------
def job_detail(db_path: Path, job_id: int) -> dict[str, Any]:
    """A job's attempts, its latest tier results with evidence, its logs and work dir."""
    reader = Reader(db_path)
    try:
        job = reader.rows("SELECT * FROM jobs WHERE id = ?", (job_id,))
        attempts = reader.rows("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))
        full = [attempt for attempt in attempts if attempt_scope(attempt) == "job"]
        latest = full[-1] if full else (attempts[-1] if attempts else None)
        shown = [attempt for attempt in attempts if latest is not None and attempt["number"] >= latest["number"]]
        scorings = reader.scorings(job[0]["run_id"]) if job else []
        scoring = resolve_scoring(scorings, "latest") if scorings else None
        where, params = scoring.where() if scoring is not None else ("1", ())
        results: dict[str, dict[str, Any]] = {}
        for row in reader.rows(
            f"SELECT * FROM tier_results WHERE job_id = ? AND {where} ORDER BY id", (job_id, *params)
        ):
            if (latest is not None and latest["state"] == "running" and row["attempt_id"] != latest["id"]
                    and scoring is not None and scoring.original):
                continue  # a running attempt shows its own results, not the previous attempt's
            row["evidence"] = json_object(row.pop("evidence_json"))
            results[row["tier"]] = row
        logs = []
        for attempt in shown:
            for row in reader.rows("SELECT name, stream, path, nbytes, nlines FROM logs WHERE attempt_id = ? ORDER BY id",
                                   (attempt["id"],)):
                row["attempt"] = attempt["number"]
                logs.append(row)
        try:
            # the kept state's findings: from its job attempt and every re-run or rescore on it since
            findings = reader.rows(
                "SELECT f.kind, f.path, f.action, f.detail_json FROM findings f JOIN attempts a ON a.id = f.attempt_id"
                " WHERE f.job_id = ? AND a.number >= ? GROUP BY f.kind, f.path ORDER BY MIN(f.id)",
                (job_id, latest["number"])) if latest else []
        except sqlite3.OperationalError:  # a store from before integrity findings, opened read-only
            findings = []
        for row in findings:
            row["detail"] = json_object(row.pop("detail_json"))
        phases = reader.rows("SELECT name, status, started_at, finished_at, reason FROM phases WHERE attempt_id = ?"
                             " ORDER BY id", (latest["id"],)) if latest else []
        run = reader.run(job[0]["run_id"]) if job else None
        options = json_object(run["options_json"]) if run else {}
    finally:
        reader.close()
    files = []
    if latest is not None and latest.get("workdir"):
        log_dir = Path(latest["workdir"]).parent / "logs"
        known = {row["path"] for row in logs}
        if log_dir.is_dir():  # a running command's raw files exist before the `logs` table lists them
            for path in sorted(log_dir.iterdir(), key=lambda p: p.stat().st_mtime):
                if str(path) not in known and path.suffix in (".stdout", ".stderr"):
                    files.append({"name": path.stem, "stream": path.suffix[1:], "path": str(path),
                                  "nbytes": path.stat().st_size, "nlines": None, "attempt": None})
    return {"job": job[0] if job else None, "attempts": attempts, "attempt": latest, "results": results,
            "logs": logs + files, "phases": phases, "tiers": tuple(options.get("tiers", ALL_TIERS)),
            "findings": findings,
            "scoring": scoring_header(scoring, scorings) if scoring is not None else ""}


def read_tail(path: str | Path, limit: int = 256 * 1024) -> tuple[list[str], int]:
    """The last `limit` bytes of a file as lines, and the offset read up to."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError as error:
        return [f"(cannot read {path}: {error.strerror})"], 0
    lines = data.decode(errors="replace").splitlines()
    if size > limit and lines:
        lines[0] = f"(… {size - limit:,} earlier bytes not shown)"
    return lines, size


def read_more(path: str | Path, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
    except OSError:
        return "", offset
    return data.decode(errors="replace"), offset + len(data)


def leases(db_path: Path, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """Open leases of a run: (host, gpu) -> job key and attempt."""
    reader = Reader(db_path)
    try:
        rows = reader.rows(
            "SELECT l.host, l.gpus, l.job_id, j.key, a.number FROM leases l JOIN jobs j ON j.id = l.job_id"
            " JOIN attempts a ON a.id = l.attempt_id WHERE l.run_id = ? AND l.ended_at IS NULL", (run_id,))
    finally:
        reader.close()
    out = {}
    for row in rows:
        for gpu in (row["gpus"] or "").split(","):
            if gpu.strip().isdigit():
                out[(row["host"], int(gpu))] = row
    return out


def history(db_path: Path) -> list[dict[str, Any]]:
    """Every run with its job counts, per-tier pass/judged counts (latest result per job and tier),
    tokens, cost and duration."""
    reader = Reader(db_path)
    try:
        runs = [{key: value for key, value in row.items() if key != "spec_json"} for row in reader.rows("SELECT * FROM runs ORDER BY created_at DESC")]
        counts: dict[str, dict[str, int]] = {}
        for row in reader.rows("SELECT run_id, state, COUNT(*) AS n FROM jobs GROUP BY run_id, state"):
            counts.setdefault(row["run_id"], {})[row["state"]] = row["n"]
        tiers: dict[str, dict[str, dict[str, int]]] = {}
        for row in _latest_tier_counts(reader):
            tiers.setdefault(row["run_id"], {}).setdefault(row["tier"], {})[row["status"]] = row["n"]
        usage = {row["run_id"]: row for row in reader.rows(
            "SELECT run_id, SUM(input_tokens + cached_input_tokens + cache_write_tokens + output_tokens) AS tokens,"
            " SUM(cost_usd) AS cost, COUNT(cost_usd) AS priced, COUNT(*) AS n FROM usage GROUP BY run_id")}
    finally:
        reader.close()
    for run in runs:
        run["counts"] = counts.get(run["id"], {})
        run["jobs"] = sum(run["counts"].values())
        run["tiers"] = tiers.get(run["id"], {})
        spent = usage.get(run["id"]) or {}
        run["tokens"] = spent.get("tokens") or 0
        run["cost"], run["cost_partial"] = spend(spent.get("cost"), spent.get("priced") or 0, spent.get("n") or 0)
        run["live"] = engine_alive(run)
    return runs


def _latest_tier_counts(reader: Reader) -> list[dict[str, Any]]:
    """Per run, tier and status: how many jobs have that latest result in the run's latest scoring."""
    if reader.version < SCORINGS_SCHEMA:
        return reader.rows(
            "SELECT t.run_id, t.tier, t.status, COUNT(*) AS n FROM tier_results t"
            " JOIN (SELECT MAX(id) AS id FROM tier_results GROUP BY job_id, tier) m ON m.id = t.id"
            " GROUP BY t.run_id, t.tier, t.status")
    # Scoring 0 is the original (a NULL scoring_id); each run counts only its newest finished scoring.
    latest = {row["run_id"]: row["number"] for row in reader.rows(
        "SELECT run_id, MAX(number) AS number FROM scorings WHERE state = 'done' GROUP BY run_id")}
    rows = reader.rows(
        "SELECT t.run_id, COALESCE(s.number, 0) AS scoring, t.tier, t.status, COUNT(*) AS n FROM tier_results t"
        " LEFT JOIN scorings s ON s.id = t.scoring_id"
        " JOIN (SELECT MAX(t2.id) AS id FROM tier_results t2 LEFT JOIN scorings s2 ON s2.id = t2.scoring_id"
        "       GROUP BY t2.job_id, t2.tier, COALESCE(s2.number, 0)) m ON m.id = t.id"
        " GROUP BY t.run_id, scoring, t.tier, t.status")
    return [row for row in rows if row["scoring"] == latest.get(row["run_id"], 0)]


def compare(db_path: Path, run_ids: list[str]) -> dict[str, Any]:
    """repo/agent × run: the latest status of each tier, each run in its latest scoring."""
    reader = Reader(db_path)
    try:
        cells: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
        for run_id in run_ids:
            for row in reader.rows("SELECT id, repo_id, agent FROM jobs WHERE run_id = ?", (run_id,)):
                cells.setdefault((row["repo_id"], row["agent"]), {})[run_id] = {}
            where, params = resolve_scoring(reader.scorings(run_id), "latest").where("t.scoring_id")
            for row in reader.rows(
                "SELECT j.repo_id, j.agent, t.tier, t.status FROM jobs j JOIN tier_results t ON t.job_id = j.id"
                f" WHERE j.run_id = ? AND {where} ORDER BY t.id", (run_id, *params)
            ):
                cells[(row["repo_id"], row["agent"])][run_id][row["tier"]] = row["status"]
        runs = {run_id: reader.run(run_id) for run_id in run_ids}
    finally:
        reader.close()
    return {"runs": runs, "cells": cells}
