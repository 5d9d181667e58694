"""Attacks on the store and on the ownership of a run, through the real CLI, real SQLite files and
real engine processes: a disk that fills up under the store or under the raw logs, a read-only,
corrupt or locked database, `--db` naming a directory, two `run --resume` of one run at once, and
relative path options.

What every failure must look like: one line on stderr (no traceback), a non-zero exit, the run's
sandboxes killed, the run resumable with `resenv run --resume RUN` once the cause is fixed, and
never a hang. The small file systems are tmpfs mounts made (and unmounted) here; where mounting is
not permitted those tests skip, and tests/unit/test_store_errors.py covers SQLITE_FULL with
`PRAGMA max_page_count` instead.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import RESENV, resenv, wait_for, write_benchmark
from ..conftest import rows as db_rows
from ..integration.test_controls import Harness, group_alive, no_tiers, open_gate
from ..integration.test_engine_run import assert_events_complete

pytestmark = pytest.mark.slow

MAIN = "print('ok')\n"


def chatty_gated_agent(gates: Path) -> str:
    """An agent that prints a line every few milliseconds until the file GATES/<job key> exists,
    so the store keeps growing while it runs."""
    return """\
a:
  kind: command
  command: >-
    echo started {job};
    while [ ! -e GATES/{job} ]; do echo tick tick tick tick tick tick tick tick tick tick; sleep 0.01; done;
    echo finished {job}
""".replace("GATES", str(gates))


# Its first attempt floods its raw log with 8 MB (one long line); a later attempt prints one line.
FLOODING_AGENT = """\
a:
  kind: command
  command: >-
    echo started {job};
    case {workdir} in */attempt-1/work) head -c 8000000 /dev/zero | tr '\\0' x; echo;; esac;
    echo finished {job}
"""


def one_line_error(stderr: str) -> str:
    """The whole of stderr is one `Error: ...` line: no traceback, nothing else."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0]


@contextmanager
def small_fs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the test's duration."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, options: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{options}", str(where)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def fill(fs: Path) -> Path:
    """Write a ballast file until the file system has not one byte left; returns it."""
    ballast = fs / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 4096, 512, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    break
    finally:
        os.close(fd)
    return ballast


