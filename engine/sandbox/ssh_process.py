"""The process sandbox on a remote host: commands run over the host's SSH connection.

Same contract as :class:`~resenv.engine.sandbox.process.ProcessSandbox`, with these mechanics:

* **Paths: the host's own data dir.** The engine names the job's files by its own paths; on the host
  they are under the host's data dir, at the same place relative to the run's folder (the host's
  ``paths``, engine/sandbox/hostpaths.py). Everything sent is rewritten by that map: the cwd, each
  argument, each variable's value (``HOME``, ``TMPDIR`` and the templates the engine rendered), the
  engine's input on stdin (the prompt) and files put from bytes; paths that come back are mapped to
  the engine's with :meth:`engine_path`. Files the engine reads after the agent (``report.json``)
  are copied back into the engine's work dir with :meth:`sync_back`.
* **One process group per command.** Each command runs as
  ``setsid env -i sh -c '<announce pgid>; cd CWD; <export ENV read from stdin>; exec ARGV'``: the
  ``sh`` becomes a session and group leader, prints its PID (= the PGID) as a marker line on stderr
  (stripped before anything is recorded), and execs the command with exactly its declared
  environment. The variables travel on stdin, ahead of the command's own input, never on a command
  line: any user of the host can read every process's command line, and a key would show there. Timeouts, pause (SIGSTOP/SIGCONT) and
  kill signal the whole group with ``kill -SIG -PGID`` over a reserved control channel.
* **Exit codes.** The remote shell reports a command killed by signal N as 128+N; when resenv sent
  that signal (timeout, kill) the result says -N, as the local sandbox does. A lost connection is an
  infrastructure error (:class:`SandboxError`), never a result.
* **Output** is read in chunks from the channel, redacted as it streams, appended to the local
  ``<log_prefix>.stdout`` and ``.stderr`` files and split into lines for ``on_line``, exactly like the
  local sandbox. What stays on the host's disk: commands run in no namespace here, so an agent CLI's
  own state (``~/.claude``, ``CODEX_HOME``: transcripts, shell snapshots, temp files, which copy tool
  outputs and the environment) is in the host's work dir until the agent ends (Claude Code keeps no
  session transcript: ``--no-session-persistence``).
* **Files**: ``put``/``get`` of single files use SFTP; trees travel as one tar stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import shlex
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import asyncssh

from .remote import HostDown, SshConnection
from .base import ExecResult, HostSetupError, OutputLine, SandboxError, SandboxPathError
from .common import (
    LEFTOVER_GRACE_S,
    READ_CHUNK,
    ExecTimer,
    GroupRun,
    OutputSink,
    PauseClock,
    PgidHeader,
    copy_back,
    env_stream,
    exec_args,
    group_targets,
    kill_script,
    log_paths,
    mirrored_cwd,
    remote_command,
    resolve_mirrored,
    sandbox_env,
    wait_done,
)

log = logging.getLogger(__name__)


class RemoteHost(Protocol):
    """What a remote sandbox needs of its SSH host (`hosts.ssh.SshHost`): the connection, the process
    groups it must know to kill after a reconnect, and the copies it makes on the host."""

    name: str
    connection: SshConnection

    def note_group(self, pgid: int, workdir: Path) -> None: ...

    def note_orphan(self, pgid: int, workdir: Path) -> None: ...

    async def push_tree(self, src: Path, target: str) -> None: ...

    async def stage_pristine(self, path: Path) -> None: ...


@dataclass(eq=False, kw_only=True)
class _RemoteRun(GroupRun):
    proc: Any


class RemoteProcessSandbox:
    """A process sandbox whose commands run on an SSH host (see the module docstring)."""
    output_redacted = True  # its output reaches the raw files through OutputSink: redacted as it streams

    def __init__(self, host: RemoteHost, workdir: Path, base_env: Mapping[str, str] | None = None,
                 term_grace_s: float = 5.0) -> None:
        self.host = host
        self.connection: SshConnection = host.connection
        self.workdir = Path(os.path.abspath(workdir))
        self.paths = host.paths  # raises SandboxError while the host's data dir is not known
        self.host_workdir = self.paths.to_host(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)  # the engine's copy (report.json)
        self.home = self.workdir / "home"
        self.tmp = self.workdir / "tmp"
        self.base_env: dict[str, str] = dict(base_env or {})
        self.term_grace_s = term_grace_s
        self.leftover_grace_s = LEFTOVER_GRACE_S
        self._runs: set[_RemoteRun] = set()
        self._clock = PauseClock()
        self._closed = False
        self._dirs_made = False
        self._signal_tasks: set[asyncio.Task[None]] = set()
        self._signal_lock = asyncio.Lock()

    # -- environment ------------------------------------------------------------------------
    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The command's environment as the host sees it (engine paths in values rewritten)."""
        return {name: self.paths.outbound(value)
                for name, value in sandbox_env(self.home, self.tmp, self.base_env, env).items()}

    def engine_path(self, path: str) -> str:
        """The engine's path of a path on the host (the report's interpreter, a probe's answer)."""
        return self.paths.to_engine(path)

    def host_path(self, path: str | Path) -> str:
        """The host's path of an engine path."""
        return self.paths.to_host(path)

    async def _ensure_dirs(self) -> None:
        if self._dirs_made:
            return
        dirs = [self.host_path(d) for d in (self.workdir, self.home, self.tmp)]
        try:
            result = await self.connection.run(f"mkdir -p {' '.join(shlex.quote(d) for d in dirs)}", timeout=30,
                                               control=True)
        except (HostDown, asyncio.TimeoutError) as error:
            raise SandboxError(f"host {self.host.name}: {error}") from error
        if result.returncode != 0:  # the same on every try: the host's user may not create these
            why = " ".join(result.stderr.decode(errors="replace").split())[-500:]
            user = self.connection.target.user or "its user"
            fix = ("choose a data dir that this user can create on every SSH host, the same path as here"
                   " (`resenv run --data-dir DIR`): a Slurm login node's work dirs have the engine's paths"
                   if self.paths.mirrored and self.host.mirror_paths
                   else f"set `data_dir:` of host {self.host.name} to a folder this user can create")
            raise HostSetupError(
                f"host {self.host.name}: cannot create the work dir {self.host_workdir} as {user}: {why}; {fix}")
        self._dirs_made = True

    async def _control(self, command: str, *, check: bool = False, timeout: float = 30.0) -> bytes:
        try:
            result = await self.connection.run(command, timeout=timeout, control=True)
        except (HostDown, asyncio.TimeoutError) as error:
            raise SandboxError(f"host {self.host.name}: {error}") from error
        if check and result.returncode != 0:
            raise SandboxError(f"host {self.host.name}: {command[:80]!r} exited {result.returncode}: "
                               f"{result.stderr.decode(errors='replace').strip()[-500:]}")
        return result.stdout

    # -- pause clock ------------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._clock.paused

    # -- exec -------------------------------------------------------------------------------
    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, timeout_name: str = "exec", stdin: bytes | None = None,
        log_prefix: Path, on_line: Callable[[OutputLine], None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed")
        args = [self.paths.outbound(arg) for arg in exec_args(argv)]
        command = remote_command(args, self.host_path(mirrored_cwd(self.workdir, cwd)))
        stdin = env_stream(self.child_env(env)) + self.paths.outbound_bytes(stdin or b"")
        stdout_path, stderr_path = log_paths(log_prefix)
        timer = ExecTimer(self._clock, timeout_name, stdout_path, stderr_path)

        await self._clock.resumed.wait()
        if self._closed:
            raise SandboxError("sandbox is closed")
        await self._ensure_dirs()
        with open(stdout_path, "wb") as out_f, open(stderr_path, "wb") as err_f:
            try:
                async with self.connection.channel() as conn:
                    generation = self.connection.generation
                    try:
                        proc = await conn.create_process(command, encoding=None)
                    except (asyncssh.Error, OSError) as error:
                        raise SandboxError(f"host {self.host.name}: cannot start command: {error}") from error
                    run = _RemoteRun(proc=proc)
                    self._runs.add(run)
                    try:
                        code = await self._supervise(run, generation, stdin, out_f, err_f, on_line, on_start,
                                                     timeout, timer)
                        return timer.result(code, run.timed_out, run.killed)
                    finally:
                        self._runs.discard(run)
                        run.done.set()
            except HostDown as error:
                raise SandboxError(str(error)) from error

    async def _supervise(
        self, run: _RemoteRun, generation: int, stdin: bytes | None, out_f: BinaryIO, err_f: BinaryIO,
        on_line: Callable[[OutputLine], None] | None, on_start: Callable[[int], None] | None,
        timeout: float | None, timer: ExecTimer,
    ) -> int | None:
        proc = run.proc
        pumps: list[asyncio.Task[None]] = []
        watcher: asyncio.Task[None] | None = None
        closed: asyncio.Task[None] | None = None
        try:
            if stdin:
                proc.stdin.write(stdin)
            proc.stdin.write_eof()
            pumps = [
                asyncio.create_task(self._pump(run, proc.stdout, OutputSink(out_f, "stdout", on_line), None)),
                asyncio.create_task(self._pump(run, proc.stderr, OutputSink(err_f, "stderr", on_line), on_start)),
            ]
            if timeout is not None:
                watcher = asyncio.create_task(self._deadline(run, timeout, timer))
            closed = asyncio.create_task(proc.wait_closed())
            exited_at: float | None = None
            leftovers_killed = False
            while True:
                done, _ = await asyncio.wait({closed}, timeout=0.1)
                if done:
                    break
                if proc.exit_status is not None or proc.exit_signal is not None:
                    now = time.monotonic()
                    exited_at = exited_at or now
                    if not leftovers_killed and now - exited_at > self.leftover_grace_s:
                        log.info("host %s pgid %s: pipes open after exit; killing leftovers", self.host.name, run.pgid)
                        await self._signal_group(run, "KILL")
                        leftovers_killed = True
                    elif leftovers_killed and now - exited_at > self.leftover_grace_s + 2:
                        proc.close()
            await asyncio.wait(pumps, timeout=self.leftover_grace_s)
            if watcher is not None:
                if run.timed_out:
                    await watcher
                else:
                    watcher.cancel()
            if run.error is not None:
                raise run.error
            status, sig = proc.exit_status, proc.exit_signal
            if status is None and sig is None:
                if run.killed:
                    return -signal.SIGKILL
                lost = self.connection.generation != generation or not self.connection.up
                raise SandboxError(f"host {self.host.name}: connection lost while the command ran"
                                   if lost else f"host {self.host.name}: command ended without an exit status")
            if sig is not None:
                name = sig[0] if isinstance(sig, tuple) else str(sig)
                try:
                    return -int(signal.Signals[f"SIG{name}"])
                except KeyError:
                    return -1
            return run.exit_code(status)
        except asyncio.CancelledError:
            run.killed = True
            raise
        finally:
            if watcher is not None and not watcher.done():
                watcher.cancel()
            for task in pumps:
                if not task.done():
                    task.cancel()
            if closed is not None and not closed.done():
                closed.cancel()
            # Leftovers of the group never outlive the exec (the group leader may already be gone).
            if self.connection.up and run.pgid is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._signal_group(run, "KILL"))
            elif run.pgid is not None:
                self.host.note_orphan(run.pgid, self.workdir)
            with contextlib.suppress(Exception):
                proc.close()
            await asyncio.gather(*pumps, return_exceptions=True)
            if watcher is not None:
                await asyncio.gather(watcher, return_exceptions=True)

    async def _pump(self, run: _RemoteRun, reader: Any, sink: OutputSink,
                    on_start: Callable[[int], None] | None) -> None:
        header = PgidHeader() if sink.stream == "stderr" else None  # stderr starts with the PGID marker
        try:
            while True:
                try:
                    chunk = await reader.read(READ_CHUNK)
                except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
                    break
                if not chunk:
                    break
                if header is not None and not header.done:
                    pgid, chunk = header.feed(chunk)
                    if pgid is not None:
                        self._started(run, pgid, on_start)
                    if not chunk:
                        continue
                sink.write(chunk)
            if header is not None and (rest := header.leftover()):  # the marker never completed: keep what came
                sink.write(rest)
            sink.close()
        except asyncio.CancelledError:
            sink.abandon()
            raise
        except Exception as exc:
            run.fail(exc)
            self._spawn_signal([run], "KILL")
        finally:
            run.pgid_known.set()  # nobody waits for a marker that cannot come any more

    def _started(self, run: _RemoteRun, pgid: int, on_start: Callable[[int], None] | None) -> None:
        """The command announced its group: record it, and catch up on a pause or kill it missed."""
        run.pgid = pgid
        run.pgid_known.set()
        self.host.note_group(pgid, self.workdir)
        if self._clock.paused:
            self._spawn_signal([run], "STOP")
        if self._closed or run.killed:
            self._spawn_signal([run], "KILL")
        if on_start is not None:
            on_start(pgid)

    async def _deadline(self, run: _RemoteRun, timeout: float, timer: ExecTimer) -> None:
        await timer.expire(timeout)
        if run.proc.exit_status is not None or run.proc.exit_signal is not None:
            return
        run.timed_out = True
        await self._terminate(run)

    async def _terminate(self, run: _RemoteRun) -> None:
        await self._signal_group(run, "TERM", also_cont=True)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.proc.wait_closed(), self.term_grace_s)
        await self._signal_group(run, "KILL")

    async def _signal_group(self, run: _RemoteRun, sig: str, also_cont: bool = False) -> None:
        await self._signal_groups([run], sig, also_cont)

    async def _signal_groups(self, runs: list[_RemoteRun], sig: str, also_cont: bool = False) -> None:
        groups = await group_targets(runs, sig)
        if not groups:
            return
        async with self._signal_lock:  # STOP/CONT arrive in the order pause()/resume() were called
            try:
                await self.connection.run(kill_script(groups, sig, also_cont), timeout=15, control=True)
            except (HostDown, asyncio.TimeoutError) as error:
                log.warning("host %s: cannot send SIG%s to %s: %s", self.host.name, sig, groups, error)

    def _spawn_signal(self, runs: list[_RemoteRun], sig: str) -> None:
        task = asyncio.get_running_loop().create_task(self._signal_groups(runs, sig))
        self._signal_tasks.add(task)
        task.add_done_callback(self._signal_tasks.discard)

    # -- control ----------------------------------------------------------------------------
    def pause(self) -> None:
        if not self._clock.pause():
            return
        runs = [run for run in self._runs if run.pgid is not None]
        if runs:
            self._spawn_signal(runs, "STOP")

    def resume(self) -> None:
        if not self._clock.paused:
            return
        runs = [run for run in self._runs if run.pgid is not None]
        if runs:
            self._spawn_signal(runs, "CONT")
        self._clock.resume()

    async def kill(self) -> None:
        runs = list(self._runs)
        for run in runs:
            run.killed = True
        if not runs:
            return
        if self.connection.up:
            await self._signal_groups(runs, "KILL")
        else:
            for run in runs:
                with contextlib.suppress(Exception):
                    run.proc.close()
        await wait_done(runs)

    async def close(self) -> None:
        self._closed = True
        await self.kill()
        self.resume()
        if self._signal_tasks:
            await asyncio.wait(list(self._signal_tasks), timeout=5)

    # -- files ------------------------------------------------------------------------------
    def resolve(self, rel_path: str) -> str:
        """The remote path of `rel_path` (lexically inside the work dir; symlinks are checked on use)."""
        return resolve_mirrored(Path(self.host_workdir), rel_path)

    async def _check_real(self, sftp: asyncssh.SFTPClient, path: str, rel_path: str) -> None:
        """Refuse a path whose existing part resolves (through symlinks) outside the work dir."""
        probe = path
        while True:
            try:
                real = await sftp.realpath(probe)
                break
            except asyncssh.SFTPError:
                parent = posixpath.dirname(probe)
                if parent == probe:
                    return
                probe = parent
        root = await sftp.realpath(self.host_workdir)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise SandboxPathError(f"path escapes the sandbox: {rel_path!r} -> {real}")

    async def put(self, rel_path: str, data: bytes | Path) -> Path:
        target = self.resolve(rel_path)
        await self._ensure_dirs()
        try:
            sftp = await self.connection.sftp()
            await self._check_real(sftp, target, rel_path)
            if isinstance(data, (bytes, bytearray, memoryview)):
                await sftp.makedirs(posixpath.dirname(target), exist_ok=True)
                if await sftp.isdir(target):
                    raise SandboxError(f"destination is a directory: {rel_path!r}")
                async with sftp.open(target, "wb") as handle:
                    await handle.write(self.paths.outbound_bytes(bytes(data)))
                return Path(target)
        except (HostDown, asyncssh.Error) as error:
            raise SandboxError(f"host {self.host.name}: put {rel_path!r}: {error}") from error
        src = Path(data)
        if not src.exists():
            raise FileNotFoundError(f"no such file or directory: {src}")
        await self.host.push_tree(src, target)
        return Path(target)

    async def get(self, rel_path: str, max_bytes: int = 50 * 2**20) -> bytes:
        target = self.resolve(rel_path)
        try:
            sftp = await self.connection.sftp()
            await self._check_real(sftp, target, rel_path)
            try:
                attrs = await sftp.stat(target)
            except asyncssh.SFTPNoSuchFile:
                raise FileNotFoundError(f"no such file in sandbox: {rel_path!r}") from None
            if attrs.type != asyncssh.FILEXFER_TYPE_REGULAR:
                raise SandboxError(f"not a regular file: {rel_path!r}")
            if (attrs.size or 0) > max_bytes:
                raise SandboxError(f"{rel_path!r} is {attrs.size} bytes, more than max_bytes={max_bytes}")
            async with sftp.open(target, "rb") as handle:
                data = await handle.read(max_bytes + 1)
        except (HostDown, asyncssh.Error) as error:
            raise SandboxError(f"host {self.host.name}: get {rel_path!r}: {error}") from error
        if len(data) > max_bytes:
            raise SandboxError(f"{rel_path!r} is more than max_bytes={max_bytes}")
        return data

    # -- optional hooks the lifecycle and tiers look for: the host cannot see the engine's files ---------
    async def stage_pristine(self, path: Path) -> None:
        """Make the run's pristine bare repo exist on the host at its mapped path (once per host)."""
        await self.host.stage_pristine(Path(path))

    async def sync_back(self, rel_path: str, max_bytes: int = 50 * 2**20) -> None:
        """Copy one file from the host into the engine-side mirror of the work dir (or remove it)."""
        await copy_back(self.get, self.workdir, rel_path, max_bytes)

    async def path_status(self, path: str) -> tuple[bool, bool]:
        """(exists, executable) of an engine path, asked on the host."""
        quoted = shlex.quote(self.host_path(path))
        out = await self._control(f"if test -e {quoted}; then echo e; fi; if test -x {quoted}; then echo x; fi")
        return b"e" in out, b"x" in out
