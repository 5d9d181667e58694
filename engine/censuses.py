"""The run's import censuses and declared compiled modules: each computed once per (repo, commit) for
the whole run, off the engine's event loop, and shared by every attempt, tier retry and rescore.

Both are read from the run's read-only pristine copy (``probes/census.py`` says what they are), so
one answer holds for every job of a repo: the agent's edits never reach it.

Where each runs, and why:

- the census parses every ``.py`` file of the commit with :mod:`ast` (pure Python, seconds on a repo
  of thousands of files). In a thread it would hold the GIL the event loop needs: the loop would only
  get it back at each switch interval, and every callback that gives it up again (a pipe read, a
  store write) would wait another interval. So it runs in a process pool of this run (spawned, not
  forked: the engine has threads, and a forked child could inherit one of their locks held), and only
  its result, plain frozen dataclasses, comes back.
- the compiled modules need a few small build files read with git: waiting on git, not computing, so
  a thread is enough.

Concurrent requests for one key await the same computation. A failure reaches every caller waiting
on it, raised as the computation raised it (a worker that died raises ``BrokenProcessPool``, a
``RuntimeError``); it is not kept, so a later request computes again.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from ..probes import buildinfo
from ..probes.census import Census, files_at_commit, import_census
from .checkout import Pristine

T = TypeVar("T")
Key = tuple[str, str]  # (repo id, commit)
WORKERS = 2  # a run rarely needs more than a couple of censuses at once; the machine has other work
ORPHAN_CHECK_S = 1.0


def census_of(pristine: Pristine) -> Census:
    """The import census of the pinned commit (run in a worker process)."""
    return import_census(files_at_commit(pristine.path, pristine.commit))


def compiled_modules_of(pristine: Pristine) -> frozenset[str]:
    """The compiled modules the pinned commit declares (run in a thread: it mostly waits on git)."""
    return buildinfo.module_names(files_at_commit(pristine.path, pristine.commit, select=buildinfo.wanted))


def _worker_started(engine_pid: int) -> None:
    """A census worker ignores Ctrl-C (the engine handles it and stops the run; a worker killed by the
    terminal's SIGINT would only break the pool under the jobs still being judged), and ends itself
    once the engine is gone: a pool's worker holds both ends of its own queue's pipe, so an engine
    killed outright would otherwise leave it waiting for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def end_when_orphaned() -> None:
        while os.getppid() == engine_pid:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(0)

    threading.Thread(target=end_when_orphaned, name="orphan-check", daemon=True).start()


class CensusCache:
    """One census and one set of compiled modules per (repo, commit) for a run."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._censuses: dict[Key, asyncio.Future[Census]] = {}
        self._compiled: dict[Key, asyncio.Future[frozenset[str]]] = {}

    async def census(self, repo_id: str, pristine: Pristine) -> tuple[Census, float | None]:
        """The census of `pristine`'s commit, computed in the run's process pool at most once at a time,
        and the seconds this request took to compute it (None: another request computed it)."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        census, computed = await self._once(self._censuses, (repo_id, pristine.commit),
                                            lambda: loop.run_in_executor(self._executor(), census_of, pristine))
        return census, time.monotonic() - started if computed else None

    async def compiled_modules(self, repo_id: str, pristine: Pristine) -> frozenset[str]:
        """The compiled modules `pristine`'s commit declares, read in a thread at most once at a time."""
        modules, _ = await self._once(self._compiled, (repo_id, pristine.commit),
                                      lambda: asyncio.to_thread(compiled_modules_of, pristine))
        return modules

    @staticmethod
    async def _once(cache: dict[Key, asyncio.Future[T]], key: Key,
                    start: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The cached answer for `key`, or the one computation under way, or a new one; and whether
        this request started it. A waiter that is cancelled does not cancel the computation others
        wait on (it is shielded)."""
        future = cache.get(key)
        computed = future is None
        if future is None:
            future = asyncio.ensure_future(start())
            cache[key] = future

            def forget_failure(done: asyncio.Future[T]) -> None:
                if (done.cancelled() or done.exception() is not None) and cache.get(key) is done:
                    del cache[key]

            future.add_done_callback(forget_failure)
        return await asyncio.shield(future), computed

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_started, initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        """End the pool's workers (the run is over); a later request starts a new pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
