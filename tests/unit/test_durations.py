"""Duration estimates for the dispatch policy: what of a store's history counts, and which match wins."""

from __future__ import annotations

from pathlib import Path

from resenv.engine.run.durations import DurationEstimates, attempt_history, timeout_bound
from resenv.engine.spec import Timeouts
from resenv.engine.store.db import connect, migrate


def store_with(tmp_path: Path, attempts: list[tuple[str, str, str, str | None, str, float]]):
    """A real store whose run `r` has one job per attempt: (repo, agent, state, category, scope, seconds)."""
    conn = connect(tmp_path / "store.db")
    migrate(conn)
    conn.execute("INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir,"
                 " state, created_at) VALUES ('r', 'r', 'b', '.', 's', '{}', '{}', 'd', 'finished', 0)")
    for index, (repo, agent, state, category, scope, seconds) in enumerate(attempts):
        job = conn.execute("INSERT INTO jobs (run_id, key, suite, repo_id, agent, gpus_needed, state, created_at)"
                           " VALUES ('r', ?, 's', ?, ?, 0, 'done', 0)", (f"{repo}/{agent}/{index}", repo, agent)).lastrowid
        conn.execute("INSERT INTO attempts (run_id, job_id, number, state, category, scope, started_at, finished_at)"
                     " VALUES ('r', ?, 1, ?, ?, ?, 100, ?)", (job, state, category, scope, 100 + seconds))
    conn.commit()
    return conn


def test_only_attempts_that_ran_to_their_own_end_teach_an_estimate(tmp_path):
    conn = store_with(tmp_path, [
        ("x", "a", "done", None, "job", 10.0),
        ("x", "a", "error", "runtime", "job", 20.0),  # the agent's own failure: a real duration
        ("x", "a", "error", "infra", "job", 900.0),  # the host died: says nothing of the job
        ("x", "a", "error", "model_api", "job", 800.0),
        ("x", "a", "cancelled", None, "job", 700.0),
        ("x", "a", "done", None, "C3", 600.0),  # one tier re-run, not the whole job
        ("x", "a", "done", None, "job", -50.0),  # the clock stepped back: no duration
    ])
    try:
        assert sorted(seconds for _, _, seconds in attempt_history(conn)) == [10.0, 20.0]
    finally:
        conn.close()


def test_the_closest_match_wins_and_an_unknown_job_gets_the_timeout_bound():
    bound = timeout_bound(Timeouts())
    assert bound == 300 + 600 + 3600 + 3600 + 120 + 300
    estimates = DurationEstimates(bound, [("x", "a", 10.0), ("x", "b", 30.0), ("y", "a", 4.0), ("y", "a", 6.0)])
    assert estimates.estimate("x", "a") == 10.0  # same repo and agent
    assert estimates.estimate("x", "c") == 20.0  # same repo, another agent: the repo's median
    assert estimates.estimate("z", "a") == bound  # another repo's figure is a guess: never used
    assert estimates.estimate("z", "c") == bound
    for nonsense in (float("nan"), float("inf"), -1.0):
        estimates.record("z", "c", nonsense)
    assert estimates.estimate("z", "c") == bound
    estimates.record("z", "c", 2.0)
    assert estimates.estimate("z", "c") == 2.0
