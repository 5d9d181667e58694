"""SQLite store: the only interface between the engine and everything that watches it.

One writer task owns the write connection and applies queued writes in batched transactions (so
50,000 events/s cost a few commits, not 50,000); readers open read-only connections and tail
`events` by id. WAL mode lets readers run while the writer commits.

The queue never blocks its callers (they run in the event loop, many in output callbacks). It is
bounded by what is put into it: the JSON of queued events is counted (`StoreWriter.backlog_bytes`),
and while it is over `MAX_BACKLOG_BYTES` the writer is `busy`, which the producers of command output
lines read to hold lines back or leave them to the raw log (engine/output.py says why that and not a
paused pump). Every other write (state, controls, counters) is always queued.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from .runref import find_run
from .schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 10_000
MAX_BATCH = 10_000
MAX_BACKLOG_BYTES = 32 * 2**20  # queued event JSON over this: the writer is busy


class StoreError(Exception):
    """The DB file cannot be used (newer schema, not a resenv DB, unreadable)."""


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection with the pragmas every resenv connection needs."""
    if readonly:
        if not path.exists():
            raise StoreError(f"no resenv database at {path}")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to date; returns the version. Refuses a DB from a newer resenv."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database schema version {version} is newer than this resenv understands ({SCHEMA_VERSION})"
        )
    if version == SCHEMA_VERSION:
        return version
    conn.execute("BEGIN IMMEDIATE")
    try:
        for number in range(version, SCHEMA_VERSION):
            for statement in _statements(MIGRATIONS[number]):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _statements(script: str) -> Iterator[str]:
    """Split a migration script so it runs inside our transaction (executescript would commit)."""
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \n;"):
                yield buffer
            buffer = ""


def open_for_writing(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    migrate(conn)
    return conn


@dataclass
class _Write:
    sql: str
    params: Sequence[Any] | None
    future: asyncio.Future | None = None


@dataclass
class _Barrier:
    future: asyncio.Future


# json.dumps with keyword arguments builds a new encoder per call; events are the hot path.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode

EVENT_SQL = (
    "INSERT OR IGNORE INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass
class StoreWriter:
    """The single writer: every change to the DB goes through its queue, in order."""

    path: Path
    conn: sqlite3.Connection = field(init=False)
    queue: asyncio.Queue = field(init=False)
    task: asyncio.Task | None = field(init=False, default=None)
    events_written: int = field(init=False, default=0)
    transactions: int = field(init=False, default=0)
    backlog_bytes: int = field(init=False, default=0)  # JSON of the events queued and not yet committed
    max_backlog_bytes: int = MAX_BACKLOG_BYTES

    def __post_init__(self) -> None:
        self.conn = open_for_writing(self.path)
        self.queue = asyncio.Queue()

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop(), name="store-writer")

    @property
    def busy(self) -> bool:
        """The writer is behind: more than `max_backlog_bytes` of events wait to be committed."""
        return self.backlog_bytes > self.max_backlog_bytes

    # -- enqueueing ---------------------------------------------------------------------------
    def event(
        self, run_id: str, kind: str, data: dict[str, Any], *, job_id: int | None = None,
        attempt_id: int | None = None, seq: int | None = None, ts: float | None = None,
    ) -> int:
        """Queue one event; never blocks and never awaits (called from output callbacks). Returns
        the length of its JSON, which is what it adds to the backlog."""
        payload = _encode(data)
        self.queue.put_nowait((run_id, job_id, attempt_id, seq, ts or time.time(), kind, payload))
        self.backlog_bytes += len(payload)
        return len(payload)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Queue a write whose result nobody waits for (state updates, heartbeats)."""
        self.queue.put_nowait(_Write(sql, params))

    async def fetch(self, sql: str, params: Sequence[Any] | None = None) -> int:
        """Queue a write and wait for it; returns lastrowid (for inserts that need the new id)."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Write(sql, params, future))
        return await future

    async def insert(self, table: str, row: dict[str, Any]) -> int:
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return await self.fetch(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(row.values()))

    def update(self, table: str, key: Any, values: dict[str, Any], *, key_column: str = "id") -> None:
        sets = ", ".join(f"{column} = ?" for column in values)
        self.execute(f"UPDATE {table} SET {sets} WHERE {key_column} = ?", [*values.values(), key])

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Barrier(future))
        await future

    async def close(self) -> None:
        if self.task is not None:
            await self.flush()
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            self.task = None
        self.conn.close()

    # -- the writer loop ----------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            batch = [await self.queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self.queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            try:
                results = await asyncio.to_thread(self._apply, batch)
            finally:
                self.backlog_bytes -= sum(len(item[6]) for item in batch if isinstance(item, tuple))
            for item, result in zip(batch, results):
                future = getattr(item, "future", None)
                if future is not None and not future.done():
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)

    def _apply(self, batch: list[Any]) -> list[Any]:
        """Apply a batch in one transaction; consecutive events go in one executemany."""
        results: list[Any] = [None] * len(batch)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            pending: list[tuple] = []
            for index, item in enumerate(batch):
                if isinstance(item, tuple):  # an event row: the hot path stays a bare tuple
                    pending.append(item)
                    continue
                if pending:
                    self._write_events(pending)
                    pending = []
                if isinstance(item, _Write):
                    try:
                        cursor = self.conn.execute(item.sql, item.params or ())
                        results[index] = cursor.lastrowid
                    except sqlite3.Error as error:
                        results[index] = error
            if pending:
                self._write_events(pending)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.transactions += 1
        return results

    def _write_events(self, rows: list[tuple]) -> None:
        self.conn.executemany(EVENT_SQL, rows)
        self.events_written += len(rows)