def finish(h: Harness, what: str, timeout: float = 120) -> int:
    try:
        return h.finish(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the engine hung: {what}") from None


def resume(h: Harness, timeout: float = 120) -> subprocess.CompletedProcess:
    return resenv("run", "--resume", h.run_id, "--display", "none", *no_tiers(), env=h.env, cwd=h.tmp,
                  timeout=timeout)


def assert_resumed_to_the_end(h: Harness, keys: list[str]) -> None:
    """Every job done by a second attempt after its first was recorded as error/infra."""
    for key in keys:
        assert h.job(key)["state"] == "done", h.job(key)
        attempts = [(a["number"], a["state"], a["category"]) for a in h.attempts(key)]
        assert attempts == [(1, "error", "infra"), (2, "done", None)], (key, attempts)
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"
    assert db_rows(h.db, "SELECT COUNT(*) AS n FROM leases WHERE ended_at IS NULL")[0]["n"] == 0
    assert db_rows(h.db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"
    assert_events_complete(h.db, h.run_id)


# -- a full disk ------------------------------------------------------------------------------


def test_a_full_disk_under_the_store_stops_the_run_in_one_line_and_resume_finishes_it(tmp_path, cli_env):
    small = tmp_path / "small"
    # room enough that the store cannot fill it by itself before the ballast does (and that freeing
    # the ballast leaves room to resume); the ballast then takes every byte that is left
    with small_fs(small, "32m"):
        cli_env["RESENV_DB"] = str(small / "store.db")
        h = Harness(tmp_path, cli_env, ["r1", "r2"])
        h.bench = write_benchmark(tmp_path, {key: {"main.py": MAIN} for key in ("r1", "r2")},
                                  chatty_gated_agent(h.gates))
        try:
            h.start("--jobs", "2")
            pgids = [h.wait_started(key) for key in ("r1/a", "r2/a")]
            ballast = fill(small)
            code = finish(h, "the disk under its store is full")
        finally:
            h.stop()
        assert code == 1, (code, h.stderr)
        line = one_line_error(h.stderr)
        assert "full" in line and str(small / "store.db") in line, line
        assert f"resenv run --resume {h.run_id}" in line, line
        for pgid in pgids:
            assert not group_alive(pgid), "an agent outlived the engine whose store failed"
        listed = resenv("runs", env=cli_env, cwd=tmp_path)
        assert listed.returncode == 0 and h.run_id in listed.stdout and "interrupted" in listed.stdout, listed

        ballast.unlink()  # the cause is fixed
        for key in ("r1/a", "r2/a"):
            open_gate(h.gates, key)
        resumed = resume(h)
        assert resumed.returncode == 0, resumed.stderr
        assert_resumed_to_the_end(h, ["r1/a", "r2/a"])


def test_a_full_disk_under_the_raw_logs_stops_the_run_in_one_line_and_resume_finishes_it(tmp_path, cli_env):
    small = tmp_path / "small"
    with small_fs(small, "3m"):
        cli_env["RESENV_DATA_DIR"] = str(small / "data")
        h = Harness(tmp_path, cli_env, ["r1", "r2"])
        h.bench = write_benchmark(tmp_path, {key: {"main.py": MAIN} for key in ("r1", "r2")}, FLOODING_AGENT)
        try:
            h.start("--jobs", "1")
            code = finish(h, "the disk under its raw logs is full")
        finally:
            h.stop()
        assert code == 1, (code, h.stderr)
        line = one_line_error(h.stderr)
        assert "No space left on device" in line and str(small) in line, line
        assert "marked interrupted" in line and f"resenv run --resume {h.run_id}" in line, line
        # the store could still be written: the run says what happened, and no second job started
        assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "interrupted"
        assert h.job("r1/a")["state"] == "queued" and h.job("r2/a")["state"] == "queued"
        [attempt] = h.attempts("r1/a")
        assert (attempt["state"], attempt["category"]) == ("error", "infra"), attempt
        assert "No space left on device" in attempt["reason"], attempt
        assert h.attempts("r2/a") == []

        remount(small, "size=64m")  # the cause is fixed
        resumed = resume(h)
        assert resumed.returncode == 0, resumed.stderr
        assert_resumed_to_the_end(h, ["r1/a"])
        assert [(a["number"], a["state"]) for a in h.attempts("r2/a")] == [(1, "done")]


# -- a locked, read-only, corrupt or misnamed store -----------------------------------------------


def test_a_store_locked_by_another_process_stops_the_run_in_one_line(tmp_path, cli_env):
    h = Harness(tmp_path, cli_env, ["r1"])
    try:
        h.start()
        pgid = h.wait_started("r1/a")
        holder = sqlite3.connect(h.db, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")  # held past the engine's busy timeout
            code = finish(h, "its store is locked")
        finally:
            holder.close()
    finally:
        h.stop()
    assert code == 1, (code, h.stderr)
    line = one_line_error(h.stderr)
    assert "locked" in line and f"resenv run --resume {h.run_id}" in line, line
    assert not group_alive(pgid)

    open_gate(h.gates, "r1/a")
    resumed = resume(h)
    assert resumed.returncode == 0, resumed.stderr
    assert_resumed_to_the_end(h, ["r1/a"])


def test_a_read_only_store_is_refused_in_one_line_and_resume_works_once_writable(tmp_path, cli_env):
    small = tmp_path / "small"
    with small_fs(small, "16m"):
        cli_env["RESENV_DB"] = str(small / "store.db")
        h = Harness(tmp_path, cli_env, ["r1"])
        try:
            h.start()
            h.wait_started("r1/a")
            assert h.engine is not None
            h.engine.send_signal(signal.SIGINT)
            assert finish(h, "Ctrl-C") == 130, h.stderr
        finally:
            h.stop()
        remount(small, "ro")
        for args in (("run", "--resume", h.run_id, "--display", "none"),
                     ("run", str(h.bench), "--display", "none")):
            out = resenv(*args, env=cli_env, cwd=tmp_path)
            assert out.returncode == 1, (args, out.returncode, out.stderr)
            line = one_line_error(out.stderr)
            assert "read-only" in line and str(small / "store.db") in line, (args, line)
        shown = resenv("show", h.run_id, env=cli_env, cwd=tmp_path)
        if shown.returncode != 0:  # reading may need the WAL index, which a read-only mount cannot make
            one_line_error(shown.stderr)

        remount(small, "rw")  # the cause is fixed
        open_gate(h.gates, "r1/a")
        resumed = resume(h)
        assert resumed.returncode == 0, resumed.stderr
        assert_resumed_to_the_end(h, ["r1/a"])


def _commands(bench: Path, run_ref: str) -> list[tuple[str, ...]]:
    return [("run", str(bench), "--display", "none"), ("run", "--resume", run_ref, "--display", "none"),
            ("runs",), ("show", run_ref), ("report", run_ref), ("control", "cancel", run_ref)]


def test_a_file_that_is_not_a_database_is_refused_in_one_line(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"r1": {"main.py": MAIN}}, chatty_gated_agent(tmp_path / "gates"))
    db = Path(cli_env["RESENV_DB"])
    db.write_bytes(os.urandom(3000) + b"this is no database at all\n" * 200)
    for args in _commands(bench, "latest"):
        out = resenv(*args, env=cli_env, cwd=tmp_path)
        assert out.returncode == 1, (args, out.returncode, out.stderr)
        line = one_line_error(out.stderr)
        assert "not a database" in line and str(db) in line, (args, line)


def test_a_corrupt_database_is_refused_in_one_line(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"r1": {"main.py": MAIN}}, "a:\n  kind: command\n  command: echo hi\n")
    done = resenv("run", str(bench), "--display", "none", *no_tiers(), env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    page = db_rows(db, "PRAGMA page_size")[0]["page_size"]
    data = bytearray(db.read_bytes())
    assert len(data) > 3 * page
    data[page:] = b"\xa5" * (len(data) - page)  # every page but the schema's
    db.write_bytes(bytes(data))
    for args in _commands(bench, run_id):
        out = resenv(*args, env=cli_env, cwd=tmp_path)
        assert out.returncode == 1, (args, out.returncode, out.stderr)
        line = one_line_error(out.stderr)
        assert "corrupt" in line and str(db) in line, (args, line)


def test_db_naming_a_directory_is_refused_in_one_line(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"r1": {"main.py": MAIN}}, "a:\n  kind: command\n  command: echo hi\n")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    for args in _commands(bench, "latest"):
        out = resenv(*args, "--db", str(folder), env=cli_env, cwd=tmp_path)
        assert out.returncode == 1, (args, out.returncode, out.stderr)
        line = one_line_error(out.stderr)
        assert "is a directory" in line and str(folder) in line, (args, line)
    assert list(folder.iterdir()) == []


# -- one engine per run -------------------------------------------------------------------------


def test_two_resumes_at_once_one_runs_the_run_and_the_other_names_its_pid(tmp_path, cli_env):
    h = Harness(tmp_path, cli_env, ["r1", "r2"])
    try:
        h.start("--jobs", "2")
        h.wait_started("r1/a")
        h.wait_started("r2/a")
        assert h.engine is not None
        h.engine.send_signal(signal.SIGINT)
        assert finish(h, "Ctrl-C") == 130, h.stderr
    finally:
        h.stop()

    # Both start while another process holds the store's write lock, so that neither can claim the
    # run before the other has read it: the race is at its widest. The lock is let go as soon as one
    # of them gives up, or after a few seconds (well inside the engines' busy timeout) at most.
    argv = [*RESENV, "run", "--resume", h.run_id, "--display", "none", *no_tiers()]
    holder = sqlite3.connect(h.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    engines = [subprocess.Popen(argv, env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and all(engine.poll() is None for engine in engines):
            time.sleep(0.05)
        holder.execute("ROLLBACK")
        holder.close()

        def refused() -> subprocess.Popen | None:
            claims = db_rows(h.db, "SELECT COUNT(DISTINCT json_extract(data, '$.pid')) AS n FROM events"
                             " WHERE kind = 'run_state' AND json_extract(data, '$.state') = 'running'")
            if claims[0]["n"] > 2:  # the first engine, then both resumes
                raise AssertionError("both resumes claimed the run")
            return next((engine for engine in engines if engine.poll() is not None), None)

        loser = wait_for(refused, timeout=120)
        [winner] = [engine for engine in engines if engine is not loser]
        _, err = loser.communicate(timeout=10)
        assert loser.returncode == 1, (loser.returncode, err)
        line = one_line_error(err)
        assert f"PID {winner.pid}" in line and h.run_id in line, line
        assert winner.poll() is None, "the engine that holds the run stopped"

        for key in ("r1/a", "r2/a"):
            h.wait_started(key, 2)
            open_gate(h.gates, key)
        _, err = winner.communicate(timeout=120)
        assert winner.returncode == 0, err
    finally:
        for engine in engines:
            if engine.poll() is None:
                engine.kill()
                engine.communicate(timeout=10)
    assert_resumed_to_the_end(h, ["r1/a", "r2/a"])


def test_a_sigkilled_engine_does_not_hold_its_run(tmp_path, cli_env):
    h = Harness(tmp_path, cli_env, ["r1"])
    try:
        h.start()
        h.wait_started("r1/a")
        assert h.engine is not None
        h.engine.send_signal(signal.SIGKILL)
        h.engine.wait(timeout=30)
    finally:
        h.stop()
    # at once: the dead engine's heartbeat is still fresh, and its run must not be blocked by it
    open_gate(h.gates, "r1/a")
    resumed = resume(h)
    assert resumed.returncode == 0, resumed.stderr
    assert_resumed_to_the_end(h, ["r1/a"])


def test_a_dead_engines_row_naming_a_live_process_does_not_block_resume(tmp_path, cli_env):
    """The run's row names a PID of this machine with a fresh heartbeat, but no process holds the run's
    lock: the PID is a reused one (or a zombie's), not an engine's, and the run resumes at once."""
    h = Harness(tmp_path, cli_env, ["r1"])
    try:
        h.start()
        h.wait_started("r1/a")
        assert h.engine is not None
        h.engine.send_signal(signal.SIGKILL)
        h.engine.wait(timeout=30)
    finally:
        h.stop()
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        conn = sqlite3.connect(h.db)
        conn.execute("UPDATE runs SET engine_pid = ?, heartbeat_at = ?", (stranger.pid, time.time()))
        conn.commit()
        conn.close()
        open_gate(h.gates, "r1/a")
        resumed = resume(h)
        assert resumed.returncode == 0, resumed.stderr
    finally:
        stranger.kill()
        stranger.wait()
    assert_resumed_to_the_end(h, ["r1/a"])


# -- relative paths -----------------------------------------------------------------------------


def test_relative_db_and_data_dir_are_resolved_once_at_start(tmp_path, cli_env):
    agent = "a:\n  kind: command\n  command: >-\n    ls {repo}/main.py && echo work={workdir}\n"
    write_benchmark(tmp_path, {"r1": {"main.py": MAIN}, "r2": {"main.py": MAIN}}, agent)
    del cli_env["RESENV_DB"]
    cli_env["RESENV_DATA_DIR"] = "env-data"  # relative in the environment too
    out = resenv("run", "--db", "rel/store.db", "--display", "none", *no_tiers(), env=cli_env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    db = tmp_path / "rel" / "store.db"
    [run] = db_rows(db, "SELECT id, data_dir, base_dir FROM runs")
    assert run["data_dir"] == str(tmp_path / "env-data" / run["id"])
    jobs = db_rows(db, "SELECT key, state, reason FROM jobs ORDER BY key")
    assert [(j["key"], j["state"]) for j in jobs] == [("r1/a", "done"), ("r2/a", "done")], jobs
    for attempt in db_rows(db, "SELECT workdir FROM attempts"):
        assert Path(attempt["workdir"]).is_absolute() and Path(attempt["workdir"]).is_dir(), attempt
    texts = [row["text"] for row in db_rows(
        db, "SELECT json_extract(data, '$.text') AS text FROM events WHERE kind = 'transcript'")]
    assert any(text.startswith(f"work={tmp_path}/env-data/") for text in texts), texts

    out = resenv("run", "--db", "rel/store.db", "--data-dir", "flag-data", "--display", "none", *no_tiers(),
                 env=cli_env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    newest = db_rows(db, "SELECT id, data_dir FROM runs ORDER BY created_at DESC LIMIT 1")[0]
    assert newest["data_dir"] == str(tmp_path / "flag-data" / newest["id"])
    assert all(j["state"] == "done" for j in db_rows(db, "SELECT state FROM jobs WHERE run_id = ?", (newest["id"],)))
    # a relative --db names the same store from the same directory, for every command
    listed = resenv("runs", "--db", "rel/store.db", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0 and newest["id"] in listed.stdout, listed.stderr
