"""The store when it cannot be used, against real SQLite files: a writer that finds the store full or
locked fails loudly and at once (never a hang, never a silent death), errors become one-line
StoreFailures, a run's lock admits one process, and paths are made absolute once."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from resenv.engine.store import db as store
from resenv.engine.paths import absolute, default_data_dir, default_db
from resenv.engine.run.runlock import EngineBusy, RunLock
from resenv.engine.sandbox.base import SandboxError
from resenv.engine.store.db import (StoreError, StoreFailure, StoreReader, StoreWriter, connect, disk_failure,
                                 mark_interrupted, open_for_writing, store_failure)

from .test_store import make_run


def full_writer(path: Path, failures: list[StoreFailure]) -> StoreWriter:
    """A writer on a store that may not grow by one page more (SQLITE_FULL on the next new page)."""
    writer = StoreWriter(path, on_failure=failures.append)
    make_run(writer.conn)
    pages = writer.conn.execute("PRAGMA page_count").fetchone()[0]
    writer.conn.execute(f"PRAGMA max_page_count = {pages}")
    return writer


async def test_a_full_store_fails_the_writer_at_once_and_every_waiter_learns_it(tmp_path):
    path = tmp_path / "s.db"
    failures: list[StoreFailure] = []
    writer = full_writer(path, failures)
    writer.start()
    for i in range(2000):
        writer.event("r1", "output", {"text": "x" * 200, "i": i})
    with pytest.raises(StoreFailure, match="disk is full") as raised:
        await asyncio.wait_for(writer.flush(), timeout=30)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    assert failures == [writer.failure] and writer.failure is raised.value
    assert writer.task is not None and writer.task.done() and writer.task.exception() is None

    # afterwards: events and updates are dropped without raising, waits fail at once
    dropped = writer.dropped
    writer.event("r1", "output", {"text": "late"})
    writer.update("runs", "r1", {"state": "finished"})
    assert writer.dropped == dropped + 2
    with pytest.raises(StoreFailure):
        await asyncio.wait_for(writer.fetch("UPDATE runs SET state = 'x' WHERE id = 'r1'"), timeout=5)
    with pytest.raises(StoreFailure):
        await asyncio.wait_for(writer.flush(), timeout=5)
    await asyncio.wait_for(writer.close(), timeout=10)
    assert failures == [writer.failure]  # called once
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0  # the batch was rolled back whole
    assert conn.execute("SELECT state FROM runs").fetchone()[0] == "running"
    conn.close()


async def test_a_write_that_finds_the_store_full_fails_its_whole_batch_not_just_itself(tmp_path):
    failures: list[StoreFailure] = []
    writer = full_writer(tmp_path / "s.db", failures)
    writer.update("runs", "r1", {"state": "paused"})
    big = asyncio.ensure_future(writer.fetch(
        "INSERT INTO events (run_id, seq, ts, kind, data) VALUES ('r1', 1, 0, 'k', randomblob(200000))"))
    await asyncio.sleep(0)  # the insert is queued behind the update: one batch
    writer.start()
    with pytest.raises(StoreFailure, match="disk is full"):
        await asyncio.wait_for(big, timeout=30)
    assert len(failures) == 1
    await writer.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT state FROM runs").fetchone()[0] == "running"
    conn.close()


async def test_a_statement_that_fails_alone_fails_only_its_own_write(tmp_path):
    failures: list[StoreFailure] = []
    writer = StoreWriter(tmp_path / "s.db", on_failure=failures.append)
    make_run(writer.conn)
    writer.start()
    with pytest.raises(sqlite3.IntegrityError):
        await writer.fetch("INSERT INTO runs (id) VALUES ('r1')")
    writer.update("runs", "r1", {"state": "finished"})
    await writer.flush()
    assert writer.failure is None and failures == []
    await writer.close()
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT state FROM runs").fetchone()[0] == "finished"


async def test_a_store_locked_past_the_busy_timeout_fails_the_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 300)
    path = tmp_path / "s.db"
    failures: list[StoreFailure] = []
    writer = StoreWriter(path, on_failure=failures.append)
    make_run(writer.conn)
    writer.start()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        writer.update("runs", "r1", {"state": "paused"})
        with pytest.raises(StoreFailure, match="locked by another process"):
            await asyncio.wait_for(writer.flush(), timeout=30)
    finally:
        holder.close()
    assert len(failures) == 1
    await writer.close()


async def test_closing_a_writer_commits_what_is_queued(tmp_path):
    writer = StoreWriter(tmp_path / "s.db")
    make_run(writer.conn)
    writer.start()
    for i in range(100):
        writer.event("r1", "output", {"i": i}, seq=i)
    await writer.close()
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT COUNT(*) FROM events").fetchone()[0] == 100


def test_stores_that_cannot_be_used_are_one_line_store_failures(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    for opener in (connect, open_for_writing, StoreReader):
        with pytest.raises(StoreFailure, match="is a directory"):
            opener(folder)

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all\n" * 500)
    for opener in (open_for_writing, StoreReader):
        with pytest.raises(StoreFailure, match="is not a database") as raised:
            opener(junk)
        assert str(junk) in str(raised.value)

    good = tmp_path / "good.db"
    open_for_writing(good).close()
    readonly = sqlite3.connect(f"file:{good}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as error:
        readonly.execute("CREATE TABLE t (x)")
    readonly.close()
    assert "it is read-only" in str(store_failure(error.value, good))

    assert store_failure(sqlite3.IntegrityError("UNIQUE constraint failed: runs.id"), good) is None
    assert store_failure(sqlite3.OperationalError("no such table: nope"), good) is None
    assert "is corrupt" in str(store_failure(sqlite3.DatabaseError("database disk image is malformed"), good))
    assert isinstance(StoreFailure("x"), StoreError)


def test_a_corrupt_store_is_refused_by_readers(tmp_path):
    path = tmp_path / "s.db"
    conn = open_for_writing(path)
    make_run(conn)
    conn.execute("INSERT INTO events (run_id, seq, ts, kind, data) VALUES ('r1', 1, 0, 'k', randomblob(50000))")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    page = 4096
    data = bytearray(path.read_bytes())
    data[page:] = b"\xa5" * (len(data) - page)
    path.write_bytes(bytes(data))
    reader = StoreReader(path)
    with pytest.raises(StoreFailure, match="is corrupt"):
        reader.runs()
    reader.close()


def test_the_engines_own_disk_failing_is_a_store_failure_and_other_errors_are_not(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    failure = disk_failure(full, tmp_path)
    assert failure is not None and f"under {tmp_path}" in str(failure) and "No space left" in str(failure)
    wrapped = SandboxError("cannot start process")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system", "/data/x.log")
    assert "/data/x.log" in str(disk_failure(wrapped, tmp_path))
    assert disk_failure(OSError(errno.ENOENT, "No such file"), tmp_path) is None
    assert disk_failure(SandboxError("cwd is not a directory"), tmp_path) is None


def test_mark_interrupted_records_the_end_on_its_own_connection(tmp_path):
    path = tmp_path / "s.db"
    conn = open_for_writing(path)
    make_run(conn)
    conn.close()
    assert mark_interrupted(path, "r1", "the disk is full") is None
    check = sqlite3.connect(path)
    assert check.execute("SELECT state, heartbeat_at FROM runs").fetchone() == ("interrupted", None)
    assert check.execute("SELECT kind FROM events").fetchall() == [("run_state",)]
    check.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert "locked" in (mark_interrupted(path, "r1", "x") or "")
    finally:
        holder.close()


# -- the run lock -----------------------------------------------------------------------------

HOLD = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from resenv.engine.run.runlock import RunLock
    lock = RunLock.take(Path(sys.argv[1]), "r1", sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
""")


