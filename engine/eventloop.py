"""The engine's event loop: `asyncio.run`, with child processes watched through pidfds.

Python 3.11's default child watcher starts a thread per child process and waits for that thread to
start: at hundreds of sandboxed commands per run, that wait and the threads' contention for the GIL
were a fifth of the engine's own time per command. Python 3.12 and later watch children through
pidfds by default; on 3.11 this module asks for the same, for a loop that runs on the main thread
(the child watcher is process-wide state, and the policy re-attaches it only to the main thread's
loop). Anywhere else, plain `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _pidfd_watcher_applies() -> bool:
    return (sys.version_info < (3, 12) and hasattr(os, "pidfd_open")
            and threading.current_thread() is threading.main_thread())


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop, as `asyncio.run` does."""
    if not _pidfd_watcher_applies():
        return asyncio.run(main)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            os.close(os.pidfd_open(os.getpid()))
        except OSError:  # a kernel without pidfds (before 5.3)
            return asyncio.run(main)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    try:
        return asyncio.run(main)  # asyncio.run attaches the main thread's watcher to its loop
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(None)  # the default watcher again, made anew when next asked for
