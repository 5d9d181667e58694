"""What a new user trips over in the CLI and the reports: a bad --figure path, a --db that is some
other program's database, a retry of a tier that was skipped by rule, a killed engine's run, and a
report of a run that did not judge C5 or count tokens. One small run (real engine, real SQLite) of
C1 and C3 on a host without GPUs serves the read-only tests: C3 is skipped there, C5 never ran, and
the command agent reports no tokens."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from ..conftest import cli_environ, finished_run, resenv, rows

BENCH = f"""\
version: 1
defaults:
  suite: s
  agent: a
  host: cpubox
  retries: {{infra: 0, backoff_s: 0.1}}
hosts:
  cpubox: {{kind: local, slots: 2, gpus: 0}}
agents:
  a:
    kind: command
    command: >-
      printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
suites:
  s:
    repos:
      - id: ok
        source: {{path: suites/ok}}
        entrypoints:
          cpu: {{command: "{{python}} main.py"}}
          single_gpu: {{command: "{{python}} main.py"}}
          multi_gpu: {{command: "{{python}} main.py", gpus: 2}}
"""


def write_bench(root: Path) -> Path:
    (root / "suites" / "ok").mkdir(parents=True)
    (root / "suites" / "ok" / "main.py").write_text("print('ok')\n")
    path = root / "benchmark.yaml"
    path.write_text(BENCH)
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    """A finished run of C1 and C3 on a host without GPUs: (its folder, the CLI environment, the run id)."""
    root = tmp_path_factory.mktemp("newuser")
    env, run_id = finished_run(root, write_bench(root), "C1,C3")
    return root, env, run_id


def one_line_error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def test_an_unusable_figure_path_is_one_line_before_the_report(finished):
    root, env, run_id = finished
    (root / "regfile").write_text("")
    (root / "adir.png").mkdir()
    cases = {
        str(root / "regfile" / "x.png"): f"{root}/regfile is a file, not a directory",
        "/proc/x.png": "cannot write the figure /proc/x.png",
        str(root / "adir.png"): f"{root}/adir.png is a directory",
    }
    for path, message in cases.items():
        done = resenv("report", run_id, "--figure", path, env=env, cwd=root)
        assert message in one_line_error(done), (path, done.stderr)
        assert done.stdout == "", path  # nothing of the report was printed
    made = resenv("report", run_id, "--figure", str(root / "new" / "x.svg"), env=env, cwd=root)
    assert made.returncode == 0 and (root / "new" / "x.svg").is_file(), made.stderr  # a missing folder is made


def test_another_programs_database_is_refused_before_anything_is_stored(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
        conn.execute("INSERT INTO contacts VALUES ('ada')")
    conn.close()
    done = resenv("run", str(bench), "--tiers", "none", "--display", "plain", "--db", str(other), env=env, cwd=tmp_path)
    assert f"{other} is not a resenv database" in one_line_error(done)
    assert [row["name"] for row in rows(other, "SELECT name FROM sqlite_master WHERE type = 'table'")] == ["contacts"]
    assert rows(other, "PRAGMA user_version") == [{"user_version": 0}]
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    # an empty file is a new store, as a missing one is
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    fresh = resenv("run", str(bench), "--tiers", "none", "--display", "plain", "--db", str(empty), env=env, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr


def test_a_tier_skipped_by_rule_cannot_be_retried(finished):
    root, env, run_id = finished
    db = Path(env["RESENV_DB"])
    verdict = rows(db, "SELECT status, category FROM tier_results WHERE tier = 'C3'")
    assert verdict == [{"status": "skip", "category": "insufficient_hardware"}]
    before = rows(db, "SELECT state, started_at, finished_at FROM runs")[0]
    done = resenv("control", "retry", run_id, "ok/a", "--tier", "C3", env=env, cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tier C3 was skipped on job ok/a (insufficient_hardware" in done.stdout
    assert "nothing to retry" in done.stdout
    assert rows(db, "SELECT ack FROM controls WHERE tier = 'C3'") == [{"ack": "rejected"}]  # never queued
    resumed = resenv("run", "--resume", run_id, "--display", "plain", env=env, cwd=root)
    assert "nothing to resume" in resumed.stdout
    assert rows(db, "SELECT state, started_at, finished_at FROM runs")[0] == before
    assert rows(db, "SELECT MAX(number) AS n FROM attempts")[0]["n"] == 1


def test_a_killed_engines_run_reads_interrupted_everywhere(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    done = resenv("run", str(bench), "--tiers", "none", "--display", "plain", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(env["RESENV_DB"])
    with sqlite3.connect(db) as conn:  # what a kill -9 leaves: `running`, a stale heartbeat, a dead PID
        conn.execute("UPDATE runs SET state = 'running', finished_at = NULL, heartbeat_at = ?, engine_pid = ?",
                     (time.time() - 3600, 2**22 + 7))
    conn.close()
    listed = json.loads(resenv("runs", "--json", env=env, cwd=tmp_path).stdout)
    shown = resenv("show", env=env, cwd=tmp_path).stdout
    shown_json = json.loads(resenv("show", "--json", env=env, cwd=tmp_path).stdout)
    report = json.loads(resenv("report", "--format", "json", env=env, cwd=tmp_path).stdout)
    assert listed[0]["state"] == "interrupted"
    assert shown.splitlines()[0].split(" · ")[2] == "interrupted"
    assert shown_json["run"]["state"] == "interrupted"
    assert report["run"]["state"] == "interrupted"
    markdown = resenv("report", env=env, cwd=tmp_path).stdout
    assert markdown.splitlines()[0].endswith(" · interrupted")


def test_c5_that_never_ran_is_not_scored_and_unknown_tokens_are_unknown(finished):
    root, env, run_id = finished
    report = json.loads(resenv("report", run_id, "--format", "json", env=env, cwd=root).stdout)
    agent = report["agents"]["a"]
    assert agent["hallucinations"] is None and agent["tiers"]["C5"]["denominator"] == 0
    assert agent["input_tokens"] is None and agent["output_tokens"] is None
    markdown = resenv("report", run_id, env=env, cwd=root).stdout
    header = next(line for line in markdown.splitlines() if line.startswith("| agent"))
    row = next(line for line in markdown.splitlines() if line.startswith("| a |"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["C5 path"] == cells["C5 version"] == cells["C5 capability"] == "—"
    assert cells["tokens in/out"] == "—"
    assert markdown.splitlines()[0].endswith(run_id + " · " + report["run"]["name"])  # finished: no state said
    latex = resenv("report", run_id, "--format", "latex", env=env, cwd=root).stdout
    assert latex.endswith("\n") and latex.isascii()
    summary = resenv("report", run_id, "--format", "csv", env=env, cwd=root).stdout.splitlines()
    head, values = summary[0].split(","), summary[1].split(",")
    by_name = dict(zip(head, values))
    assert by_name["input_tokens"] == by_name["output_tokens"] == ""
    assert all(by_name[f"hallucinations_{kind}"] == "" for kind in ("path", "version", "capability")), by_name


def test_the_figure_of_a_run_without_c5_says_not_scored(finished, tmp_path: Path):
    root, env, run_id = finished
    figure = tmp_path / "f.svg"
    done = resenv("report", run_id, "--figure", str(figure), env=env, cwd=root)
    assert done.returncode == 0, done.stderr
    text = figure.read_text()
    assert "not scored" in text and "0 path" not in text


def test_loose_tiers_are_refused_in_the_users_own_spelling(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    for given, message in (("", "--tiers is empty"), (" , ", "--tiers is empty"),
                           ("all,C1", "unknown tier(s) all"), ("c1,Cx", "unknown tier(s) Cx")):
        done = resenv("run", str(bench), "--tiers", given, "--dry-run", env=env, cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, (given, done.stderr)
        assert "Traceback" not in done.stderr
    assert not Path(env["RESENV_DB"]).exists()


def test_resume_refuses_the_options_it_would_ignore(finished):
    root, env, run_id = finished
    db = Path(env["RESENV_DB"])
    before = rows(db, "SELECT * FROM runs")
    for option in (("--tiers", "C0"), ("--suite", "s"), ("--agent", "a"), ("--repo", "ok"), ("--host", "cpubox"),
                   ("--name", "x"), ("--data-dir", str(root / "elsewhere"))):
        done = resenv("run", "--resume", run_id, *option, env=env, cwd=root)
        assert f"{option[0]} cannot change on resume" in one_line_error(done), option
    same = resenv("run", "--resume", run_id, "--tiers", "c3,C1", env=env, cwd=root)  # the run's own tiers
    assert same.returncode == 0 and "nothing to resume" in same.stdout, same.stderr
    named = resenv("run", str(root / "benchmark.yaml"), "--resume", run_id, env=env, cwd=root)
    assert "BENCHMARK cannot change on resume" in one_line_error(named)
    assert rows(db, "SELECT * FROM runs") == before


def test_an_optional_run_reads_optional_and_an_empty_one_is_an_error(finished):
    root, env, run_id = finished
    for command in ("show", "report"):
        usage = resenv(command, "--help", env=env, cwd=root).stdout
        assert f" {command} [OPTIONS] [RUN]\n" in usage, usage
        empty = resenv(command, "", env=env, cwd=root)
        assert "an empty run id" in one_line_error(empty)
    assert "an empty run id" in one_line_error(resenv("control", "pause", "", env=env, cwd=root))


def test_messages_say_what_is_wrong_in_one_line_without_python_reprs(tmp_path: Path):
    env = cli_environ(tmp_path)
    bench = write_bench(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"version: 1\n# caf\xe9\n")
    (tmp_path / "regfile").write_text("")
    (tmp_path / "empty").mkdir()
    cases = [
        (("validate", "/nonexistent.yaml"), tmp_path, "Error: /nonexistent.yaml: no such file"),
        (("validate", "latin1.yaml"), tmp_path, "Error: latin1.yaml: not UTF-8 text (byte 16)"),
        (("run",), tmp_path / "empty", "Error: no benchmark.yaml here; pass a path"),
        (("run", "--resume", "nosuch"), tmp_path, "Error: no run 'nosuch': there is no resenv database at"),
        (("run", str(bench), "--data-dir", "/proc/foo"), tmp_path, "Error: cannot create the data dir /proc/foo"),
        (("run", str(bench), "--data-dir", str(tmp_path / "regfile" / "d")), tmp_path,
         f"Error: the data dir {tmp_path}/regfile/d: {tmp_path}/regfile is a file, not a directory"),
    ]
    for args, cwd, message in cases:
        done = resenv(*args, env=env, cwd=cwd)
        assert one_line_error(done).startswith(message), (args, done.stderr)
        assert "Errno" not in done.stderr and "codec" not in done.stderr
    assert not Path(env["RESENV_DB"]).exists()
    (tmp_path / "invalid.yaml").write_text("version: 1\nsuites: 3\n")
    invalid = resenv("validate", "invalid.yaml", env=env, cwd=tmp_path)
    assert invalid.stderr.startswith("Error: invalid benchmark: invalid.yaml:"), invalid.stderr


def test_an_unknown_scoring_names_the_choices_readably(finished):
    root, env, run_id = finished
    done = resenv("show", run_id, "--scoring", "foo", env=env, cwd=root)
    assert one_line_error(done).strip().endswith(
        f"run {run_id} has no scoring 'foo'; choose `latest` or `original` (rules "
        + rows(Path(env["RESENV_DB"]), "SELECT rules_version FROM scorings")[0]["rules_version"]
        + ") (the run has no rescore)")


def test_json_says_numbers_lists_and_a_finished_scoring(finished, tmp_path: Path):
    root, env, run_id = finished
    shown = json.loads(resenv("show", run_id, "--json", env=env, cwd=root).stdout)
    assert [job["gpus"] for job in shown["jobs"]] == [[]]  # no GPU leased on a host without GPUs
    assert shown["run"]["finished_at"] is not None
    assert shown["scoring"]["finished_at"] == shown["run"]["finished_at"]
    status = json.loads(resenv("assets", "status", str(root / "benchmark.yaml"), "--json", env=env, cwd=root).stdout)
    hosts = status["hosts"] if isinstance(status, dict) else status
    assert all("docker" not in host and host["sandbox"] == "process" for host in hosts), hosts
    none = cli_environ(tmp_path)
    listed = resenv("runs", "--json", env=none, cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [] and listed.stderr == ""
    table = resenv("runs", env=none, cwd=tmp_path)
    assert table.returncode == 0 and "no runs yet" in table.stdout
    assert not Path(none["RESENV_DB"]).exists()  # listing made no store


@pytest.mark.parametrize("columns", [80, 200])
def test_show_and_runs_fit_the_width_with_every_tier_and_whole_names(tmp_path: Path, columns: int):
    from ..tui import fixture_db

    db = fixture_db.build(tmp_path / "fixture")
    env = cli_environ(tmp_path) | {"RESENV_DB": str(db), "COLUMNS": str(columns)}
    keys = sorted(row["key"] for row in rows(db, "SELECT key FROM jobs WHERE run_id = ?", (fixture_db.LIVE_RUN,)))
    shown = resenv("show", fixture_db.LIVE_RUN, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= columns for line in table), "\n".join(table)
    header = [cell.strip() for cell in table[1].strip("┃").split("┃")]
    assert header[:2] == ["job", "state"] or header[:3] == ["job", "host:gpus", "state"]
    assert [cell for cell in header if cell.startswith("C")] == ["C0", "C1", "C2", "C3", "C4", "C5"]
    body = [[cell.strip() for cell in line.strip("│").split("│")] for line in table if line.startswith("│")]
    assert sorted(row[0] for row in body) == keys  # one line per job, its name whole
    if columns == 200:
        assert {"tokens", "cost", "elapsed", "reason"} <= set(header)
    listed = resenv("runs", env=env, cwd=tmp_path).stdout.splitlines()
    assert all(len(line) <= columns for line in listed) and any(fixture_db.LIVE_RUN in line for line in listed)
