"""What every agent adapter provides: a command for a job, and a parser from its lines to events."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..sandbox.base import OutputLine


@dataclass(frozen=True)
class JobPaths:
    """The paths and ids a job's templates may name (see `spec.TEMPLATE_FIELDS`)."""

    run_id: str
    job_key: str
    workdir: Path
    repo: Path
    env: Path
    report: Path
    gpus: tuple[int, ...] = ()
    python: str = ""
    budget_s: float | None = None  # the agent's wall-clock budget (the agent phase's deadline), if known
    remote: bool = False  # the sandbox runs on another machine or in a container: engine paths are not there

    def template_values(self) -> dict[str, str]:
        return {
            "run": self.run_id,
            "job": self.job_key,
            "workdir": str(self.workdir),
            "repo": str(self.repo),
            "env": str(self.env),
            "report": str(self.report),
            "gpus": ",".join(str(gpu) for gpu in self.gpus),
            "ngpus": str(len(self.gpus)),
            "python": self.python,
        }


@dataclass(frozen=True)
class AgentCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # put into the sandbox (paths relative to its work dir) first


class AgentAdapter(Protocol):
    name: str

    def command(self, paths: JobPaths) -> AgentCommand: ...

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        """Normalized transcript events for one output line; unknown shapes are kept, never dropped."""
        ...
