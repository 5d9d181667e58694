"""One poller per cluster: every tracked job's state from a single ``squeue`` call per tick.

Hundreds of sandboxes each asking the controller about their own job would be hundreds of RPCs a
second; here one task asks once per ``poll_s`` for all of them (``SlurmClient.query``) and the
sandboxes read the answer from memory. While the controller does not answer the poller backs off
(doubling up to ``max_backoff_s``) and says so (``state`` = ``unreachable``, with the reason); jobs keep
their last known state meanwhile, and a command that ends still writes its exit file, so nothing is
lost while the controller restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .client import ControllerUnavailable, JobInfo, SlurmClient, SlurmError

log = logging.getLogger(__name__)


@dataclass
class Tracked:
    """What the poller knows of one job."""

    job_id: str
    info: JobInfo | None = None
    seen: bool = False
    missing_polls: int = 0  # consecutive answers without this job (after it was seen, or ever)
    updated_at: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class SlurmMonitor:
    def __init__(self, client: SlurmClient, *, poll_s: float = 1.0, max_backoff_s: float = 30.0,
                 on_state: Callable[[str, str | None], None] | None = None) -> None:
        self.client = client
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.on_state = on_state
        self.jobs: dict[str, Tracked] = {}
        self.state = "up"  # up | unreachable
        self.reason: str | None = None
        self.polls = 0
        self.errors = 0
        self.last_poll_s = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def track(self, job_id: str) -> Tracked:
        tracked = self.jobs.get(job_id)
        if tracked is None:
            tracked = self.jobs[job_id] = Tracked(job_id)
        self._wake.set()
        return tracked

    def untrack(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="slurm-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=15)  # bounded: stopping never hangs a run's end
            if not done:
                log.warning("slurm monitor did not stop in 15 s")
            self._task = None

    def _set_state(self, state: str, reason: str | None) -> None:
        if (state, reason) == (self.state, self.reason):
            return
        self.state, self.reason = state, reason
        if self.on_state is not None:
            try:
                self.on_state(state, reason)
            except Exception:  # a listener's bug must not stop the poller
                log.exception("slurm monitor state listener failed")

    async def poll_once(self) -> None:
        """One ``squeue`` for every tracked job; raises ControllerUnavailable / SlurmError."""
        started = time.perf_counter()
        answer = await self.client.query()
        self.last_poll_s = time.perf_counter() - started
        self.polls += 1
        now = time.monotonic()
        for job_id, tracked in list(self.jobs.items()):
            info = answer.get(job_id)
            if info is None:
                tracked.missing_polls += 1
            else:
                tracked.info, tracked.seen, tracked.missing_polls = info, True, 0
            tracked.updated_at = now
            tracked.changed.set()

    async def _loop(self) -> None:
        delay = self.poll_s
        while True:
            if not self.jobs and self.state == "up":  # an unreachable controller is polled until it answers
                self._wake.clear()
                await self._wake.wait()
            try:
                await self.poll_once()
            except (ControllerUnavailable, SlurmError) as error:
                self.errors += 1
                self._set_state("unreachable", str(error)[:300])
                delay = min(max(delay, self.poll_s) * 2, self.max_backoff_s)
            except Exception as error:  # never let the poller die: every job depends on it
                self.errors += 1
                log.exception("slurm poll failed")
                self._set_state("unreachable", f"{type(error).__name__}: {error}"[:300])
                delay = min(max(delay, self.poll_s) * 2, self.max_backoff_s)
            else:
                self._set_state("up", None)
                delay = self.poll_s
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            if self.state == "up":
                # a job tracked just now wakes the loop early, but never into a busy loop
                await asyncio.sleep(min(self.poll_s, 0.2))
