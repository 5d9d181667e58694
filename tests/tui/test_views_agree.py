"""`resenv show`, `resenv report` (every format) and the dashboard say the same about dollars and
about jobs that ended in error: a $0.003 cost is never $0.00, an unknown one is always —, and an
error/model_api job is counted by its category outside every denominator.

The store is written row by row (a unit test of the renderings); tests/integration/test_error_jobs.py
makes an error job with the real engine."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from resenv.engine.cli.main import main
from resenv.engine.store.db import open_for_writing
from resenv.tui import data, queries
from resenv.engine.results.eventtext import format_event
from resenv.tui.data import RunFeed
from resenv.tui.widgets import job_cells, pyramid_panel

RUN = "20260101-080000-cafe"
NOW = 1767258000.0


def build(db: Path) -> dict[str, int]:
    conn = open_for_writing(db)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
        " created_at, started_at, finished_at) VALUES (?, 'agree', 'b.yaml', '/b', 's', '{}', ?, '/data', 'finished',"
        " ?, ?, ?)", (RUN, json.dumps({"tiers": ["C1", "C5"]}), NOW - 100, NOW - 90, NOW))
    jobs: dict[str, int] = {}
    # key: (agent, state, attempt category, reason, usage rows [(model, cost)], C1 status)
    plan = {
        "cheap": ("a", "done", None, None, [("m", 0.003)], "pass"),
        "unpriced": ("b", "done", None, None, [("m", None)], "fail"),
        "outage": ("c", "error", "model_api", "model API unavailable: 503 overloaded (3 tries)", [], "pass"),
        "checkout": ("c", "error", "infra", "checkout failed: git clone exited 128", [], None),
        "fine": ("c", "done", None, None, [], "pass"),
    }
    for number, (repo, (agent, state, category, reason, usage, c1)) in enumerate(plan.items()):
        job_id = conn.execute(
            "INSERT INTO jobs (run_id, key, suite, repo_id, agent, gpus_needed, state, attempts, host, reason, created_at,"
            " started_at, finished_at) VALUES (?, ?, 's', ?, ?, 0, ?, 1, 'local', ?, ?, ?, ?)",
            (RUN, f"{repo}/{agent}", repo, agent, state, reason, NOW - 90, NOW - 80, NOW - 10)).lastrowid
        attempt_id = conn.execute(
            "INSERT INTO attempts (run_id, job_id, number, state, category, reason, started_at, finished_at, workdir)"
            " VALUES (?, ?, 1, ?, ?, ?, ?, ?, '/data/w')",
            (RUN, job_id, state, category, reason, NOW - 80, NOW - 10)).lastrowid
        for model, cost in usage:
            conn.execute("INSERT INTO usage (run_id, job_id, attempt_id, ts, model, input_tokens, output_tokens, cost_usd)"
                         " VALUES (?, ?, ?, ?, ?, 900, 100, ?)", (RUN, job_id, attempt_id, NOW - 20, model, cost))
        if c1 is not None:  # the outage's verdict is from before the API failed: it must not count
            conn.execute("INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, created_at)"
                         " VALUES (?, ?, ?, 'C1', ?, ?)", (RUN, job_id, attempt_id, c1, NOW - 15))
        events = [
            ("transcript", {"type": "session", "model": "claude-sonnet-4-5", "tools": ["Bash", "Edit"],
                            "cwd": "/w", "version": "2.1.332"}),
            ("budget", {"name": "budget:dollars", "limit": 0.002, "used": 0.003}),
            ("transcript", {"type": "completion", "status": "success", "subtype": "success", "num_turns": 3,
                            "duration_s": 4.2, "cost_usd": 0.003}),
            ("error", {"category": "model_api", "status": 503, "message": "overloaded", "retry": True}),
        ]
        for seq, (kind, payload) in enumerate(events, 1):
            conn.execute("INSERT INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (RUN, job_id, attempt_id, seq, NOW - 50 + seq, kind, json.dumps(payload)))
        jobs[repo] = job_id
    conn.execute("COMMIT")
    conn.close()
    return jobs


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    db = tmp_path / "store.db"
    return db, build(db)


def cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def row_of(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if key in line)


def test_show_report_and_dashboard_agree_on_dollars(store) -> None:
    db, _ = store
    shown = cli(db, "show", RUN)
    assert "$0.0030" in row_of(shown, "cheap/a") and "$0.00 " not in row_of(shown, "cheap/a")
    assert "$" not in row_of(shown, "unpriced/b") and "—" in row_of(shown, "unpriced/b")
    as_json = json.loads(cli(db, "show", RUN, "--json"))
    by_key = {job["key"]: job for job in as_json["jobs"]}
    assert by_key["cheap/a"]["cost_usd"] == pytest.approx(0.003) and by_key["unpriced/b"]["cost_usd"] is None
    assert by_key["unpriced/b"]["cost_partial"] is True and "cost_text" not in by_key["cheap/a"]  # numbers only
    md = cli(db, "report", RUN)
    agents = {line.split("|")[1].strip(): line for line in md.splitlines() if re.match(r"\| [abc] \|", line)}
    assert "$0.0030" in agents["a"] and "—" in agents["b"] and "$" not in agents["b"] and "$" not in agents["c"]
    report = json.loads(cli(db, "report", RUN, "--format", "json"))
    assert report["agents"]["a"]["cost_usd"] == pytest.approx(0.003) and report["agents"]["b"]["cost_usd"] is None
    assert report["agents"]["c"]["cost_usd"] is None
    table = list(csv.DictReader(io.StringIO(cli(db, "report", RUN, "--format", "csv"))))
    assert {row["agent"]: row["cost_usd"] for row in table} == {"a": "0.003", "b": "", "c": ""}  # empty: unknown
    assert "\\$0.0030" in cli(db, "report", RUN, "--format", "latex")

    feed = RunFeed(db, RUN)
    feed.load()
    jobs = {job.key: job for job in feed.jobs.values()}
    assert jobs["cheap/a"].cost_text == "$0.0030" and jobs["unpriced/b"].cost_text == "—"
    assert jobs["outage/c"].cost_text == "—"
    cells = {job.key: job_cells(job, ("C1", "C5"), NOW) for job in feed.jobs.values()}
    assert cells["cheap/a"]["cost"].strip() == "$0.0030" and cells["unpriced/b"]["cost"].strip() == "—"
    assert feed.cost_text == "≥$0.0030"  # the run: one job's tokens had no price
    assert [run["cost"] for run in queries.history(db)] == [pytest.approx(0.003)]
    feed.shutdown()


def test_error_jobs_are_counted_by_category_outside_every_denominator(store) -> None:
    db, _ = store
    shown = cli(db, "show", RUN)
    assert "error/model_api" in row_of(shown, "outage/c") and "503 overloaded" in row_of(shown, "outage/c")
    assert "error/infra" in row_of(shown, "checkout/c") and "git clone exited 128" in row_of(shown, "checkout/c")
    assert "c: 2 infra errors (1 model_api), outside every denominator" in shown
    listing = json.loads(cli(db, "show", RUN, "--json"))
    outage = next(job for job in listing["jobs"] if job["key"] == "outage/c")
    assert (outage["state"], outage["category"], outage["infra"], outage["outside_denominators"]) == \
        ("error", "model_api", True, True)
    assert outage["reason"].startswith("model API unavailable")
    assert listing["errors"] == {"c": {"model_api": 1, "infra": 1}}

    md = cli(db, "report", RUN)
    agent_c = next(line for line in md.splitlines() if line.startswith("| c |"))
    assert "1/1 (100.0%)" in agent_c  # C1: only `fine` is judged; the outage's earlier pass is not counted
    assert "2 infra errors (1 model_api)" in agent_c
    assert "outside every denominator" in md and "| outage | c | model_api | yes | model API unavailable" in md
    assert "| outage | c | error/model_api |" in md
    report = json.loads(cli(db, "report", RUN, "--format", "json"))
    c = report["agents"]["c"]
    assert c["tiers"]["C1"]["denominator"] == 1 and c["tiers"]["C1"]["passed"] == 1
    assert c["errors"] == {"total": 2, "by_category": {"model_api": 1, "infra": 1}, "infra": 2,
                           "outside_denominators": "infra"}
    assert {(e["repo"], e["category"], e["infra"]) for e in report["errors"]} == \
        {("outage", "model_api", True), ("checkout", "infra", True)}
    outage_row = next(row for row in report["repos"] if row["repo"] == "outage")
    assert (outage_row["state"], outage_row["category"]) == ("error", "model_api")
    assert "2 infra errors (1 model\\_api)" in cli(db, "report", RUN, "--format", "latex")

    feed = RunFeed(db, RUN)
    feed.load()
    feed.compute_scores()
    jobs = {job.key: job for job in feed.jobs.values()}
    assert jobs["outage/c"].state_text == "error/model_api" and jobs["outage/c"].infra
    assert "model_api" in jobs["outage/c"].search_text()
    assert feed.error_counts() == {"c": {"model_api": 1, "infra": 1}}
    assert feed.errors_text() == "2 infra errors (1 model_api), outside every denominator"
    assert feed.scores.agents["c"].tiers["C1"].denominator == 1
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(pyramid_panel(feed.scores, 200))
    assert "! 2 infra errors (1 model_api)" in console.export_text()
    feed.shutdown()


def test_session_events_are_merged_into_the_transcript_in_time_order(store) -> None:
    db, jobs = store
    feed = RunFeed(db, RUN)
    reader = data.Reader(db)
    feed._last_event = 10**9
    lines = feed.backfill(reader, jobs["cheap"])
    reader.close()
    assert lines == [
        "══ attempt 1 · done ══",
        "● session · model claude-sonnet-4-5 · 2 tools · v2.1.332 · cwd /w",
        "! budget dollars: used $0.0030 of $0.0020 · the agent was stopped",
        "■ agent done: success · 3 turns · 4.2s · $0.0030",
        "! error model_api 503: overloaded · will retry · infrastructure: not the agent's failure",
    ]
    assert format_event("redacted", {"files": 2, "paths": ["a", "b"]}) == ["  redacted secrets from 2 files"]


def test_the_dashboard_follows_usage_rows_a_session_updates_in_place(store) -> None:
    db, jobs = store
    feed = RunFeed(db, RUN)
    feed.load()
    assert feed.jobs[jobs["cheap"]].cost_text == "$0.0030"
    conn = open_for_writing(db)  # what a session's flush does: the same row, new totals, then a `usage` event
    conn.execute("UPDATE usage SET cost_usd = 0.0125, output_tokens = 400 WHERE job_id = ?", (jobs["cheap"],))
    conn.execute("INSERT INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) SELECT ?, ?, attempt_id, 99, ?,"
                 " 'usage', '{}' FROM usage WHERE job_id = ?", (RUN, jobs["cheap"], NOW, jobs["cheap"]))
    conn.close()
    feed.poll()
    cheap = feed.jobs[jobs["cheap"]]
    assert (cheap.cost_text, cheap.tokens) == ("$0.013", 1300) and feed.cost_text == "≥$0.013"
    assert feed.take().usage
    feed.shutdown()
