"""The exec book-keeping the process, remote-process and docker sandboxes share.

Each sandbox kind starts, signals and reaps commands its own way; what they must all do the same way
lives here, so that a result, an environment or a timeout means the same thing on every kind: the
clean environment, the pause clock that timeouts measure, the per-exec result, the pump that copies
output to the raw files and ``on_line``, and (for the kinds that run ``remote_command``) the PGID
marker line and group signalling.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shlex
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..secrets import registry
from .base import ExecResult, OutputLine, SandboxError, SandboxPathError
from .lines import LineSplitter, RawLine

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_CHUNK = 64 * 1024
LEFTOVER_GRACE_S = 2.0  # how long a leftover may hold a pipe open after the main process exited
KILL_RESULT_WAIT_S = 10.0  # how long kill() waits for the killed execs to return
PGID_WAIT_S = 10.0  # how long a signal waits for a remote command to announce its PGID

MARK = b"\x1eRESENV-PGID "
_INNER = 'printf "\\036RESENV-PGID %s\\n" "$$" >&2; cd "$1" || exit 125; shift; exec env -i "$@"'
_MARK_MAX = 256  # a first stderr line longer than this is output, not a marker


# -- environment and arguments -------------------------------------------------------------------

def sandbox_env(home: Path, tmp: Path, *layers: Mapping[str, str] | None) -> dict[str, str]:
    """A command's complete environment: the clean defaults, then each layer in order.

    Nothing comes from ``os.environ``, so API keys in the engine's environment never reach a command.
    """
    out = {"PATH": DEFAULT_PATH, "HOME": str(home), "TMPDIR": str(tmp),
           "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    for layer in layers:
        if layer:
            out.update(layer)
    return out


def exec_args(argv: Sequence[str | os.PathLike[str]]) -> list[str]:
    """``argv`` as strings; an empty command is a caller's bug."""
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ValueError("argv is empty")
    return args


def mirrored_cwd(workdir: Path, cwd: Path | None) -> str:
    """The cwd of a command on a host or in a container whose work dir mirrors ``workdir``."""
    if cwd is None:
        return str(workdir)
    return str(Path(cwd) if Path(cwd).is_absolute() else workdir / cwd)


def log_paths(log_prefix: Path) -> tuple[Path, Path]:
    """``<log_prefix>.stdout`` and ``.stderr``, their folder made."""
    stdout_path, stderr_path = Path(f"{log_prefix}.stdout"), Path(f"{log_prefix}.stderr")
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    return stdout_path, stderr_path


def remote_command(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str:
    """The shell line that runs argv in its own session/group with exactly `env`, in `cwd`.

    Its ``sh`` prints its PID (= the PGID) as the first stderr line (see :class:`PgidHeader`).
    """
    words = ["setsid", "sh", "-c", _INNER, "resenv", cwd]
    words += [f"{key}={value}" for key, value in env.items()]
    words += list(argv)
    return " ".join(shlex.quote(word) for word in words) + "; exit $?"


# -- paths -------------------------------------------------------------------------------------

def check_rel_path(rel_path: str) -> None:
    """Refuse an empty, NUL-containing or absolute path given to put/get."""
    if not rel_path or "\x00" in rel_path:
        raise SandboxPathError(f"invalid path: {rel_path!r}")
    if os.path.isabs(rel_path):
        raise SandboxPathError(f"absolute path not allowed: {rel_path!r}")


def resolve_mirrored(workdir: Path, rel_path: str) -> str:
    """The remote path of `rel_path`, lexically inside the work dir (symlinks are checked on use)."""
    check_rel_path(rel_path)
    root = str(workdir)
    target = posixpath.normpath(posixpath.join(root, rel_path))
    if target != root and not target.startswith(root + "/"):
        raise SandboxPathError(f"path escapes the sandbox: {rel_path!r}")
    return target


async def copy_back(get: Callable[[str, int], Awaitable[bytes]], workdir: Path, rel_path: str,
                    max_bytes: int) -> None:
    """Copy one file into the engine-side mirror of the work dir, or remove the stale copy.

    A file that is not regular or too big is left out: the loader judges what is (not) there.
    """
    local = workdir / rel_path
    try:
        data = await get(rel_path, max_bytes)
    except FileNotFoundError:
        if local.is_file() or local.is_symlink():
            local.unlink()
        return
    except SandboxError:
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data)


