"""The process sandbox: a work dir and commands on the local machine (Linux, asyncio).

It is the embedded default: no daemon. By default every command runs inside a bubblewrap namespace
(:mod:`.isolation` says what it can see): killing the namespace kills every descendant, and pause
freezes every process in it, ``setsid`` or not. ``sandbox: unsafe-process`` keeps the old thin
isolation only — a clean environment, a private HOME and TMPDIR inside the work dir, one process group
per command — in which a process that leaves its group on purpose (``setsid``, a double fork into a
new session) escapes pause and kill, and the whole machine is readable.

Output is read in fixed-size chunks (binary-safe, bounded memory), appended raw to
``<log_prefix>.stdout`` / ``<log_prefix>.stderr`` as it arrives, and split into lines for the live
``on_line`` callback.
"""

from __future__ import annotations

import asyncio
import json
import errno
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .base import ExecResult, OutputLine, SandboxError, SandboxPathError
from .isolation import Isolation, chown_new_parents, chown_tree
from .common import (
    DEFAULT_PATH,
    LEFTOVER_GRACE_S,
    READ_CHUNK,
    ExecTimer,
    OutputSink,
    PauseClock,
    RunState,
    check_rel_path,
    exec_args,
    log_paths,
    sandbox_env,
    wait_done,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_PATH", "ProcessSandbox", "kill_stale_group"]

SIGNAL_SWEEPS = 50  # at most this many scans of a namespace per signal (each finds the forks of the last)
KILL_WAIT_S = 5.0  # how long to wait for a SIGKILLed group to vanish before giving up (and logging)


def _live_processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgrp) of every live (non-zombie) process, read from /proc in one pass."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:  # a raw descriptor: this scan runs after every command, and a file object costs more than the read
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and fields[0] not in (b"Z", b"X"):
            found.append((int(name), int(fields[1]), int(fields[2])))
    return found


