"""The store against a real SQLite file: migrations, batched writes, read-only tailing."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from resenv.engine.store.schema import SCHEMA_VERSION
from resenv.engine.store.db import StoreError, StoreReader, StoreWriter, connect, insert_control, migrate


def make_run(conn: sqlite3.Connection, run_id: str = "r1") -> None:
    conn.execute(
        "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
        " created_at) VALUES (?, 'n', 'b', '.', 's', '{}', '{}', '/tmp', 'running', ?)",
        (run_id, time.time()),
    )


def test_migrate_creates_schema_once_and_reopens(tmp_path):
    path = tmp_path / "s.db"
    conn = connect(path)
    assert migrate(conn) == SCHEMA_VERSION
    make_run(conn)
    assert migrate(conn) == SCHEMA_VERSION  # a second open applies nothing and keeps data
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.db"
    conn = connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        migrate(conn)
    with pytest.raises(StoreError, match="newer"):
        StoreReader(path)


def test_failed_migration_leaves_db_untouched(tmp_path, monkeypatch):
    from resenv.engine.store import db as store

    path = tmp_path / "s.db"
    monkeypatch.setattr(store, "MIGRATIONS", ["CREATE TABLE a (x); CREATE TABLE a (y);"])
    monkeypatch.setattr(store, "SCHEMA_VERSION", 1)
    conn = connect(path)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'a'").fetchone()[0] == 0


def test_not_a_resenv_db(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a resenv database"):
        StoreReader(path)
    with pytest.raises(StoreError, match="no resenv database"):
        StoreReader(tmp_path / "missing.db")


async def test_writer_batches_events_and_keeps_order(tmp_path):
    path = tmp_path / "s.db"
    writer = StoreWriter(path)
    make_run(writer.conn)
    writer.start()
    for index in range(20_000):
        writer.event("r1", "output", {"i": index}, attempt_id=None)
    await writer.flush()
    assert writer.events_written == 20_000
    assert writer.transactions <= 10  # batched, not one commit per event
    reader = StoreReader(path)
    values = [int(row["data"].split(":")[1].rstrip("}")) for row in reader.tail_events("r1", 0, 100_000)]
    assert values == list(range(20_000))
    await writer.close()


async def test_the_writer_counts_its_backlog_and_says_when_it_is_behind(tmp_path):
    """The queue never blocks: it counts the JSON it holds, and is `busy` over its bound (output lines
    then wait or go to the raw log; engine/output.py). State writes are queued whatever the backlog."""
    writer = StoreWriter(tmp_path / "s.db")
    writer.max_backlog_bytes = 10_000
    make_run(writer.conn)
    size = writer.event("r1", "output", {"text": "x" * 100})
    assert size == len('{"text":"' + "x" * 100 + '"}') and writer.backlog_bytes == size and not writer.busy
    for _ in range(100):  # not started: nothing drains, nothing blocks
        writer.event("r1", "output", {"text": "x" * 100})
    assert writer.busy and writer.backlog_bytes == 101 * size
    writer.execute("INSERT INTO controls (run_id, action, created_at) VALUES ('r1', 'pause', 1.0)")
    writer.start()
    await writer.flush()
    assert writer.backlog_bytes == 0 and not writer.busy
    assert writer.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 101
    assert writer.conn.execute("SELECT COUNT(*) FROM controls").fetchone()[0] == 1
    await writer.close()


async def test_insert_returns_id_and_errors_reach_the_caller(tmp_path):
    writer = StoreWriter(tmp_path / "s.db")
    make_run(writer.conn)
    writer.start()
    first = await writer.insert("controls", {"run_id": "r1", "action": "pause", "created_at": 1.0})
    second = await writer.insert("controls", {"run_id": "r1", "action": "resume", "created_at": 2.0})
    assert second == first + 1
    with pytest.raises(sqlite3.IntegrityError):
        await writer.insert("controls", {"run_id": "r1", "action": None, "created_at": 3.0})
    # the writer survives a failed statement
    writer.event("r1", "x", {})
    await writer.flush()
    await writer.close()


async def test_duplicate_attempt_seq_is_ignored(tmp_path):
    writer = StoreWriter(tmp_path / "s.db")
    make_run(writer.conn)
    writer.start()
    for _ in range(2):
        writer.event("r1", "output", {"text": "once"}, attempt_id=7, seq=1)
    await writer.flush()
    assert writer.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
    await writer.close()


async def test_reader_tails_while_writer_writes(tmp_path):
    path = tmp_path / "s.db"
    writer = StoreWriter(path)
    make_run(writer.conn)
    writer.start()
    reader = StoreReader(path)
    seen: list[int] = []
    last = 0

    async def produce() -> None:
        for index in range(5_000):
            writer.event("r1", "output", {"i": index})
            if index % 500 == 0:
                await asyncio.sleep(0.01)
        await writer.flush()

    producer = asyncio.create_task(produce())
    while not producer.done() or len(seen) < 5_000:
        for row in reader.tail_events("r1", last):
            seen.append(row["id"])
            last = row["id"]
        await asyncio.sleep(0.005)
    assert len(seen) == 5_000 and len(set(seen)) == 5_000 and seen == sorted(seen)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.conn.execute("DELETE FROM events")
    await writer.close()


def test_controls_from_another_connection(tmp_path):
    path = tmp_path / "s.db"
    conn = connect(path)
    migrate(conn)
    make_run(conn)
    control_id = insert_control(path, "r1", "pause")
    row = StoreReader(path).controls("r1")[0]
    assert row["id"] == control_id and row["action"] == "pause" and row["acked_at"] is None


def test_reader_upgrades_an_older_db_before_reading(tmp_path, monkeypatch):
    from resenv.engine.store import db as store

    path = tmp_path / "old.db"
    conn = connect(path)
    monkeypatch.setattr(store, "SCHEMA_VERSION", 1)
    migrate(conn)  # a DB as the first schema left it
    make_run(conn)
    conn.close()
    monkeypatch.undo()
    reader = StoreReader(path)
    assert reader.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [row["name"] for row in reader.rows("PRAGMA table_info(attempts)") if row["name"] == "scope"] == ["scope"]
    assert [run["id"] for run in reader.runs()] == ["r1"]
