"""The sandbox contract on a Slurm cluster: one Slurm job per command that needs the cluster.

Why one job per command and not one per resenv job: an allocation holding a job's GPUs through an
agent phase of hours idles them nearly all that time, and a cluster's queue is the place to wait for
GPUs, not an allocation. So the agent's job asks for ``agent_gpus`` (0 by default), the C2 probe for
the job's GPUs, C3 for one and C4 for its entrypoint's count, each with exactly the ``--gres`` it needs
(the count is the number of GPU ids in the command's ``CUDA_VISIBLE_DEVICES``; the ids themselves are
replaced inside the job by the ones Slurm granted). Quick bookkeeping (``checkout`` git commands, an
agent CLI's ``--version``) runs on the submit side instead, where the shared work dir is too: queueing
three ``git`` commands would cost minutes on a busy cluster for nothing.

Mechanics (see also engine/hosts/slurm/script.py):

* **Files** (``put``/``get``/``sync_back``/``path_status``/the pristine repo) go through the submit
  side's own sandbox: a :class:`ProcessSandbox` when the engine runs on a login node, the SSH
  :class:`RemoteProcessSandbox` when it reaches one over SSH. Paths mirror the engine's.
* **Output** is appended by the job to the raw log paths and tailed from there into ``on_line``
  (and, over SSH, into the engine's own copy) while the job runs.
* **State** comes from the host's one poller (engine/hosts/slurm/monitor.py); every change of a command's
  job (submitted, pending with its reason, running on a node, suspended) is an event ``slurm`` of the
  attempt, which the dashboard shows. How the command ended comes from its exit status file; a job
  that ended without one is judged by its Slurm state (engine/hosts/slurm/states.py).
* **Secrets** (what remains on disk; see engine/secrets.py). Over SSH the engine's own copy of the
  output is redacted as it streams, like every sandbox's; the cluster's files keep the raw bytes. On
  a file system shared with the engine the job appends its stdout/stderr to the engine's raw log
  paths itself (`script.py`): the tail into ``on_line`` is redacted as it streams, so no event holds a
  key, but the raw files hold what the command printed, a printed key included, until the command
  ends (the lifecycle's ``redact_files``), and the dashboard's Raw log shows it meanwhile. (Closing
  that would need the job to write into its spool and the engine to keep the only copy under the log
  path.) In both modes ``cmd.sh`` (mode 0700, in the command's spool ``<log>.slurm/``) holds the
  agent's environment, key included, from submission on and is not removed; and the agent CLIs'
  state (``~/.claude``, ``CODEX_HOME``) is on the cluster's disk under the work dir until the agent
  ends, when it is masked: no tmpfs is mounted there.
* **Time**: ``active_s`` and resenv's timeouts count from the moment the job runs, never its time in
  the queue (``queued_s`` tells the job lifecycle how long its commands waited, so phase timeouts
  skip it too); pause → ``scontrol uhold`` (still queued) or ``scontrol suspend`` (running; where the
  site lets only admins suspend, ``scancel --signal=STOP --full``), resume reverses it; kill →
  ``scancel``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ...sandbox.base import ExecResult, OutputLine, SandboxError
from ...sandbox.common import (
    READ_CHUNK, BackgroundTasks, OutputSink, PauseClock, RunState, exec_args, log_paths, mirrored_cwd, wait_done,
)
from .client import ControllerUnavailable, JobInfo, SlurmClient, SlurmError
from .files import SharedFiles
from .monitor import SlurmMonitor
from .script import (CMD, EXIT, STARTED, STDIN, TIMED_OUT, JobFiles, Resources, batch_script, command_file,
                     sbatch_options)
from .states import outcome_of, phase_of

log = logging.getLogger(__name__)

LOGIN_COMMANDS = frozenset({"checkout", "version"})  # timeout names of commands run on the submit side
EXIT_FILE_GRACE_S = 3.0  # a job Slurm calls finished may still be flushing its exit file (NFS)
MISSING_POLLS = 3  # answers without the job before asking scontrol/sacct about it
RESUSPEND_AFTER_S = 1.0  # between resuming a job and suspending it again


class SubmitHost(Protocol):
    """What a Slurm sandbox needs of its host (`slurm.host.SlurmHost`): the cluster's client and
    monitor, the resources of a job and how to submit one."""

    name: str
    client: SlurmClient
    monitor: SlurmMonitor
    tail_s: float
    agent_gpus: int | None

    def resources(self, gpus: int) -> Resources: ...

    async def submit(self, script: str, options: list[str]) -> str: ...


class _NullFile:
    """The local-mode copy target: the job already wrote these bytes to the very same file."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


