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
import errno
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ..paths import blocking_file
from ..runref import find_run
from .schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 10_000
MAX_BATCH = 10_000
MAX_BACKLOG_BYTES = 32 * 2**20  # queued event JSON over this: the writer is busy


class StoreError(Exception):
    """The DB file cannot be used (newer schema, not a resenv DB, unreadable)."""


class StoreFailure(StoreError):
    """The store, or the disk under a run, cannot be used any more: full, read-only, corrupt, locked
    past the busy timeout, not a database at all. A run stops on it; its message is one line that
    says what failed and where."""


# SQLite's primary result codes that mean the store itself cannot be used, as opposed to one bad
# statement (a constraint, a typo in SQL) that fails alone.
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY = 3, 5, 6, 7, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL, SQLITE_NOTADB = 10, 11, 13, 14, 15, 26
FATAL_CODES = {SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY, SQLITE_IOERR,
               SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL, SQLITE_NOTADB}
# The same, from the message, for an error that carries no code.
_CODE_OF_MESSAGE = {
    "database or disk is full": SQLITE_FULL, "database is locked": SQLITE_BUSY,
    "database table is locked": SQLITE_LOCKED, "attempt to write a readonly database": SQLITE_READONLY,
    "disk i/o error": SQLITE_IOERR, "database disk image is malformed": SQLITE_CORRUPT,
    "file is not a database": SQLITE_NOTADB, "unable to open database file": SQLITE_CANTOPEN,
}
# What an OSError says about the disk under the engine's own files (the store, raw logs, work dirs).
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}


def sqlite_code(error: sqlite3.Error) -> int | None:
    """The primary SQLite result code of an error, from its code or else its message."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF
    message = str(error).lower()
    return next((value for text, value in _CODE_OF_MESSAGE.items() if text in message), None)


def store_failure(error: BaseException, path: Path) -> StoreFailure | None:
    """What `error`, raised while using the store at `path`, means for the store as a whole: a
    StoreFailure with a one-line message, or None for an error of one statement only."""
    if isinstance(error, StoreFailure):
        return error
    if isinstance(error, sqlite3.Error):
        code = sqlite_code(error)
        return StoreFailure(_describe(code, _one_line(error), path)) if code in FATAL_CODES else None
    if isinstance(error, OSError):
        where = error.filename or path
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreFailure(f"cannot write {where}: the disk is full ({error.strerror})")
        if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StoreFailure(f"cannot write {where}: it is read-only ({error.strerror})")
        return StoreFailure(f"cannot use {where}: {error.strerror or error}")
    return None


def disk_failure(error: BaseException, where: Path) -> StoreFailure | None:
    """A StoreFailure when `error` (or what caused it) is the engine's own disk failing under `where`
    (a raw log that hits a full disk, say): the run must stop, not the job fail. None otherwise."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:
            place = seen.filename or f"under {where}"
            return StoreFailure(f"cannot write {place}: {seen.strerror or os.strerror(seen.errno)}")
        seen = seen.__cause__
    return None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _writable(path: Path) -> bool:
    """Whether the DB file (if it exists) and its directory can be written by this process."""
    try:
        if path.exists() and not os.access(path, os.W_OK):
            return False
        return os.access(path.parent, os.W_OK)
    except OSError:
        return False


def _disk_full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


def _directory_message(path: Path) -> str:
    return (f"the store {path} is a directory, not a database file (--db and RESENV_DB name the file itself, "
            f"such as {path / 'resenv.db'})")