# -- pause clock and results -----------------------------------------------------------------------

class PauseClock:
    """A sandbox's paused time: timeouts and ``active_s`` count only the time it was not paused."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.total = 0.0
        self.resumed = asyncio.Event()
        self.resumed.set()

    @property
    def paused(self) -> bool:
        return self.since is not None

    def pause(self) -> bool:
        """Stop the clock; False if it was already stopped (the caller has nothing to freeze)."""
        if self.since is not None:
            return False
        self.since = time.monotonic()
        self.resumed.clear()
        return True

    def resume(self) -> bool:
        """Restart the clock; False if it was running (the caller has nothing to thaw)."""
        if self.since is None:
            return False
        self.total += time.monotonic() - self.since
        self.since = None
        self.resumed.set()
        return True

    def paused_time(self, now: float | None = None) -> float:
        """Total seconds spent paused up to ``now`` (a monotonic counter)."""
        total = self.total
        if self.since is not None:
            total += (time.monotonic() if now is None else now) - self.since
        return total


class ExecTimer:
    """One exec's clocks, started when exec is called (a wait for resume counts as paused)."""

    def __init__(self, clock: PauseClock, timeout_name: str, stdout_path: Path, stderr_path: Path) -> None:
        self.clock = clock
        self.timeout_name = timeout_name
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.started = time.monotonic()
        self.paused_at_start = clock.paused_time()

    def active(self, now: float | None = None) -> float:
        """Seconds this exec has run unpaused."""
        now = time.monotonic() if now is None else now
        return (now - self.started) - (self.clock.paused_time(now) - self.paused_at_start)

    async def expire(self, timeout: float) -> None:
        """Return once ``timeout`` seconds of active time have passed."""
        while True:
            if not self.clock.resumed.is_set():
                await self.clock.resumed.wait()
                continue
            remaining = timeout - self.active()
            if remaining <= 0:
                return
            await asyncio.sleep(remaining)

    def result(self, returncode: int | None, timed_out: bool, killed: bool) -> ExecResult:
        now = time.monotonic()
        return ExecResult(
            returncode=returncode,
            timed_out=timed_out,
            timeout_name=self.timeout_name if timed_out else None,
            killed=killed,
            duration_s=now - self.started,
            active_s=max(0.0, self.active(now)),
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
        )


# -- runs --------------------------------------------------------------------------------------

@dataclass(eq=False)
class RunState:
    """Book-keeping for one running exec, whatever runs it."""

    timed_out: bool = False
    killed: bool = False
    error: BaseException | None = None  # first failure in a pump (on_line raised, disk full...)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def fail(self, error: BaseException) -> None:
        """Keep the first failure; the exec raises it once the command is stopped."""
        if self.error is None:
            self.error = error


@dataclass(eq=False)
class GroupRun(RunState):
    """A run of ``remote_command``, whose process group id arrives as a marker line."""

    pgid: int | None = None
    pgid_known: asyncio.Event = field(default_factory=asyncio.Event)
    signalled: bool = False  # resenv sent a terminating signal

    def exit_code(self, status: int) -> int:
        """A shell's 128+N for a signal resenv sent is -N, as the local sandbox reports it."""
        if self.signalled and 128 < status <= 128 + 64:
            return -(status - 128)
        return status


async def wait_done(runs: Iterable[RunState]) -> None:
    """Wait (bounded) until killed execs have returned their results."""
    waits = [asyncio.create_task(run.done.wait()) for run in runs]
    if not waits:
        return
    _, pending = await asyncio.wait(waits, timeout=KILL_RESULT_WAIT_S)
    for task in pending:
        task.cancel()