class Tail:
    """Follows one output file of a running job: new bytes to ``on_line`` (and to a local copy)."""

    def __init__(self, files: SharedFiles, path: Path, stream: str, on_line: Callable[[OutputLine], None] | None,
                 copy: BinaryIO | None) -> None:
        self.files = files
        self.path = path
        self.offset = 0
        self.copy = copy
        self.sink = OutputSink(copy if copy is not None else _NullFile(), stream, on_line)  # type: ignore[arg-type]

    async def pump(self) -> None:
        while True:
            data = await self.files.read(self.path, self.offset, READ_CHUNK)
            if not data:
                return
            self.offset += len(data)
            self.sink.write(data)
            if len(data) < READ_CHUNK:
                return

    def append(self, data: bytes) -> None:
        """A line of resenv's own (how Slurm ended the job) after the job's output."""
        if self.copy is None:
            with open(self.path, "ab") as handle:
                handle.write(data)
            self.offset += len(data)
        self.sink.write(data)

    def close(self) -> None:
        self.sink.close()


@dataclass(eq=False)
class _SlurmRun(RunState):
    files: JobFiles | None = None
    log_name: str = ""
    gpus: int = 0
    job_id: str | None = None
    state: str = "SUBMITTING"
    reason: str = ""
    nodes: str = ""
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # monotonic: when it was first seen running
    paused_at_start: float = 0.0
    held: str | None = None  # how pause() stopped it: hold | suspend | signal
    confirmed: str = ""  # what the controller said of it after the pause (the control's ack)
    suspended_unlaunched: bool = False  # suspended before its command's process existed (see _suspend_run)
    cancelled: bool = False  # resenv ran scancel on it
    finished_seen: float | None = None
    node_started: float | None = None  # epoch seconds on the node (the started marker)
    node_ended: float | None = None  # epoch seconds on the node (the exit file)


