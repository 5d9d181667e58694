"""Scorings in the store: an old DB is upgraded in place and reads as its run's original scoring;
`original`, `latest` and a rescore's number pick one; the header names it and its rules version."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from resenv.engine.store.schema import MIGRATIONS, SCHEMA_VERSION
from resenv.engine.results.scoring import latest_results, render, score_run
from resenv.engine.results.scorings import (UNKNOWN_RULES, ScoringLookupError, header, list_scorings, resolve_scoring)
from resenv.engine.store.db import StoreReader, _statements


def v3_store(path: Path) -> None:
    """A store as resenv wrote it at schema version 3 (before scorings): one finished run, one job."""
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:3]:
        for statement in _statements(script):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    now = time.time()
    conn.execute("INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir,"
                 " state, created_at) VALUES ('r1', 'old', 'b', '.', 's', '{}', '{\"tiers\": [\"C1\", \"C5\"]}', '/tmp',"
                 " 'finished', ?)", (now,))
    conn.execute("INSERT INTO jobs (id, run_id, key, suite, repo_id, agent, gpus_needed, state, attempts, created_at)"
                 " VALUES (1, 'r1', 'one/a', 's', 'one', 'a', 0, 'done', 1, ?)", (now,))
    conn.execute("INSERT INTO attempts (id, run_id, job_id, number, state, workdir, started_at)"
                 " VALUES (1, 'r1', 1, 1, 'done', '/tmp/w', ?)", (now,))
    for tier, status in (("C1", "fail"), ("C1", "pass")):  # a tier retry superseded the first verdict
        conn.execute("INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, created_at)"
                     " VALUES ('r1', 1, 1, ?, ?, ?)", (tier, status, now))
    conn.close()


def test_a_version_3_store_is_upgraded_and_reads_as_the_original_scoring(tmp_path):
    path = tmp_path / "old.db"
    v3_store(path)
    reader = StoreReader(path)  # upgrades in place
    assert reader.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert reader.rows("SELECT scoring_id FROM tier_results") == [{"scoring_id": None}] * 2
    scorings = list_scorings(reader.rows, "r1")
    assert [(s.number, s.label, s.rules_version, s.state) for s in scorings] == [(0, "original", UNKNOWN_RULES, "done")]
    latest = resolve_scoring(scorings, "latest")
    assert latest.original and resolve_scoring(scorings, "original") == latest == resolve_scoring(scorings, "0")
    assert latest_results(reader, "r1")[1]["C1"]["status"] == "pass"
    scores = score_run(reader, "r1")
    assert scores.scoring.label == "original" and scores.agents["a"].tiers["C1"].passed == 1
    assert scores.header() == f"scoring: original (rules {UNKNOWN_RULES})"
    assert f"scoring: original (rules {UNKNOWN_RULES})" in render(scores, "md")
    with pytest.raises(ScoringLookupError, match="original"):
        resolve_scoring(scorings, "2")


def test_the_dashboard_reads_a_store_it_has_not_upgraded(tmp_path):
    from resenv.tui import queries

    path = tmp_path / "old.db"
    v3_store(path)
    detail = queries.job_detail(path, 1)  # read-only: the dashboard never migrates
    assert detail["results"]["C1"]["status"] == "pass"
    assert detail["scoring"] == f"scoring: original (rules {UNKNOWN_RULES})"
    assert queries.history(path)[0]["tiers"]["C1"] == {"pass": 1}
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3


def test_header_names_the_chosen_scoring_and_the_other_end(tmp_path):
    path = tmp_path / "s.db"
    v3_store(path)
    reader = StoreReader(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE scorings SET rules_version = '2026.01' WHERE number = 0")
    conn.execute("INSERT INTO scorings (run_id, number, label, rules_version, tiers_json, state, created_at)"
                 " VALUES ('r1', 1, 'rescore 1', '2026.12', '[\"C1\"]', 'done', 1)")
    conn.execute("INSERT INTO scorings (run_id, number, label, rules_version, state, created_at)"
                 " VALUES ('r1', 2, 'rescore 2', '2027.01', 'running', 2)")  # not finished: never `latest`
    conn.close()
    scorings = list_scorings(reader.rows, "r1")
    latest = resolve_scoring(scorings, "latest")
    assert latest.label == "rescore 1"
    assert header(latest, scorings) == "scoring: rescore 1 (rules 2026.12; tiers C1), original: rules 2026.01"
    assert header(scorings[0], scorings) == "scoring: original (rules 2026.01), latest: rescore 1 (rules 2026.12; tiers C1)"
    assert header(resolve_scoring(scorings, "2"), scorings) == (
        "scoring: rescore 2 (rules 2027.01; running), original: rules 2026.01")