async def group_targets(runs: Iterable[GroupRun], sig: str, wait_pgid: bool = True) -> list[int]:
    """The PGIDs to signal (waiting a while for ones not announced yet); marks terminating signals."""
    groups = []
    for run in runs:
        if run.pgid is None and wait_pgid:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.pgid_known.wait(), PGID_WAIT_S)
        if run.pgid is not None:
            groups.append(run.pgid)
            if sig in ("TERM", "KILL"):
                run.signalled = True
    return groups


def kill_script(groups: Sequence[int], sig: str, also_cont: bool = False) -> str:
    """A shell line that sends SIG to each group (then CONT, so a stopped group acts on it)."""
    targets = " ".join(f"-{pgid}" for pgid in groups)
    command = f"kill -{sig} {targets} 2>/dev/null"
    if also_cont:
        command += f"; kill -CONT {targets} 2>/dev/null"
    return command + "; true"


# -- output ------------------------------------------------------------------------------------

class OutputSink:
    """One stream of one exec: bytes to its raw file (flushed, so readers see them live), lines to ``on_line``.

    Every chunk goes through a `secrets.StreamRedactor` of the process-wide registry first, so
    neither the file nor a line ever holds a registered secret, not even for a moment: a secret
    becomes ``[REDACTED:NAME]`` before its first byte is written, however it was split across reads.
    The redactor holds back only a tail that could still become a secret (the file lags the command
    by those few bytes, never by a line); `close` lets it out. The file and the line splitter see the
    same redacted bytes, so a line's byte offset in the file (`AgentSession._full_line`) stays right.
    """

    def __init__(self, f: BinaryIO, stream: str, on_line: Callable[[OutputLine], None] | None) -> None:
        self.f = f
        self.stream = stream
        self.on_line = on_line
        self.splitter = LineSplitter() if on_line is not None else None
        self.line_no = 0
        self.redactor = registry().stream()

    def write(self, chunk: bytes) -> None:
        self._out(self.redactor.feed(chunk))

    def _out(self, chunk: bytes) -> None:
        """Redacted bytes to the file, then to the line splitter."""
        if not chunk:
            return
        self.f.write(chunk)
        self.f.flush()
        if self.splitter is not None:
            self._deliver(self.splitter.feed(chunk))

    def close(self) -> None:
        """End of stream: write what the redactor held back, deliver the last unterminated line."""
        self._out(self.redactor.flush())
        if self.splitter is not None:
            self._deliver(self.splitter.flush())

    def abandon(self) -> None:
        """The stream was cut off (its reader cancelled): what the redactor held back still goes to the
        file, without a line event (it is no secret: a secret is complete or not there)."""
        rest = self.redactor.flush()
        if rest:
            with contextlib.suppress(OSError, ValueError):  # a full disk or a closed file: nothing to save
                self.f.write(rest)
                self.f.flush()

    def _deliver(self, lines: list[RawLine]) -> None:
        assert self.on_line is not None
        for raw in lines:
            self.line_no += 1
            self.on_line(OutputLine(self.stream, self.line_no, raw.text(), raw.nbytes, raw.truncated))


class PgidHeader:
    """Strips the PGID marker line that ``remote_command`` prints first on stderr."""

    def __init__(self) -> None:
        self.pending = b""
        self.done = False

    def feed(self, chunk: bytes) -> tuple[int | None, bytes]:
        """(the announced PGID if this chunk completed the marker, the output to record)."""
        if self.done:
            return None, chunk
        self.pending += chunk
        newline = self.pending.find(b"\n")
        if newline < 0 and len(self.pending) < _MARK_MAX:
            return None, b""
        self.done = True
        first, rest = self.pending[: newline + 1], self.pending[newline + 1 :]
        self.pending = b""
        if not first.startswith(MARK):
            return None, first + rest
        try:
            return int(first[len(MARK):].strip()), rest
        except ValueError:
            return None, rest

    def leftover(self) -> bytes:
        """At end of stream: what came of a marker line that never completed (it is output)."""
        return b"" if self.done else self.pending


class BackgroundTasks:
    """Fire-and-forget work of a sandbox (pause, signals): referenced until done, since asyncio keeps
    only weak references to tasks, and awaited (bounded) when the sandbox closes."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