def _group_members(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes in a process group."""
    return [pid for pid, _, group in _live_processes() if group == pgid]


def _children_map() -> dict[int, list[int]]:
    """Each live process's children."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in _live_processes():
        children.setdefault(ppid, []).append(pid)
    return children


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``. In a pid namespace orphans are re-parented to its init, so
    the descendants of the process that made the namespace are every process in it."""
    children = _children_map()
    out: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, ()))
    return out


def _signal_namespace(bwrap_pid: int, sig: int) -> bool:
    """Signal every process of the pid namespace bubblewrap made, as one ``kill(-1)`` from inside it.

    The kernel delivers that under the task list lock, and a fork racing a pending signal is
    restarted, so a process that keeps forking and letting its parent exit cannot slip past, as it
    can past a scan of /proc. Needs root (to enter the namespace); False when it could not be sent."""
    if os.geteuid() != 0 or shutil.which("nsenter") is None:
        return False
    try:
        children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
    except OSError:
        return False
    if not children:
        return False
    name = signal.Signals(sig).name.removeprefix("SIG")
    try:
        done = subprocess.run(["nsenter", "-t", children[0], "-p", "--", "/bin/sh", "-c", f"kill -s {name} -- -1"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=5, env={"PATH": DEFAULT_PATH})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    return bool(fields) and fields[0] not in (b"Z", b"X")


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in the group.

    ``killpg(pgid, 0)`` alone is not enough: it succeeds while zombies remain, and orphaned
    grandchildren are re-parented to PID 1, which inside many containers never reaps them.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process we may not signal holds the group: it certainly exists
    try:
        return bool(_group_members(pgid))
    except OSError:
        return True  # cannot tell; be conservative


def kill_stale_group(pgid: int, workdir: Path) -> bool:
    """Kill a process group left by an engine that died, if it still runs inside `workdir`.

    The cwd check keeps a recycled PGID of some unrelated program safe from us.
    """
    root = Path(workdir).resolve()
    for pid in _group_members(pgid):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if cwd == root or root in cwd.parents:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                return False
            return True
    return False


async def _wait_namespace_gone(run: _Run) -> bool:
    """Wait until a bubblewrap command's pid namespace has ended; False when that cannot be told (no
    namespace, bubblewrap killed before it named its init, the init still there after the wait).

    bubblewrap may exit as soon as its command has, while the namespace's init is still ending it; the
    kernel ends a namespace by killing every process in it (a `setsid` daemon too, which no scan of
    the command's process group finds) and waiting for each before the init itself is gone. So the
    init's end is the namespace's end, and this waits for it, cheaply, instead of scanning /proc."""
    fd, run.status_fd = run.status_fd, None
    if fd is None:
        return False
    try:
        os.set_blocking(fd, False)
        data = b""
        try:
            while chunk := os.read(fd, 65536):
                data += chunk
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    init = _namespace_init(data)
    if init is None:
        return False
    deadline = time.monotonic() + KILL_WAIT_S
    delay = 0.001
    while _pid_alive(init):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def _namespace_init(status: bytes) -> int | None:
    """The host pid of the namespace's init, from bubblewrap's JSON status lines (None if absent)."""
    for line in status.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        pid = record.get("child-pid") if isinstance(record, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            return pid
    return None


async def _wait_group_gone(pgid: int, limit_s: float, also: tuple[int, ...] = ()) -> bool:
    """Poll until the group and the processes ``also`` have no live process or ``limit_s`` passes;
    True if all are gone."""
    deadline = time.monotonic() + limit_s
    delay = 0.01
    while _group_alive(pgid) or any(_pid_alive(pid) for pid in also):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


@dataclass(eq=False, kw_only=True)
class _Run(RunState):
    """Book-keeping for one running local process group."""

    proc: asyncio.subprocess.Process
    pgid: int
    namespaced: bool = False  # runs in its own pid namespace (bubblewrap)
    members: set[int] = field(default_factory=set)  # namespace processes seen when signalling
    status_fd: int | None = None  # bubblewrap's --json-status-fd, read end: it names the namespace's init

    def gone_too(self) -> tuple[int, ...]:
        """Processes that must be gone, beside the group, before the exec returns."""
        return tuple(self.members)


def _create_logs(stdout_path: Path, stderr_path: Path) -> tuple[BinaryIO, BinaryIO]:
    """A command's two raw log files, created empty (both or neither)."""
    out_f = open(stdout_path, "wb")
    try:
        return out_f, open(stderr_path, "wb")
    except BaseException:
        out_f.close()
        raise


class ProcessSandbox:
    """Runs each command in its own session/process group with a clean environment under ``workdir``.

    Semantics worth knowing:

    * ``exec`` while paused waits for ``resume()`` before starting the command (that wait counts in
      ``duration_s``, not in ``active_s``).
    * When the main process exits, its process group is SIGKILLed once the pipes are drained: a
      command's processes never outlive its ``exec`` (leftovers could not be paused or killed).
    * A command that cannot be started (not found / not executable) is a result, not an exception,
      as in a shell or ``docker exec``: returncode 127 / 126 and the reason on stderr.
    * ``on_line`` must not raise; if it does, the command is killed and the exception propagates.
    """
    output_redacted = True  # its output reaches the raw files through OutputSink: redacted as it streams

    def __init__(
        self,
        workdir: Path,
        base_env: Mapping[str, str] | None = None,
        term_grace_s: float = 5.0,
        isolation: Isolation | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.home = self.workdir / "home"
        self.tmp = self.workdir / "tmp"
        self.isolation = isolation
        self._owner = isolation.owner() if isolation is not None else None
        self._staged: list[Path] = []  # read-only paths every exec sees until concealed (the pristine)
        self._staged_rw: list[Path] = []  # package caches every exec may write until concealed
        self._in_memory: list[Path] = []  # folders on a tmpfs of each exec's namespace (keep_in_memory)
        for d in (self.workdir, self.home, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
            if self._owner is not None:
                os.lchown(d, *self._owner)
        self.base_env: dict[str, str] = dict(base_env or {})
        self.term_grace_s = term_grace_s
        self.leftover_grace_s = LEFTOVER_GRACE_S
        self._runs: set[_Run] = set()
        self._clock = PauseClock()
        self._closed = False

    @property
    def isolated(self) -> bool:
        """Commands run in a bubblewrap namespace (see :mod:`.isolation`)."""
        return self.isolation is not None

    def reveal(self, paths: Sequence[Path], writable: Sequence[Path] = ()) -> None:
        """Let the next commands read these host paths (and write the package caches ``writable``),
        until :meth:`conceal`."""
        self._staged.extend(Path(path) for path in paths)
        self._staged_rw.extend(Path(path) for path in writable)

    def conceal(self) -> None:
        """Out of sight again: what :meth:`reveal` showed."""
        self._staged.clear()
        self._staged_rw.clear()

    def keep_in_memory(self, folders: Sequence[Path]) -> list[Path]:
        """Give the next commands each of these folders (inside the work dir) as an empty tmpfs of their
        own namespace, over whatever the disk holds there, until called again (``[]``: none): what a
        command writes there is never on disk and is gone when it ends. For an agent CLI's private
        state, which copies its tool outputs and its environment. Returns the folders it keeps in
        memory: none without isolation (``unsafe-process`` has no namespace to mount them in)."""
        kept = []
        for folder in folders:
            folder = Path(folder)
            if folder == self.workdir or not folder.is_relative_to(self.workdir):
                raise SandboxPathError(f"not inside the work dir: {folder}")
            kept.append(folder)
        self._in_memory = kept if self.isolation is not None else []
        for folder in self._in_memory:  # the mount point, the sandbox's own (empty: the tmpfs covers it)
            folder.mkdir(parents=True, exist_ok=True)
            self._give(folder, tree=False)
        return list(self._in_memory)

    def live_path(self, path: Path) -> Path:
        """Where the engine reads ``path`` (a path inside the sandbox) while a command runs.

        A path inside a folder kept in memory (`keep_in_memory`) exists only in the namespace of the
        command: it is read through ``/proc/<pid>/root`` of a process in that namespace (the engine
        may: it is root or the namespace's own user); when no command runs, or for any other path,
        ``path`` itself."""
        path = Path(path)
        if not any(path == folder or path.is_relative_to(folder) for folder in self._in_memory):
            return path
        for run in list(self._runs):
            if not run.namespaced:
                continue
            try:
                children = Path(f"/proc/{run.pgid}/task/{run.pgid}/children").read_text().split()
            except OSError:
                continue
            if children:
                return Path(f"/proc/{children[0]}/root") / path.relative_to("/")
        return path

    async def stage_pristine(self, path: Path) -> None:
        """Let the checkout's commands read the pristine copy, and no later command."""
        self.reveal([path])

    def unstage_pristine(self) -> None:
        """The checkout is done: the pristine copy is out of sight again."""
        self.conceal()

    # -- environment -------------------------------------------------------------------------------

    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The complete environment of a command; nothing is inherited from ``os.environ``."""
        return sandbox_env(self.home, self.tmp, self.base_env, env)

    def _exec_cwd(self, cwd: Path | None) -> Path:
        if cwd is None:
            path = self.workdir
        else:
            path = Path(cwd)
            if not path.is_absolute():
                path = self.workdir / path
        if not path.is_dir():
            raise SandboxError(f"cwd is not a directory: {path}")
        return path

    # -- pause clock -------------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self._clock.paused

    # -- exec --------------------------------------------------------------------------------------

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
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult:
        """Run ``argv`` to completion (or timeout/kill); see the class docstring for the rules."""
        if self._closed:
            raise SandboxError("sandbox is closed")
        args = exec_args(argv)
        run_cwd = self._exec_cwd(cwd)
        child_env = self.child_env(env)
        if self.isolation is not None:
            args, child_env = self._isolated_args(args, run_cwd, child_env)
        stdout_path, stderr_path = log_paths(log_prefix)
        timer = ExecTimer(self._clock, timeout_name, stdout_path, stderr_path)

        await self._clock.resumed.wait()  # an exec issued while paused starts on resume
        if self._closed:
            raise SandboxError("sandbox is closed")

        # Creating two files waits on the file system's journal (a millisecond each here): in a thread.
        out_f, err_f = await asyncio.to_thread(_create_logs, stdout_path, stderr_path)
        with out_f, err_f:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            in_r, in_w = os.pipe() if stdin is not None else (None, None)
            status_r, status_w = os.pipe() if self.isolation is not None else (None, None)
            if status_w is not None:  # bubblewrap tells the host pid of its namespace's init there
                args = [args[0], "--json-status-fd", str(status_w), *args[1:]]
            spawn_error: OSError | None = None
            try:
                proc = await asyncio.create_subprocess_exec(
                    *args,
                    pass_fds=(status_w,) if status_w is not None else (),
                    stdin=in_r if in_r is not None else subprocess.DEVNULL,
                    stdout=out_w,
                    stderr=err_w,
                    env=child_env,
                    cwd=run_cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                spawn_error = exc
            except BaseException:
                for fd in (out_r, err_r, in_w, status_r):
                    if fd is not None:
                        os.close(fd)
                raise
            finally:
                # The child has its copies; ours must go or EOF would never come.
                for fd in (out_w, err_w, in_r, status_w):
                    if fd is not None:
                        os.close(fd)
            if spawn_error is not None:
                for fd in (out_r, err_r, in_w, status_r):
                    if fd is not None:
                        os.close(fd)
                rc = self._spawn_failure_code(spawn_error)
                msg = f"resenv: cannot execute {args[0]!r}: {spawn_error.strerror or spawn_error}"
                err_f.write(msg.encode() + b"\n")
                if on_line is not None:
                    on_line(OutputLine("stderr", 1, msg, len(msg.encode()), False))
                return timer.result(rc, False, False)

            # start_new_session: the leader's pid is the pgid
            run = _Run(proc=proc, pgid=proc.pid, namespaced=self.isolation is not None, status_fd=status_r)
            if on_start is not None:
                on_start(run.pgid)
            self._runs.add(run)
            if self._closed:  # closed (killed) while we were spawning
                run.killed = True
                self._signal(run, signal.SIGKILL)
            elif self._clock.paused:  # paused while we were spawning
                self._signal(run, signal.SIGSTOP)
            try:
                return await self._supervise(
                    run, out_r, err_r, in_w, stdin, out_f, err_f, on_line, timeout, timer
                )
            finally:
                self._runs.discard(run)
                run.done.set()

    def _isolated_args(self, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The command wrapped in its namespace, and its environment with caches its uid can write."""
        assert self.isolation is not None
        if shutil.which(self.isolation.bwrap) is None:
            raise SandboxError("bubblewrap is not installed (apt-get install bubblewrap), "
                               "or choose `sandbox: unsafe-process` for this host")
        env = dict(env)
        caches = []
        for key, value in env.items():
            if key.endswith("_CACHE_DIR") and Path(value) in self._staged_rw:
                caches.append(self.isolation.cache_for(key, Path(value)))
                env[key] = str(caches[-1])
        return self.isolation.argv(args, workdir=self.workdir, cwd=cwd, read_only=self._staged,
                                   writable=caches, in_memory=self._in_memory), env

    @staticmethod
    def _spawn_failure_code(exc: OSError) -> int:
        if exc.errno == errno.ENOENT:
            return 127
        if exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EPERM, errno.EISDIR, errno.ENOTDIR):
            return 126
        raise SandboxError(f"cannot start process: {exc}") from exc

    async def _supervise(
        self,
        run: _Run,
        out_r: int,
        err_r: int,
        in_w: int | None,
        stdin: bytes | None,
        out_f: BinaryIO,
        err_f: BinaryIO,
        on_line: Callable[[OutputLine], None] | None,
        timeout: float | None,
        timer: ExecTimer,
    ) -> ExecResult:
        """Pump output, enforce the deadline, reap; always leaves no process of the group behind."""
        loop = asyncio.get_running_loop()
        read_fds = [out_r, err_r]
        transports: list[asyncio.BaseTransport] = []
        stdin_transport: asyncio.WriteTransport | None = None
        pumps: list[asyncio.Task[None]] = []
        watcher: asyncio.Task[None] | None = None
        try:
            readers = []
            for fd in (out_r, err_r):
                reader = asyncio.StreamReader(limit=READ_CHUNK)
                pipe = open(fd, "rb", buffering=0)
                read_fds.remove(fd)  # now owned by the file object / transport
                transport, _ = await loop.connect_read_pipe(
                    lambda r=reader: asyncio.StreamReaderProtocol(r), pipe
                )
                transports.append(transport)
                readers.append(reader)
            if in_w is not None:
                pipe_w = open(in_w, "wb", buffering=0)
                in_w = None
                stdin_transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe_w)
                # Buffered by the transport and written as the child reads; close() sends EOF
                # once everything is written. A child that never reads cannot block us.
                stdin_transport.write(stdin or b"")
                stdin_transport.close()

            pumps = [
                asyncio.create_task(self._pump(run, readers[0], OutputSink(out_f, "stdout", on_line))),
                asyncio.create_task(self._pump(run, readers[1], OutputSink(err_f, "stderr", on_line))),
            ]
            if timeout is not None:
                watcher = asyncio.create_task(self._deadline(run, timeout, timer))

            await run.proc.wait()
            if watcher is not None:
                if run.timed_out:
                    await watcher  # finish the TERM -> grace -> KILL escalation for the group
                else:
                    watcher.cancel()

            # Drain what is left in the pipes. A leftover of the group that keeps a pipe open
            # (a daemonized child) must not hang the job: kill the group; if a holder escaped
            # the group, stop reading.
            _, pending = await asyncio.wait(pumps, timeout=self.leftover_grace_s)
            if pending:
                log.info("pgid %d: pipes still open %.1fs after exit; killing leftovers",
                         run.pgid, self.leftover_grace_s)
                self._signal(run, signal.SIGKILL)
                _, pending = await asyncio.wait(pending, timeout=1.0)
                for task in pending:
                    task.cancel()
            if run.error is not None:
                raise run.error
            return timer.result(run.proc.returncode, run.timed_out, run.killed)
        except BaseException:
            # Cancelled (or a pump failed): the group must not outlive us.
            if run.error is None:
                run.killed = True
            self._signal(run, signal.SIGKILL)
            raise
        finally:
            # Synchronous part first, so that a second cancellation cannot skip it.
            self._signal(run, signal.SIGKILL)  # leftovers of the group never outlive the exec
            if watcher is not None and not watcher.done():
                watcher.cancel()
            for task in pumps:
                if not task.done():
                    task.cancel()
            for t in transports:
                t.close()
            if stdin_transport is not None and stdin_transport.get_write_buffer_size() > 0:
                stdin_transport.abort()
            for fd in read_fds:
                os.close(fd)
            if in_w is not None:
                os.close(in_w)
            # Asynchronous part: reap, let cancelled tasks finish, confirm the group is gone.
            await asyncio.gather(*pumps, return_exceptions=True)
            if watcher is not None:
                await asyncio.gather(watcher, return_exceptions=True)
            if run.proc.returncode is None:
                try:
                    await asyncio.wait_for(run.proc.wait(), KILL_WAIT_S)
                except asyncio.TimeoutError:
                    log.warning("pid %d did not exit after SIGKILL", run.pgid)
            if not await _wait_namespace_gone(run) and not await _wait_group_gone(run.pgid, KILL_WAIT_S,
                                                                                 run.gone_too()):
                log.warning("process group %d still has live processes after SIGKILL", run.pgid)

    async def _pump(self, run: _Run, reader: asyncio.StreamReader, sink: OutputSink) -> None:
        """Copy one pipe to its raw file and feed lines to ``on_line`` until EOF."""
        try:
            while True:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    break
                sink.write(chunk)
            sink.close()
        except asyncio.CancelledError:
            sink.abandon()
            raise
        except Exception as exc:  # on_line raised, or the disk is full: stop the command
            run.fail(exc)
            self._signal(run, signal.SIGKILL)

    async def _deadline(self, run: _Run, timeout: float, timer: ExecTimer) -> None:
        """Fire after ``timeout`` seconds of active (unpaused) time, then terminate the group."""
        await timer.expire(timeout)
        if run.proc.returncode is not None:
            return  # it finished on its own at the same moment
        run.timed_out = True
        await self._terminate(run)

    async def _terminate(self, run: _Run) -> None:
        """SIGTERM the group, give it ``term_grace_s`` to exit, then SIGKILL whatever is left."""
        self._signal(run, signal.SIGTERM)
        self._signal(run, signal.SIGCONT)  # a stopped process would not act on SIGTERM
        await _wait_group_gone(run.pgid, self.term_grace_s, run.gone_too())
        self._signal(run, signal.SIGKILL)
        await _wait_group_gone(run.pgid, KILL_WAIT_S, run.gone_too())

    @staticmethod
    def _signal(run: _Run, sig: int) -> None:
        """Signal the command's group and, in a namespace, every process in it (``setsid`` or not)."""
        if run.namespaced and sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGTERM):
            _signal_namespace(run.pgid, sig)  # every process of it at once, forks included
        if run.namespaced:
            # Then sweep until a scan finds nobody new: a process that keeps forking and letting its parent
            # exit has a new pid by the time one scan's signal lands.
            signalled: set[int] = set()
            # A reaped leader has no children left (they went to a reaper): no /proc scan can find any.
            reaped = run.proc.returncode is not None
            for _ in range(SIGNAL_SWEEPS):
                found = set() if reaped else set(_descendants(run.pgid))
                found |= {pid for pid in run.members if _pid_alive(pid)}
                fresh = found - signalled
                if not fresh:
                    break
                for pid in fresh:
                    try:
                        os.kill(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
                signalled |= fresh
            run.members = {pid for pid in signalled if _pid_alive(pid)}
        try:
            os.killpg(run.pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            log.warning("not permitted to send signal %d to process group %d", sig, run.pgid)

    # -- control -----------------------------------------------------------------------------------

    def pause(self) -> None:
        """SIGSTOP every running command's process group; the timeout clocks stop too."""
        if not self._clock.pause():
            return
        for run in list(self._runs):
            self._signal(run, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT what pause() stopped; deadlines continue where they were."""
        if not self._clock.paused:
            return
        for run in list(self._runs):
            self._signal(run, signal.SIGCONT)
        self._clock.resume()

    async def kill(self) -> None:
        """SIGKILL every running command's group and wait until their execs have returned."""
        runs = list(self._runs)
        for run in runs:
            run.killed = True
            self._signal(run, signal.SIGKILL)
        await wait_done(runs)

    async def close(self) -> None:
        """Kill anything running and refuse new execs. The work dir itself is kept."""
        self._closed = True
        await self.kill()
        self.resume()  # wakes execs waiting for resume so they can see the sandbox is closed

    # -- files -------------------------------------------------------------------------------------

    def resolve(self, rel_path: str) -> Path:
        """Map a relative path to a real path inside the work dir, refusing any escape."""
        check_rel_path(rel_path)
        target = (self.workdir / rel_path).resolve()  # follows symlinks, then applies ".."
        if target != self.workdir and not target.is_relative_to(self.workdir):
            raise SandboxPathError(f"path escapes the sandbox: {rel_path!r} -> {target}")
        return target

    async def put(self, rel_path: str, data: bytes | Path) -> Path:
        """Write ``data`` (bytes) to the file ``rel_path``, or copy a host file/tree to it."""
        target = self.resolve(rel_path)
        if isinstance(data, (bytes, bytearray, memoryview)):
            if target == self.workdir or target.is_dir():
                raise SandboxError(f"destination is a directory: {rel_path!r}")
            await asyncio.to_thread(_write_bytes, target, bytes(data))
            self._give(target, tree=False)
            return target
        src = Path(data)
        if src.is_dir():
            # symlinks=True: copy links as links, never pull in what they point at.
            await asyncio.to_thread(shutil.copytree, src, target, symlinks=True, dirs_exist_ok=True)
        elif src.is_file():
            if target.is_dir():
                raise SandboxError(f"destination is a directory: {rel_path!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.copy2, src, target)
        else:
            raise FileNotFoundError(f"no such file or directory: {src}")
        await asyncio.to_thread(self._give, target, tree=src.is_dir())  # a copied tree is chowned file by file
        return target

    def _give(self, target: Path, *, tree: bool) -> None:
        """What the engine wrote belongs to the sandbox's uid, so its commands can change it."""
        if self._owner is None:
            return
        if tree:
            chown_tree(target, self._owner)
        chown_new_parents(target, self.workdir, self._owner)

    async def get(self, rel_path: str, max_bytes: int = 50 * 2**20) -> bytes:
        """Read a regular file inside the work dir, at most ``max_bytes`` (else SandboxError)."""
        target = self.resolve(rel_path)
        return await asyncio.to_thread(_read_capped, target, rel_path, max_bytes)


def _write_bytes(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _read_capped(target: Path, rel_path: str, max_bytes: int) -> bytes:
    if not target.exists():
        raise FileNotFoundError(f"no such file in sandbox: {rel_path!r}")
    if not target.is_file():
        raise SandboxError(f"not a regular file: {rel_path!r}")
    size = target.stat().st_size
    if size > max_bytes:
        raise SandboxError(f"{rel_path!r} is {size} bytes, more than max_bytes={max_bytes}")
    with open(target, "rb") as f:
        data = f.read(max_bytes + 1)  # the file may have grown since stat
    if len(data) > max_bytes:
        raise SandboxError(f"{rel_path!r} is more than max_bytes={max_bytes}")
    return data
