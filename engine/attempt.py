"""What an attempt's phases share, and the one view of an attempt they may use.

`lifecycle.JobAttempt` runs the phases; the phases themselves (the agent session, the integrity
steps, the tiers) need the attempt back (its sandbox, its events, its paths). They depend on the
`Attempt` protocol and the small types here, not on `lifecycle`, so the dependencies point one way:
lifecycle -> phases -> this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .agents.base import AgentAdapter, JobPaths
from .censuses import CensusCache
from .checkout import Pristine, PristineCache
from .hosts.pool import Lease
from .sandbox.base import ExecResult, OutputLine, Sandbox
from .secrets import redact_obj  # agents' secrets never reach the store
from .store.db import StoreWriter


class AttemptError(Exception):
    """The attempt cannot go on; `category` is from the failure classifier's vocabulary."""

    def __init__(self, message: str, category: str) -> None:
        super().__init__(message)
        self.category = category


@dataclass
class AttemptOutcome:
    state: str  # done | error | cancelled
    category: str | None = None
    reason: str | None = None


class EventSink:
    """The events of one attempt, numbered in the order they happen."""

    def __init__(self, writer: StoreWriter, run_id: str, job_id: int, attempt_id: int, seq: int = 0) -> None:
        self.writer = writer
        self.run_id = run_id
        self.job_id = job_id
        self.attempt_id = attempt_id
        self.seq = seq

    def emit(self, kind: str, data: dict[str, Any]) -> int | None:
        """Queue one event; returns the length of its JSON (what the output budget counts)."""
        self.seq += 1
        data = redact_obj(data)  # no-op unless an agent has secrets
        return self.writer.event(
            self.run_id, kind, data, job_id=self.job_id, attempt_id=self.attempt_id, seq=self.seq
        )


@dataclass
class RunContext:
    """What every job of a run shares."""

    writer: StoreWriter
    run_id: str
    run_dir: Path
    bench: Any
    suite: Any
    pristines: PristineCache
    agents: dict[str, AgentAdapter]
    tiers: tuple[str, ...]
    censuses: CensusCache = field(default_factory=CensusCache)  # one per (repo, commit), for the whole run


def attempt_dir(run_dir: Path, repo_id: str, agent: str, number: int) -> Path:
    return run_dir / "jobs" / f"{repo_id}--{agent}" / f"attempt-{number}"



class Attempt(Protocol):
    """What the phases of an attempt may use of it (`lifecycle.JobAttempt` is the one implementation)."""

    ctx: RunContext
    job: dict[str, Any]
    number: int
    attempt_id: int
    lease: Lease
    sink: EventSink
    sandbox: Sandbox | None
    pristine: Pristine | None
    log_prefix: str
    recorded_number: int | None
    scoring_id: int | None

    @property
    def base(self) -> Path: ...

    @property
    def paths(self) -> JobPaths: ...

    @property
    def timeouts(self) -> Any: ...

    async def run_command(
        self, phase: str, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
        stdin: bytes | None = None, timeout_name: str | None = None, cwd: Path | None = None,
        parse: Callable[[OutputLine], list[dict[str, Any]]] | None = None, log_name: str | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult: ...
