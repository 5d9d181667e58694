"""The sandbox contract shared by every sandbox kind (process now, docker later).

A job talks to its sandbox only through :class:`Sandbox`, so the job lifecycle, agents and probes do
not care whether commands run as plain process groups or inside a container.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


class SandboxError(Exception):
    """An infrastructure problem with the sandbox itself (not a command's own failure)."""


class HostSetupError(SandboxError):
    """The host cannot run jobs as it is set up, and trying again will not change that: its user may
    not create the work dirs, a tool it needs is missing. The message says the cause and the fix; the
    job fails at once (category ``host_setup``) and the host takes no more jobs."""


class SandboxPathError(SandboxError):
    """A path given to put/get is absolute or escapes the sandbox's work dir (also via symlinks)."""


@dataclass(frozen=True)
class OutputLine:
    """One line of a command's output, delivered live to ``on_line`` while the raw bytes go to disk."""

    stream: str  # "stdout" | "stderr"
    line_no: int  # 1-based, per stream, per exec
    text: str  # decoded with errors="replace", at most MAX_LINE_BYTES bytes of the line
    nbytes: int  # the full raw length of the line in bytes (without the newline)
    truncated: bool  # text holds only a prefix of the line


@dataclass(frozen=True)
class ExecResult:
    """How one command ended; the complete output is in the raw files, never only in memory."""

    returncode: int | None  # exit status; negative = killed by that signal (asyncio convention)
    timed_out: bool
    timeout_name: str | None  # the name passed to exec when its deadline fired, else None
    killed: bool  # killed by kill()/close()/cancellation, not by the timeout
    duration_s: float  # wall time, paused time included
    active_s: float  # wall time minus time spent paused (what the timeout measures)
    stdout_path: Path
    stderr_path: Path

    @property
    def ok(self) -> bool:
        """The command ran to completion on its own and exited 0."""
        return self.returncode == 0 and not self.timed_out and not self.killed


@runtime_checkable
class Sandbox(Protocol):
    """What every sandbox kind provides. Paths in put/get are relative to ``workdir``."""

    workdir: Path

    async def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float | None = None,
        timeout_name: str = "exec",
        stdin: bytes | None = None,
        log_prefix: Path,
        on_line: Callable[[OutputLine], None] | None = None,
        on_start: Callable[[int], None] | None = None,  # gets the process group id once started
    ) -> ExecResult:
        """Run ``argv``; stream output to ``<log_prefix>.stdout|.stderr`` and to ``on_line``."""
        ...

    async def put(self, rel_path: str, data: bytes | Path) -> Path:
        """Write bytes to a file, or copy a host file or tree, into the sandbox; return its path."""
        ...

    async def get(self, rel_path: str, max_bytes: int = 50 * 2**20) -> bytes:
        """Read a file from the sandbox; refuses escapes (SandboxPathError) and big files (SandboxError)."""
        ...

    def pause(self) -> None:
        """Freeze every running command; paused time does not count toward timeouts."""
        ...

    def resume(self) -> None:
        """Thaw what pause() froze."""
        ...

    async def kill(self) -> None:
        """Kill every running command (their results say killed=True)."""
        ...

    async def close(self) -> None:
        """Kill anything still running and refuse further execs."""
        ...


def is_remote(sandbox: object) -> bool:
    """Whether the sandbox's files live on another machine or in a container (it can sync them back)."""
    return getattr(sandbox, "sync_back", None) is not None


def host_path(sandbox: object, path: str | Path) -> str:
    """An engine path as the sandbox's commands see it (an SSH host keeps the run under its own data
    dir); the same path where the sandbox has no map of its own."""
    mapped = getattr(sandbox, "host_path", None)
    return mapped(path) if mapped is not None else str(path)


def engine_path(sandbox: object, path: str) -> str:
    """A path the sandbox's commands named, as the engine names it (the inverse of `host_path`)."""
    mapped = getattr(sandbox, "engine_path", None)
    return mapped(path) if mapped is not None else path


def shares_engine_view(sandbox: object) -> bool:
    """Whether the sandbox's files are the engine's own and its commands see what the engine sees (the
    unisolated process sandbox): then the engine may read and scan them in place. An isolated,
    remote or container sandbox is asked through its own commands instead, so nothing an agent left
    is opened by the engine's process and a path means what it means inside the sandbox."""
    return not is_remote(sandbox) and not getattr(sandbox, "isolated", False)


def engine_sees_work_dir(sandbox: object) -> bool:
    """Whether the sandbox's work dir is this machine's folder at the path the engine names (every
    local process sandbox, isolated or not). Only a tree no agent has touched yet (the fresh
    checkout) may be read in place on this ground alone; after the agent, `shares_engine_view`
    decides, since an isolated agent's tree is hostile input to the engine's process."""
    return not is_remote(sandbox)