class StoreReader:
    """A read-only view for the CLI, reports and the dashboard; never takes a write lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = connect(path, readonly=True)
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"database schema version {version} is newer than this resenv understands")
        if version == 0:
            raise StoreError(f"{path} is not a resenv database (no schema)")
        if version < SCHEMA_VERSION:
            # A DB from an older resenv: upgrade it once (migrations are transactional), then read.
            self.conn.close()
            try:
                open_for_writing(path).close()
            except sqlite3.OperationalError as error:
                raise StoreError(f"{path} has schema {version} and cannot be upgraded here: {error}") from error
            self.conn = connect(path, readonly=True)
        self.db = sqlite_utils.Database(self.conn)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(sql, params)]

    def runs(self) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM runs ORDER BY created_at DESC")

    def run(self, run_id: str) -> dict[str, Any] | None:
        found = self.rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        return found[0] if found else None

    def resolve_run(self, ref: str | None) -> dict[str, Any]:
        """A run by id, unique id prefix, or `latest` / None for the newest."""
        return find_run(self.rows, ref, self.path, StoreError)

    def jobs(self, run_id: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM jobs WHERE run_id = ? ORDER BY id", (run_id,))

    def resolve_job(self, run_id: str, ref: str) -> dict[str, Any]:
        """A job by key (`repo/agent`), by numeric id, or by a unique repo id."""
        found = self.rows(
            "SELECT * FROM jobs WHERE run_id = ? AND (key = ? OR CAST(id AS TEXT) = ? OR repo_id = ?)",
            (run_id, ref, ref, ref),
        )
        if len(found) == 1:
            return found[0]
        if not found:
            raise StoreError(f"no job {ref!r} in run {run_id}")
        raise StoreError(f"{ref!r} matches several jobs: {', '.join(j['key'] for j in found)}")

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))

    def tier_results(self, run_id: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM tier_results WHERE run_id = ? ORDER BY id", (run_id,))

    def tail_events(self, run_id: str, after_id: int = 0, limit: int = 10_000) -> list[dict[str, Any]]:
        """Events of a run newer than `after_id`, oldest first: the dashboard's live feed."""
        return self.rows(
            "SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, after_id, limit),
        )

    def controls(self, run_id: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM controls WHERE run_id = ? ORDER BY id", (run_id,))

    def integrity(self) -> str:
        return self.conn.execute("PRAGMA integrity_check").fetchone()[0]


def insert_control(
    path: Path, run_id: str, action: str, *, job_id: int | None = None, tier: str | None = None,
    origin: str = "cli",
) -> int:
    """Write a control row from any process (CLI, dashboard); the engine applies and acks it."""
    conn = open_for_writing(path)
    try:
        cursor = conn.execute(
            "INSERT INTO controls (run_id, job_id, tier, action, created_at, origin) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, job_id, tier, action, time.time(), origin),
        )
        return int(cursor.lastrowid)
    finally:
        conn.close()


def dumps(value: Any) -> str:
    return _encode(value)
