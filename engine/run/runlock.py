"""One process at a time holds a run: an engine running or resuming it, or a rescore judging it.

The holder keeps an exclusive `flock` on `<run dir>/engine.lock` for its whole life, taken without
waiting, so two processes that start at the same instant cannot both get it. The kernel releases it
when the holder's process ends however it ends (`kill -9` included), so a dead holder never blocks
`run --resume`; nothing has to notice that it died. The file also records who holds it (PID, host,
role), which is how a refused process names the holder.

The lock covers processes on this machine (and on a file system whose locks are shared, as NFS's
are). A holder on another machine sharing the store is seen through the run's heartbeat in the
store instead (`engine_alive`), checked when the run is claimed.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import time
from pathlib import Path

from ..paths import absolute
from ..runfacts import pid_exists

LOCK_NAME = "engine.lock"
HOLDER_WAIT_S = 2.0  # a holder that has just taken the lock writes who it is at once


class EngineBusy(Exception):
    """Another live process (an engine, a rescore) holds this run."""


class RunLock:
    """The held lock of one run; `release()` (or the process ending) lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, run_dir: Path, run_id: str, role: str) -> RunLock:
        """Take the run's lock for this process as `role` (`engine`, `rescore`), or raise EngineBusy
        naming the process that holds it. OSError if the run dir cannot hold a lock file."""
        run_dir = absolute(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EngineBusy(busy_message(run_id, holder(path))) from None
        except BaseException:
            os.close(fd)
            raise
        record = json.dumps({"pid": os.getpid(), "host": platform.node(), "role": role, "since": time.time()})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode() + b"\n", 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, a refused process just cannot name us
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def holder(path: Path, wait_s: float = HOLDER_WAIT_S) -> dict | None:
    """Who holds the lock at `path`, as it recorded itself; None if it has not said (yet).

    A record naming a process of this machine that is gone is a previous holder's: the new holder
    is about to overwrite it, so it is read again until `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            record = json.loads(path.read_text() or "null")
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and _alive(record):
            return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _alive(record: dict) -> bool:
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    return record.get("host") != platform.node() or pid_exists(pid)


def busy_message(run_id: str, record: dict | None) -> str:
    if record is None:
        return f"run {run_id} is held by another process (its lock is taken); try again once that ends"
    where = f"PID {record['pid']} on {record.get('host') or 'an unknown host'}"
    if record.get("role") == "rescore":
        return f"run {run_id} is being rescored by {where}"
    return f"run {run_id} is being run by engine {where}"