def hold_in_child(run_dir: Path, role: str = "engine") -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir), role], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_run_lock_admits_one_holder_and_the_refused_one_names_it(tmp_path):
    run_dir = tmp_path / "runs" / "r1"  # made by the lock if missing
    lock = RunLock.take(run_dir, "r1", "engine")
    with pytest.raises(EngineBusy, match=f"run r1 is being run by engine PID {os.getpid()} on "):
        RunLock.take(run_dir, "r1", "engine")
    lock.release()
    RunLock.take(run_dir, "r1", "engine").release()

    child = hold_in_child(run_dir, "rescore")
    try:
        with pytest.raises(EngineBusy, match=f"run r1 is being rescored by PID {child.pid} on "):
            RunLock.take(run_dir, "r1", "engine")
    finally:
        child.communicate(input="", timeout=30)
    RunLock.take(run_dir, "r1", "engine").release()  # its end released it


def test_a_sigkilled_holder_does_not_hold_the_run(tmp_path):
    run_dir = tmp_path / "r1"
    child = hold_in_child(run_dir)
    with pytest.raises(EngineBusy, match=f"PID {child.pid}"):
        RunLock.take(run_dir, "r1", "engine")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    lock = RunLock.take(run_dir, "r1", "engine")  # at once: the kernel let it go with the process
    assert f'"pid": {os.getpid()}' in (run_dir / "engine.lock").read_text()
    lock.release()


def test_the_lock_is_not_inherited_by_the_processes_the_engine_starts(tmp_path):
    lock = RunLock.take(tmp_path, "r1", "engine")
    sleeper = subprocess.Popen(["sleep", "60"], close_fds=False)
    try:
        lock.release()
        RunLock.take(tmp_path, "r1", "engine").release()  # a leftover sandbox process never holds the run
    finally:
        sleeper.kill()
        sleeper.wait()


# -- paths --------------------------------------------------------------------------------------


def test_relative_paths_are_made_absolute_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute("rel/store.db") == tmp_path / "rel" / "store.db"
    assert absolute(Path("a/../b")) == tmp_path / "b"
    assert absolute("~/x") == Path.home() / "x"
    monkeypatch.setenv("RESENV_DB", "db/s.db")
    monkeypatch.setenv("RESENV_DATA_DIR", "data")
    assert default_db() == tmp_path / "db" / "s.db"
    assert default_data_dir() == tmp_path / "data"
    monkeypatch.delenv("RESENV_DB")
    monkeypatch.delenv("RESENV_DATA_DIR")
    monkeypatch.setenv("RESENV_HOME", "home")
    assert default_db() == tmp_path / "home" / "resenv.db"
    assert default_data_dir() == tmp_path / "home" / "runs"