class SlurmSandbox:
    """See the module docstring."""

    def __init__(self, host: SubmitHost, workdir: Path, *, attempt: Any = None, term_grace_s: float = 5.0) -> None:
        self.host = host
        self.login = host.login_sandbox(workdir)
        self.workdir = self.login.workdir
        self.files: SharedFiles = host.files
        self.term_grace_s = term_grace_s
        self.sink = getattr(attempt, "sink", None)
        ctx = getattr(attempt, "ctx", None)
        self.job_name = host.job_name(getattr(ctx, "run_id", None))
        self._clock = PauseClock()
        self._runs: set[_SlurmRun] = set()
        self._closed = False
        self._queued_done = 0.0
        self._lock = asyncio.Lock()
        self._background = BackgroundTasks()
        self._pausing: asyncio.Task[Any] | None = None  # the last pause's holds and suspends
        self.submitted = 0
        # Over SSH the shared files are the login node's: the hooks the lifecycle and tiers use for
        # remote sandboxes (stage the pristine repo, copy report.json back, stat a path) are its.
        # Without a login node the shared file system is this machine's, as for a local sandbox.
        for hook in ("stage_pristine", "sync_back", "path_status"):
            if (method := getattr(self.login, hook, None)) is not None:
                setattr(self, hook, method)

    # -- what the lifecycle and the tiers ask of every sandbox ------------------------------------------
    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return self.login.child_env(env)

    async def put(self, rel_path: str, data: bytes | Path) -> Path:
        return await self.login.put(rel_path, data)

    async def get(self, rel_path: str, max_bytes: int = 50 * 2**20) -> bytes:
        return await self.login.get(rel_path, max_bytes)


    @property
    def paused(self) -> bool:
        return self._clock.paused

    def queued_s(self) -> float:
        """Seconds this sandbox's commands have waited to start (queue, controller outages), so far."""
        now = time.monotonic()
        waiting = sum(now - run.submitted_at for run in self._runs if run.started_at is None and not run.done.is_set())
        return self._queued_done + waiting

    # -- exec ----------------------------------------------------------------------------------------
    def gpus_for(self, env: Mapping[str, str] | None, timeout_name: str) -> int:
        """GPUs a command's job asks for: the agent's from the host's spec, else its CUDA_VISIBLE_DEVICES."""
        if timeout_name == "agent" and self.host.agent_gpus is not None:
            return self.host.agent_gpus
        visible = (env or {}).get("CUDA_VISIBLE_DEVICES", "")
        return len([part for part in visible.split(",") if part.strip()])

    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, timeout_name: str = "exec", stdin: bytes | None = None,
        log_prefix: Path, on_line: Callable[[OutputLine], None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed")
        if timeout_name in LOGIN_COMMANDS:
            return await self.login.exec(argv, env=env, cwd=cwd, timeout=timeout, timeout_name=timeout_name,
                                         stdin=stdin, log_prefix=log_prefix, on_line=on_line, on_start=on_start)
        args = exec_args(argv)
        gpus = self.gpus_for(env, timeout_name)
        child_env = self.child_env(env)
        if timeout_name == "agent" and gpus == 0:
            child_env["CUDA_VISIBLE_DEVICES"] = ""  # no GPUs asked for: none visible, whatever the node has
        stdout_path, stderr_path = log_paths(log_prefix)
        files = JobFiles.for_prefix(log_prefix)
        started = time.monotonic()
        await self._clock.resumed.wait()  # an exec issued while paused starts on resume
        if self._closed:
            raise SandboxError("sandbox is closed")
        run = _SlurmRun(files=files, log_name=Path(log_prefix).name, gpus=gpus)
        self._runs.add(run)
        copies: list[BinaryIO] = []
        try:
            if (ensure := getattr(self.login, "_ensure_dirs", None)) is not None:
                await ensure()  # the remote HOME/TMPDIR the environment names
            await self.files.makedirs(files.spool)
            await self.files.write(files[CMD], command_file(args, child_env, mirrored_cwd(self.workdir, cwd),
                                                            gpus).encode(), 0o700)
            if stdin is not None:
                await self.files.write(files[STDIN], stdin)
            for path in (files.stdout, files.stderr):
                await self.files.write(path, b"", 0o644)
            if self.files.remote:
                copies = [open(stdout_path, "wb"), open(stderr_path, "wb")]
            tails = [Tail(self.files, files.stdout, "stdout", on_line, copies[0] if copies else None),
                     Tail(self.files, files.stderr, "stderr", on_line, copies[1] if copies else None)]
            script = batch_script(files, timeout_s=timeout, grace_s=self.term_grace_s, has_stdin=stdin is not None)
            options = sbatch_options(files, self.host.resources(gpus), name=self.job_name,
                                     comment=self.host.submission_token(), timeout_s=timeout, grace_s=self.term_grace_s)
            run.job_id = await self.host.submit(script, options)
            self.submitted += 1
            run.state = "SUBMITTED"
            self._emit(run, options=options)
            tracked = self.host.monitor.track(run.job_id)
            if self._clock.paused:  # paused while it was being submitted
                async with self._lock:
                    if self._clock.paused and not run.held:
                        await self._pause_run(run)
            if self._closed or run.killed:
                await self._cancel([run])
            try:
                return await self._supervise(run, tracked, tails, started, stdout_path, stderr_path, timeout_name)
            finally:
                self.host.monitor.untrack(run.job_id)
        except asyncio.CancelledError:
            run.killed = True
            if run.job_id is not None and run.state not in ("FINISHED",):
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._cancel([run]))
            raise
        finally:
            if run.started_at is None:
                self._queued_done += time.monotonic() - run.submitted_at
            self._runs.discard(run)
            run.done.set()
            for handle in copies:
                handle.close()

    async def _supervise(self, run: _SlurmRun, tracked: Any, tails: list[Tail], started: float,
                         stdout_path: Path, stderr_path: Path, timeout_name: str) -> ExecResult:
        assert run.files is not None and run.job_id is not None
        interval = self.host.tail_s
        code: int | None = None
        outcome = None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(tracked.changed.wait(), interval)
            tracked.changed.clear()
            for tail in tails:
                await tail.pump()
            if tracked.info is not None:
                self._observe(run, tracked.info)
            if run.node_started is None and (marker := await self.files.read(run.files[STARTED], 0, 512)):
                run.node_started = _first_float(marker)
                self._mark_started(run)
                if run.suspended_unlaunched:
                    self._background.spawn(self._suspend_again(run))
            text = await self.files.read(run.files[EXIT], 0, 64)
            if text is not None and text.strip():
                code = _parse_code(text)
                run.node_ended = _second_float(text)
                break
            info = tracked.info
            if tracked.missing_polls >= MISSING_POLLS:
                info = await self._ask_after(run) or info
                if info is None or phase_of(info.state) != "finished":
                    if tracked.missing_polls >= MISSING_POLLS * 5:
                        outcome = outcome_of("VANISHED")
                        break
                    continue
            if info is not None and phase_of(info.state) == "finished":
                now = time.monotonic()
                run.finished_seen = run.finished_seen or now
                if now - run.finished_seen >= EXIT_FILE_GRACE_S:
                    outcome = outcome_of(info.state, run.cancelled)
                    self._observe(run, info)
                    break
        for tail in tails:
            await tail.pump()
        timed_out = await self.files.read(run.files[TIMED_OUT], 0, 16) is not None
        if outcome is None and code is not None and code > 128 and not timed_out and not run.killed:
            # A signal nobody in resenv sent: Slurm's time limit, a preemption, a node failure, an
            # operator's scancel. The job's final state says which.
            outcome = await self._signalled_outcome(run, tracked)
        returncode: int | None = code
        name: str | None = timeout_name if timed_out else None
        if outcome is not None:
            how = "without the command's exit status" if code is None else f"(the command's status: {code})"
            line = f"resenv: slurm job {run.job_id} ended {run.state if run.state != 'FINISHED' else 'UNKNOWN'}" \
                   f" {how}: {outcome.reason}"
            if outcome.kind == "oom":
                line += "; oom-kill"
            if outcome.kind == "infra":
                for tail in tails:
                    tail.close()
                raise SandboxError(line)
            tails[1].append((line + "\n").encode())
            returncode = -(code - 128) if code is not None and 128 < code <= 192 else -9
            if outcome.kind == "timeout":
                timed_out, name = True, "slurm_time_limit"
            elif outcome.kind == "cancelled":
                run.killed = True
        elif code is not None and (timed_out or run.killed) and 128 < code <= 128 + 64:
            returncode = -(code - 128)  # the shell's 128+N for a signal resenv sent, as the local sandbox says it
        run.state = "FINISHED"
        for tail in tails:
            tail.close()
        now = time.monotonic()
        active = 0.0
        if run.started_at is not None:
            paused = self._clock.paused_time(now) - run.paused_at_start
            if run.node_started is not None and run.node_ended is not None:  # the node's own clock: exact
                active = (run.node_ended - run.node_started) - paused
            else:
                active = (now - run.started_at) - paused
        return ExecResult(returncode=returncode, timed_out=timed_out, timeout_name=name if timed_out else None,
                          killed=run.killed and not timed_out, duration_s=now - started, active_s=max(0.0, active),
                          stdout_path=stdout_path, stderr_path=stderr_path)

    async def _signalled_outcome(self, run: _SlurmRun, tracked: Any, wait_s: float = 10.0) -> Any:
        """The Slurm verdict on a command that died of a signal; None when Slurm saw a plain end."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            info = tracked.info
            if info is None or phase_of(info.state) != "finished":
                info = await self._ask_after(run) or info
            if info is not None and phase_of(info.state) == "finished":
                self._observe(run, info)
                verdict = outcome_of(info.state, run.cancelled)
                return None if verdict.kind == "result" else verdict
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(tracked.changed.wait(), 1.0)
            tracked.changed.clear()
        return None

    async def _ask_after(self, run: _SlurmRun) -> JobInfo | None:
        """A job the queue no longer lists: scontrol (still in memory), then sacct (accounting), then
        the job-completion log."""
        assert run.job_id is not None
        try:
            client = self.host.client
            return (await client.show_job(run.job_id) or await client.accounting(run.job_id)
                    or await client.completion_log(run.job_id))
        except SlurmError:
            return None

    def _mark_started(self, run: _SlurmRun) -> None:
        if run.started_at is None:
            now = time.monotonic()
            run.started_at = now
            run.paused_at_start = self._clock.paused_time(now)
            self._queued_done += now - run.submitted_at

    def _observe(self, run: _SlurmRun, info: JobInfo) -> None:
        """Record a change of the job's state (an event the dashboard shows)."""
        if (info.state, info.reason, info.nodes) == (run.state, run.reason, run.nodes):
            return
        run.state, run.reason, run.nodes = info.state, info.reason, info.nodes
        if phase_of(info.state) in ("running", "suspended"):
            self._mark_started(run)
        self._emit(run)

    def _emit(self, run: _SlurmRun, **extra: Any) -> None:
        data = {"log": run.log_name, "job_id": run.job_id, "state": run.state, "reason": run.reason or None,
                "nodes": run.nodes or None, "gpus": run.gpus, "host": self.host.name} | extra
        if self.sink is not None:
            self.sink.emit("slurm", data)

    # -- control -------------------------------------------------------------------------------------
    def pause(self) -> None:
        if not self._clock.pause():
            return
        self._pausing = self._background.spawn(
            self._each(lambda run: run.job_id is not None and not run.held, self._pause_run))

    def resume(self) -> None:
        if not self._clock.paused:
            return
        self._background.spawn(self._each(lambda run: bool(run.held), self._resume_run))
        self._clock.resume()

    async def _each(self, which: Callable[[_SlurmRun], bool], action: Callable[[_SlurmRun], Any]) -> None:
        # hold/suspend and release/resume run in the order they were asked, each on the runs as they
        # are once the previous one has finished (a resume right after a pause finds what it held)
        async with self._lock:
            for run in [run for run in self._runs if which(run)]:
                try:
                    await action(run)
                except (SlurmError, OSError) as error:
                    log.warning("slurm job %s: %s", run.job_id, error)

    async def _pause_run(self, run: _SlurmRun) -> None:
        """Hold the job while it is queued, suspend it once it runs; then ask the controller what it is.

        What the poller last saw may be stale by a poll: a job seen pending can be running by the time
        the hold arrives, and ``scontrol uhold`` accepts a running job without stopping anything. So
        the state is read again after the hold (a held job can no longer start, so that answer is
        final): running means the hold came too late, and it is released and the job suspended."""
        client, job = self.host.client, run.job_id
        assert job is not None
        if phase_of(run.state) in ("pending", "unknown") and run.started_at is None:
            if (await client.control("uhold", job)).returncode == 0:  # a user hold, whoever holds it
                info = await client.show_job(job)
                if info is None or phase_of(info.state) == "pending":
                    run.held = "hold"
                    run.confirmed = f"slurm job {job} held in the queue ({info.reason if info else 'gone'})"
                    return
                await client.control("release", job)  # it started first: the hold holds nothing
                self._observe(run, info)
        await self._suspend_run(run)

    async def _suspend_run(self, run: _SlurmRun) -> None:
        client, job = self.host.client, run.job_id
        assert job is not None and run.files is not None
        # Slurm stops the processes a job has when the suspend comes; one its batch script starts
        # after that runs on. The script writes `started` once the command's process exists.
        launched = run.node_started is not None or await self.files.read(run.files[STARTED], 0, 512) is not None
        if (await client.control("suspend", job)).returncode == 0:
            run.held = "suspend"
            run.suspended_unlaunched = not launched
            info = await client.show_job(job)
            state = info.state if info is not None else "gone"
            run.confirmed = f"slurm job {job} suspended ({state})"
            if not launched:
                run.confirmed += "; its command had not started yet and is suspended again once it has"
            return
        await client.cancel([job], signal="STOP", full=True)  # suspend is for operators on most sites
        run.held = "signal"
        run.confirmed = (f"slurm job {job}: its processes sent SIGSTOP (this cluster lets only operators "
                         "suspend jobs)")

    async def _suspend_again(self, run: _SlurmRun) -> None:
        """A job suspended before its command started has started it since, so the command may run:
        resume the job and suspend it again once its processes exist (a signal cannot reach a job Slurm
        counts as suspended: ``scancel --signal`` waits on it)."""
        async with self._lock:
            if run.held != "suspend" or not run.suspended_unlaunched or run.job_id is None:
                return
            run.suspended_unlaunched = False
            client = self.host.client
            try:
                await client.control("resume", run.job_id)
                await asyncio.sleep(RESUSPEND_AFTER_S)  # slurmd settles a resume before the next suspend
                if (await client.control("suspend", run.job_id)).returncode != 0:
                    await client.cancel([run.job_id], signal="STOP", full=True)
                    run.held = "signal"
            except (SlurmError, OSError) as error:
                log.warning("slurm job %s: suspending its command again: %s", run.job_id, error)

    async def confirm_pause(self) -> str:
        """What pausing did, once every hold and suspend asked so far has been carried out and the
        controller has answered for it (the pause control is acknowledged with this, never before)."""
        if self._pausing is not None:
            await asyncio.wait([self._pausing])  # (a failure of it is logged there, and shows below)
        async with self._lock:  # an exec that was submitting when the pause came pauses its job under it
            runs = sorted(self._runs, key=lambda run: run.submitted_at)
            if not runs:
                return "no command was running; the next one waits for resume"
            said = [run.confirmed or (f"{run.log_name}: not submitted yet; it is held once submitted"
                                      if run.job_id is None else f"slurm job {run.job_id}: not stopped")
                    for run in runs]
            return "; ".join(said)

    async def _resume_run(self, run: _SlurmRun) -> None:
        client, job, held = self.host.client, run.job_id, run.held
        assert job is not None
        run.held, run.confirmed, run.suspended_unlaunched = None, "", False
        if held == "hold":
            await client.control("release", job)
        elif held == "suspend":
            await client.control("resume", job)
        elif held == "signal":
            await client.cancel([job], signal="CONT", full=True)

    async def _cancel(self, runs: list[_SlurmRun]) -> None:
        ids = [run.job_id for run in runs if run.job_id is not None]
        for run in runs:
            run.cancelled = True
        for attempt in range(4):
            try:
                await self.host.client.cancel(ids)
                return
            except ControllerUnavailable:
                await asyncio.sleep(0.5 * 2 ** attempt)
            except SlurmError as error:  # the job already ended
                log.info("scancel %s: %s", ids, error)
                return

    async def kill(self) -> None:
        runs = list(self._runs)
        for run in runs:
            run.killed = True
        if runs:
            await self._cancel(runs)
        await self.login.kill()
        await wait_done(runs)

    async def close(self) -> None:
        self._closed = True
        await self.kill()
        self.resume()
        await self.login.close()
        await self._background.drain(5)


def _first_float(text: bytes) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _second_float(text: bytes) -> float | None:
    try:
        return float(text.split()[1])
    except (ValueError, IndexError):
        return None


def _parse_code(text: bytes) -> int | None:
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return None
