"""The CLI for scripts: every listing parses as JSON with numbers as numbers, each CSV file is one
tidy table whose values equal the JSON report's, bad paths are one line before anything is stored,
`run --resume` of a finished run changes nothing, and the real run leases GPUs only for the selected
tiers that need them. One small run (real engine, real SQLite) serves the read-only tests."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import cli_environ, finished_run, resenv, rows

AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""


def write_bench(root: Path) -> Path:
    """Two bundled repos (one whose CPU entrypoint fails), both with GPU entrypoints, on a host that
    declares 2 GPUs, and a repo whose asset is not pinned yet."""
    for name, code in (("ok", "print('ok')\n"), ("bad", "raise SystemExit(3)\n")):
        (root / "suites" / name).mkdir(parents=True)
        (root / "suites" / name / "main.py").write_text(code)
    repos = "".join(textwrap.dedent(f"""\
          - id: {name}
            source: {{path: suites/{name}}}
            entrypoints:
              cpu: {{command: "{{python}} main.py"}}
              single_gpu: {{command: "{{python}} main.py"}}
              multi_gpu: {{command: "{{python}} main.py", gpus: 2}}
            unpinned_assets: ["hf:org/weights"]
    """) for name in ("ok", "bad"))
    text = ("version: 1\ndefaults:\n  suite: s\n  agent: a\n  host: gpubox\n  retries: {infra: 0, backoff_s: 0.1}\n"
            "hosts:\n  gpubox: {kind: local, slots: 4, gpus: 2}\n"
            "agents:\n" + textwrap.indent(AGENT, "  ") + "suites:\n  s:\n    repos:\n" + textwrap.indent(repos, "      "))
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    """A finished run of C1 and C5 only: (its folder, the CLI environment, the run id)."""
    root = tmp_path_factory.mktemp("scriptable")
    env, run_id = finished_run(root, write_bench(root), "C1,C5")
    return root, env, run_id


def cli(finished: tuple[Path, dict[str, str], str], *args: str) -> str:
    root, env, _ = finished
    done = resenv(*args, env=env, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_real_run_leases_no_gpu_when_no_selected_tier_needs_one(finished):
    root, env, run_id = finished
    db = Path(env["RESENV_DB"])
    assert [job["gpus_needed"] for job in rows(db, "SELECT gpus_needed FROM jobs")] == [0, 0]
    assert [lease["gpus"] for lease in rows(db, "SELECT gpus FROM leases")] == ["", ""]
    plan = json.loads(cli(finished, "run", str(root / "benchmark.yaml"), "--dry-run", "--json"))
    assert [job["gpus"] for job in plan["jobs"]] == [2, 2]  # all tiers: C4 leases both of the host's GPUs


def test_runs_and_show_as_json(finished):
    _, _, run_id = finished
    listed = json.loads(cli(finished, "runs", "--json"))
    assert [run["id"] for run in listed] == [run_id]
    assert listed[0]["state"] == "finished" and listed[0]["jobs"] == 2 and listed[0]["jobs_by_state"] == {"done": 2}
    assert isinstance(listed[0]["duration_s"], float)
    shown = json.loads(cli(finished, "show", run_id, "--json"))
    assert shown["run"]["options"]["tiers"] == ["C1", "C5"] and "spec_json" not in shown["run"]
    jobs = {job["key"]: job for job in shown["jobs"]}
    assert jobs["ok/a"]["tiers"] == {"C0": None, "C1": "pass", "C2": None, "C3": None, "C4": None, "C5": "pass"}
    assert jobs["bad/a"]["tiers"]["C1"] == "fail" and jobs["bad/a"]["tier_categories"]["C1"] is not None
    for job in jobs.values():
        assert isinstance(job["agent_seconds"], float) and isinstance(job["elapsed_s"], float)
        assert job["cost_usd"] is None and not any(key.endswith("_text") and key != "state_text" for key in job)


def _number(text: str) -> float | int | None:
    if text == "":
        return None
    return float(text) if any(mark in text for mark in ".e") else int(text)


def test_csv_is_one_tidy_table_with_the_json_reports_values(finished):
    _, _, run_id = finished
    report = json.loads(cli(finished, "report", run_id, "--format", "json"))
    summary = list(csv.DictReader(io.StringIO(cli(finished, "report", run_id, "--format", "csv"))))
    assert len(summary) == 1 and summary[0]["agent"] == "a" and summary[0]["run_id"] == run_id
    assert summary[0]["scoring"] == "original" and summary[0]["rules_version"] == report["scoring"]["rules_version"]
    agent = report["agents"]["a"]
    for tier, tally in agent["tiers"].items():
        for field in ("passed", "failed", "denominator", "rate", "skipped", "insufficient_hardware", "errors"):
            assert _number(summary[0][f"{tier}_{field}"]) == tally[field], (tier, field)
    assert _number(summary[0]["C1_rate"]) == 0.5 and _number(summary[0]["C1_denominator"]) == 2
    assert _number(summary[0]["jobs"]) == agent["jobs"] == 2
    assert _number(summary[0]["cost_usd"]) is None and summary[0]["cost_partial"] == "false"
    assert _number(summary[0]["agent_seconds"]) == pytest.approx(agent["agent_seconds"])
    assert _number(summary[0]["c0_paper_ratio"]) is None  # C0 was not scored: unknown, not 0

    text = cli(finished, "report", run_id, "--format", "csv", "--table", "jobs")
    assert not any(line.startswith("#") for line in text.splitlines())
    jobs = list(csv.DictReader(io.StringIO(text)))
    expected = {(row["repo"], row["agent"]): row for row in report["repos"]}
    assert {(job["repo"], job["agent"]) for job in jobs} == set(expected)
    for job in jobs:
        want = expected[(job["repo"], job["agent"])]
        assert job["state"] == want["state"]
        for tier in ("C0", "C1", "C2", "C3", "C4", "C5"):
            assert (job[tier] or None) == (want[tier] or {}).get("status")
            assert (job[f"{tier}_category"] or None) == (want[tier] or {}).get("category")
    errors = list(csv.reader(io.StringIO(cli(finished, "report", run_id, "--format", "csv", "--table", "errors"))))
    assert errors == [["run_id", "scoring", "rules_version", "repo", "agent", "category", "infra", "reason"]]


def test_table_goes_with_csv_only(finished):
    root, env, run_id = finished
    done = resenv("report", run_id, "--table", "jobs", env=env, cwd=root)
    assert done.returncode == 2 and "--table" in done.stderr and done.stdout == ""


def test_resume_of_a_finished_run_changes_nothing(finished):
    root, env, run_id = finished
    db = Path(env["RESENV_DB"])
    before = rows(db, "SELECT state, started_at, finished_at FROM runs")[0]
    # a pause queued while the run had no engine (an older resenv accepted one); it must not be applied
    earlier = len(rows(db, "SELECT id FROM controls"))
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO controls (run_id, action, created_at) VALUES (?, 'pause', ?)", (run_id, time.time()))
    done = resenv("run", "--resume", run_id, "--display", "plain", env=env, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [done.stdout.strip()]  # one line
    assert f"run {run_id} has finished: nothing to resume, nothing changed" in done.stdout
    assert rows(db, "SELECT state, started_at, finished_at FROM runs")[0] == before
    queued = rows(db, "SELECT ack, acked_at FROM controls ORDER BY id")[earlier:]
    assert queued == [{"ack": None, "acked_at": None}]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM controls WHERE acked_at IS NULL")


def test_controls_on_a_finished_run_are_refused(finished):
    root, env, run_id = finished
    db = Path(env["RESENV_DB"])
    count = len(rows(db, "SELECT id FROM controls"))
    for action in ("pause", "resume", "cancel"):
        done = resenv("control", action, run_id, env=env, cwd=root)
        assert done.returncode == 1 and "nothing to" in done.stderr and "Traceback" not in done.stderr
    assert len(rows(db, "SELECT id FROM controls")) == count  # nothing queued


def one_line_error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def test_bad_paths_are_one_line_before_anything_is_stored(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    db = Path(env["RESENV_DB"])
    args = ("run", str(bench), "--tiers", "none", "--display", "plain")

    under_file = one_line_error(resenv(*args, "--data-dir", "a-file/data", env=env, cwd=tmp_path))
    assert f"the data dir {tmp_path}/a-file/data: {tmp_path}/a-file is a file, not a directory" in under_file
    assert not db.exists()  # no run stuck `queued`: nothing was stored
    unwritable = one_line_error(resenv(*args, "--data-dir", "/sys/resenv-data", env=env, cwd=tmp_path))
    assert "cannot create the data dir /sys/resenv-data" in unwritable and not db.exists()

    directory = one_line_error(resenv(*args, "--db", "a-dir", env=env, cwd=tmp_path))
    assert f"the store {tmp_path}/a-dir is a directory" in directory
    store_under_file = one_line_error(resenv(*args, "--db", "a-file/x.db", env=env, cwd=tmp_path))
    assert f"cannot create the store's directory {tmp_path}/a-file: {tmp_path}/a-file is a file" in store_under_file
    unwritable_store = one_line_error(resenv(*args, "--db", "/sys/resenv-test/x.db", env=env, cwd=tmp_path))
    assert "cannot create the store's directory /sys/resenv-test" in unwritable_store
    for command in (("runs",), ("show",), ("report",), ("runs", "--json"), ("control", "pause", "latest"),
                    ("rescore", "latest"), ("run", "--resume", "latest")):
        assert "is a directory" in one_line_error(resenv(*command, "--db", "a-dir", env=env, cwd=tmp_path))


def test_relative_paths_are_made_absolute_once(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    done = resenv("run", "benchmark.yaml", "--tiers", "none", "--display", "plain", "--repo", "ok",
                  "--db", "rel/store.db", "--data-dir", "rel/data", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert bench.exists() and (tmp_path / "rel" / "store.db").is_file()
    stored = rows(tmp_path / "rel" / "store.db", "SELECT data_dir FROM runs")[0]["data_dir"]
    assert stored.startswith(f"{tmp_path}/rel/data/") and Path(stored).is_dir()
    listed = resenv("runs", "--json", "--db", "rel/store.db", env=env, cwd=tmp_path)
    assert json.loads(listed.stdout)[0]["state"] == "finished"


def test_hosts_check_and_assets_status_as_json(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_benchmark_with_asset(tmp_path)
    checked = resenv("hosts", "check", str(bench), "--json", env=env, cwd=tmp_path)
    hosts = json.loads(checked.stdout)  # alone on stdout, whatever the exit status says
    assert [host["name"] for host in hosts] == ["gpubox"] and hosts[0]["reachable"] is True
    assert isinstance(hosts[0]["cpus"], int) and isinstance(hosts[0]["problems"], list)
    assert checked.returncode == (1 if hosts[0]["problems"] else 0)

    status = resenv("assets", "status", str(bench), "--json", env=env, cwd=tmp_path)
    assert status.returncode == 1  # something is missing, JSON or not
    shown = json.loads(status.stdout)
    assert shown["missing"] == 1 and shown["suite"] == "s"
    assert shown["hosts"] == [{"name": "gpubox", "kind": "local", "reachable": True, "error": None, "sandbox": "process",
                               "assets": [{"label": "url:http://127.0.0.1:9/w.bin (4 B)", "cached": False}]}]
    assert shown["unpinned"] == [{"repo": "ok", "label": "hf:org/weights"}, {"repo": "bad", "label": "hf:org/weights"}]
    text = resenv("assets", "status", str(bench), env=env, cwd=tmp_path)
    assert text.returncode == 1 and "MISSING url:http://127.0.0.1:9/w.bin (4 B)" in text.stdout
    assert "unpinned ok: hf:org/weights" in text.stdout and "2 assets not pinned yet" in text.stdout

    (tmp_path / "a-file").write_text("")
    fetch = one_line_error(resenv("assets", "fetch", str(bench), "--data-dir", "a-file/data", env=env, cwd=tmp_path))
    assert f"the asset cache {tmp_path}/a-file/data/assets: {tmp_path}/a-file is a file, not a directory" in fetch


def write_benchmark_with_asset(root: Path) -> Path:
    bench = write_bench(root)
    text = bench.read_text()
    assert text.count('        unpinned_assets: ["hf:org/weights"]\n') == 2
    text = text.replace(
        '        unpinned_assets: ["hf:org/weights"]\n',
        '        unpinned_assets: ["hf:org/weights"]\n'
        f'        assets: [{{kind: url, url: "http://127.0.0.1:9/w.bin", sha256: "{"0" * 64}", size: 4}}]\n', 1)
    bench.write_text(text)
    return bench