def _describe(code: int | None, detail: str, path: Path) -> str:
    if path.is_dir():
        return _directory_message(path)
    if code == SQLITE_FULL or (code == SQLITE_IOERR and _disk_full(path)):
        return f"cannot write the store {path}: the disk is full ({detail})"
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return (f"the store {path} stayed locked by another process for more than {BUSY_TIMEOUT_MS / 1000:g} s "
                f"({detail})")
    if code == SQLITE_CORRUPT:
        return f"the store {path} is corrupt ({detail}): restore it from a backup, or use another --db"
    if code == SQLITE_NOTADB:
        return f"{path} is not a database ({detail}): point --db at a resenv store or at a new file"
    if code == SQLITE_READONLY or (code in (SQLITE_PERM, SQLITE_CANTOPEN, SQLITE_IOERR) and not _writable(path)):
        return f"cannot write the store {path}: it is read-only ({detail}); make the file and its directory writable"
    if code == SQLITE_CANTOPEN:
        return f"cannot open the store {path} ({detail})"
    return f"the store {path} failed ({detail})"


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection with the pragmas every resenv connection needs; a store that cannot be
    opened is a StoreError (StoreFailure) with a one-line message, never a raw sqlite3 error."""
    if path.is_dir():
        raise StoreFailure(_directory_message(path))
    if readonly:
        if not path.exists():
            raise StoreError(f"no resenv database at {path}")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            why = f"{blocker} is a file" if (blocker := blocking_file(path.parent)) else error.strerror or error
            raise StoreFailure(f"cannot create the store's directory {path.parent}: {why}") from error
    conn: sqlite3.Connection | None = None
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not readonly and _foreign(conn):
            conn.close()
            raise StoreError(f"{path} is not a resenv database (it holds another program's tables): "
                             "point --db at a resenv store or at a new file")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as error:
        if conn is not None:
            conn.close()
        raise (store_failure(error, path) or StoreFailure(_describe(None, _one_line(error), path))) from error
    return conn


def _foreign(conn: sqlite3.Connection) -> bool:
    """Whether the database is some other program's: tables, but no resenv schema version. Checked
    before the first write (even the WAL pragma persists in the file), so that resenv never adds its
    tables to a database it does not own."""
    if conn.execute("PRAGMA user_version").fetchone()[0]:
        return False
    return conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None


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
        rollback_quietly(conn)
        raise
    return SCHEMA_VERSION


def rollback_quietly(conn: sqlite3.Connection) -> None:
    """Roll back what is open, if anything is: SQLite ends a transaction by itself on some errors
    (a full disk), and a failing ROLLBACK must not hide the error that caused it."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


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
    try:
        migrate(conn)
    except sqlite3.Error as error:
        conn.close()
        failure = store_failure(error, path)
        if failure is None:
            raise
        raise failure from error
    except BaseException:
        conn.close()
        raise
    return conn


@dataclass
class _Write:
    sql: str
    params: Sequence[Any] | None
    future: asyncio.Future | None = None


@dataclass
class _Barrier:
    future: asyncio.Future


@dataclass
class _Stop:
    """The last item a closing writer applies."""


# json.dumps with keyword arguments builds a new encoder per call; events are the hot path.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode

