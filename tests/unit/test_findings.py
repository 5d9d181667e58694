"""Integrity findings as `show`, `report` and the dashboard read them: the kept state's, once each."""

from __future__ import annotations

import json

from resenv.engine.results.findings import findings_summary, job_findings
from resenv.engine.store.db import StoreReader, open_for_writing


def test_findings_of_the_kept_state_include_those_a_later_rescore_found_once_each(tmp_path):
    path = tmp_path / "store.db"
    conn = open_for_writing(path)
    conn.execute("INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir,"
                 " state, created_at) VALUES ('r', 'r', 'b', '/', 's', '{}', '{}', '/d', 'finished', 0)")
    conn.execute("INSERT INTO jobs (id, run_id, key, suite, repo_id, agent, gpus_needed, state, created_at)"
                 " VALUES (1, 'r', 'x/a', 's', 'x', 'a', 0, 'done', 0)")
    attempts = [(1, 1, "job"), (2, 2, "job"), (3, 3, "C1"), (4, 4, "C1")]  # a retried job, then two re-runs
    for attempt_id, number, scope in attempts:
        conn.execute("INSERT INTO attempts (id, run_id, job_id, number, state, started_at, scope)"
                     " VALUES (?, 'r', 1, ?, 'done', 0, ?)", (attempt_id, number, scope))
    for attempt_id, kind, path_ in [(1, "shadow", "old.py"), (3, "shadow", "stub.py"), (4, "shadow", "stub.py"),
                                    (4, "tracked_modified", "main.py")]:
        conn.execute("INSERT INTO findings (run_id, job_id, attempt_id, kind, path, action, detail_json, created_at)"
                     " VALUES ('r', 1, ?, ?, ?, 'x', ?, 0)", (attempt_id, kind, path_, json.dumps({"at": attempt_id})))
    conn.close()
    found = job_findings(StoreReader(path), "r")[1]
    # attempt 1's state was replaced by the retry; the rescore's stub is listed once, from where first seen
    assert [(f["kind"], f["path"], f["detail"]["at"]) for f in found] == [
        ("shadow", "stub.py", 3), ("tracked_modified", "main.py", 4)]
    assert findings_summary(found) == "1 shadow, 1 tracked_modified"