EVENT_SQL = (
    "INSERT OR IGNORE INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass
class StoreWriter:
    """The single writer: every change to the DB goes through its queue, in order.

    A batch that cannot be committed because the store itself failed (the disk is full, the file
    became read-only or corrupt, another process held the lock past the busy timeout) stops the
    writer for good: `failure` says why, `on_failure` is called once, every waiting `fetch`/`flush`
    raises it, later ones raise it at once, and later events and updates are dropped (counted in
    `dropped`), so nobody waits on a write that will never happen."""

    path: Path
    on_failure: Callable[[StoreFailure], None] | None = None
    conn: sqlite3.Connection = field(init=False)
    queue: asyncio.Queue = field(init=False)
    task: asyncio.Task | None = field(init=False, default=None)
    events_written: int = field(init=False, default=0)
    transactions: int = field(init=False, default=0)
    failure: StoreFailure | None = field(init=False, default=None)
    dropped: int = field(init=False, default=0)
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
        """Queue one event; never blocks, never awaits and never raises (called from output callbacks).
        Returns the length of its JSON, which is what it adds to the backlog (0 once the store failed)."""
        if self.failure is not None:
            self.dropped += 1
            return 0
        payload = _encode(data)
        self.queue.put_nowait((run_id, job_id, attempt_id, seq, ts or time.time(), kind, payload))
        self.backlog_bytes += len(payload)
        return len(payload)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Queue a write whose result nobody waits for (state updates, heartbeats)."""
        if self.failure is not None:
            self.dropped += 1
            return
        self.queue.put_nowait(_Write(sql, params))

    async def fetch(self, sql: str, params: Sequence[Any] | None = None) -> int:
        """Queue a write and wait for it; returns lastrowid (for inserts that need the new id)."""
        if self.failure is not None:
            raise self.failure
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
        """Wait until everything queued so far is committed; raises `failure` if the store failed."""
        if self.failure is not None:
            raise self.failure
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Barrier(future))
        await future

    async def close(self) -> None:
        """Commit what is queued and close; never raises for a failed store (see `failure`)."""
        if self.task is not None:
            if not self.task.done():
                self.queue.put_nowait(_Stop())
                try:
                    await asyncio.shield(self.task)
                except asyncio.CancelledError:
                    self.task.cancel()
                    await asyncio.gather(self.task, return_exceptions=True)
                    raise
            self.task = None
        self.conn.close()

    # -- the writer loop ----------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            batch = [await self.queue.get()]
            while len(batch) < MAX_BATCH and not isinstance(batch[-1], _Stop):
                try:
                    batch.append(self.queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            try:
                results = await asyncio.to_thread(self._apply, batch)
            except Exception as error:  # the store failed: say so, release every waiter, stop
                self._fail(error, batch)
                return
            finally:
                self.backlog_bytes -= sum(len(item[6]) for item in batch if isinstance(item, tuple))
            for item, result in zip(batch, results):
                future = getattr(item, "future", None)
                if future is not None and not future.done():
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
            if isinstance(batch[-1], _Stop):
                return

    def _fail(self, error: Exception, batch: list[Any]) -> None:
        failure = store_failure(error, self.path) or StoreFailure(
            f"the store {self.path} failed: {type(error).__name__}: {_one_line(error)}")
        failure.__cause__ = error
        self.failure = failure
        while True:  # nothing queued will be written: drop it, and fail whoever waits on it
            try:
                batch.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        for item in batch:
            future = getattr(item, "future", None)
            if future is not None and not future.done():
                future.set_exception(failure)
            elif isinstance(item, tuple | _Write):
                self.dropped += 1
        if self.on_failure is not None:
            self.on_failure(failure)

    def _apply(self, batch: list[Any]) -> list[Any]:
        """Apply a batch in one transaction; consecutive events go in one executemany.

        A statement that fails alone (a constraint) fails only its own write; an error that means
        the store cannot be written raises, and the whole batch is rolled back."""
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
                        if sqlite_code(error) in FATAL_CODES:
                            raise
                        results[index] = error
            if pending:
                self._write_events(pending)
            self.conn.execute("COMMIT")
        except BaseException:
            rollback_quietly(self.conn)
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
        try:
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as error:
            self.conn.close()
            raise (store_failure(error, path) or StoreError(f"cannot read {path}: {_one_line(error)}")) from error
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

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        try:
            return [dict(row) for row in self.conn.execute(sql, params)]
        except sqlite3.Error as error:
            failure = store_failure(error, self.path)
            if failure is None:
                raise
            raise failure from error

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


MARK_TIMEOUT_S = 2.0


def mark_interrupted(path: Path, run_id: str, reason: str) -> str | None:
    """Record that a run stopped, on a connection of its own (the run's writer has failed): the run
    becomes `interrupted` with no live engine. None once done, else why the store refused."""
    now = time.time()
    try:
        conn = sqlite3.connect(path, timeout=MARK_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE runs SET state = 'interrupted', finished_at = ?, heartbeat_at = NULL WHERE id = ?",
                         (now, run_id))
            conn.execute(EVENT_SQL, (run_id, None, None, None, now, "run_state",
                                     _encode({"state": "interrupted", "reason": reason})))
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as error:
        return _one_line(error)
    return None


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
    except sqlite3.Error as error:
        failure = store_failure(error, path)
        if failure is None:
            raise
        raise failure from error
    finally:
        conn.close()


def dumps(value: Any) -> str:
    return _encode(value)
