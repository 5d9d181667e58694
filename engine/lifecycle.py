"""One attempt of one job: provision → checkout → agent → probes → audit → teardown, each phase
under a named timeout.

Every command's raw output goes to files under the attempt's `logs/`; its lines become events
numbered by `seq` as far as the attempt's output budget allows (a head as they come, each command's
tail when it ends, a count of the lines left out between; engine/output.py), so a replay of the raw
files after a crash can add exactly what is missing.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agents import AgentAdapter, JobPaths
from .agents.session import AgentSession  # LLM agents: usage, cost, budgets, completion
from .censuses import CensusCache
from .checkout import CheckoutError, Pristine, PristineCache, checkout_argv, git_fatal_line, submodules_argv
from .hosts import Lease
from .integrity import verify_checkout
from .output import OutputBudget, limits_of
from .sandbox.base import ExecResult, HostSetupError, OutputLine, Sandbox, SandboxError, is_remote
from .sandbox.isolation import env_paths, path_exists
from .secrets import redact_files, redact_obj  # agents' secrets never reach the store
from .store import StoreWriter, disk_failure
from .tiers import PROBE_TIERS, TierRunner, tail_text

EXCERPT_BYTES = 4096
CONFIGURED_PHASES = frozenset({"agent", "version"})
"""Phases whose command line comes from the benchmark's configuration, not from the agent: the host
files it names are shown to its sandbox (read-only)."""


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


def log_kind(log_name: str) -> str:
    """Agent output is transcript; everything else the harness runs is plain output."""
    return "transcript" if log_name.startswith("agent") else "output"


@dataclass
class JobAttempt:
    ctx: RunContext
    job: dict[str, Any]
    number: int
    attempt_id: int
    lease: Lease
    sink: EventSink
    sandbox: Sandbox | None = None
    pristine: Pristine | None = None
    tier_runner: TierRunner | None = None
    log_prefix: str = ""  # tier re-runs write their logs beside the kept attempt's, under their own names
    recorded_number: int | None = None  # a tier re-run's own number in the store (`number` is the kept one's)
    scoring_id: int | None = None  # the scoring its tier results belong to; None: the run's original scoring
    _log_counter: int = field(default=0)
    _waited_s: float = field(default=0.0)  # what this attempt's commands spent not running (see _phase)
    agent_stop_reason: str | None = None  # why the agent was stopped (budget:tokens, ...)
    _output: OutputBudget | None = field(default=None)

    @property
    def output(self) -> OutputBudget:
        """What of this attempt's command output becomes events (`defaults.output`)."""
        if self._output is None:
            self._output = OutputBudget(self.sink, *limits_of(self.ctx.bench))
        return self._output

    @property
    def base(self) -> Path:
        return attempt_dir(self.ctx.run_dir, self.job["repo_id"], self.job["agent"], self.number)

    @property
    def paths(self) -> JobPaths:
        work = self.base / "work"
        return JobPaths(
            run_id=self.ctx.run_id, job_key=self.job["key"], workdir=work, repo=work / "repo",
            env=work / "env", report=work / "report.json", gpus=self.lease.gpus,
            budget_s=self._agent_deadline(), remote=is_remote(self.sandbox),
        )

    @property
    def timeouts(self) -> Any:
        return self.ctx.bench.defaults.timeouts

    async def execute(self) -> AttemptOutcome:
        """Run every phase; teardown always runs. Agent failures are results, not errors."""
        outcome = AttemptOutcome("done")
        try:
            await self._phase("provision", self.timeouts.provision, self._provision)
            await self._phase("checkout", self.timeouts.checkout, self._checkout)
            # The agent phase has no wall-clock wrapper: its exec deadline counts active time, so
            # pausing a job never times it out.
            await self._phase("agent", None, self._agent)
            if (checkpoint := getattr(self.sandbox, "checkpoint", None)) is not None:  # docker: commit the state the tiers re-run from
                await checkpoint()
            if self.ctx.tiers:
                self.tier_runner = TierRunner(self, self.ctx.tiers, self.lease.host.driver())
                await self._phase("probes", self.timeouts.probes, self.tier_runner.run_probes)
                if "C5" in self.ctx.tiers:  # the audit judges C5 only: no phase when C5 is not selected
                    await self._phase("audit", self.timeouts.audit, self.tier_runner.run_audit)
        except AttemptError as error:
            outcome = AttemptOutcome("error", error.category, str(error))
        finally:
            await asyncio.shield(self._teardown())
        if outcome.state == "done" and outcome.reason is None:
            outcome.reason = self.agent_stop_reason  # a stopped agent is a result, with its why
        return outcome

    async def execute_tier(self, tier: str, previous: dict[str, Any]) -> AttemptOutcome:
        """Re-run one tier on this attempt's kept post-agent state (the agent does not run again)."""
        return await self.execute_tiers((tier,), previous)

    async def execute_tiers(self, tiers: tuple[str, ...], previous: dict[str, Any]) -> AttemptOutcome:
        """Judge `tiers` again on this attempt's kept post-agent state, in the order a full attempt
        judges them (the agent does not run again). `previous` holds the verdicts of tiers not
        judged here (C5 reads C4's)."""
        outcome = AttemptOutcome("done")
        probes = tuple(tier for tier in PROBE_TIERS if tier in tiers)
        try:
            await self._phase("provision", self.timeouts.provision, self._reopen)
            self.tier_runner = TierRunner(self, tiers, self.lease.host.driver(), previous=previous)
            runner = self.tier_runner

            async def judge_probes() -> None:
                for tier in probes:
                    await runner.rerun(tier)

            if probes:
                await self._phase("probes", self.timeouts.probes, judge_probes)
            if "C5" in tiers:
                # Alone, C5 first measures the interpreter as the probes phase would: it gets that time.
                timeout = self.timeouts.audit if probes else self.timeouts.probes
                await self._phase("audit", timeout, lambda: runner.rerun("C5"))
        except AttemptError as error:
            outcome = AttemptOutcome("error", error.category, str(error))
        finally:
            await asyncio.shield(self._teardown())
        return outcome

    async def _reopen(self) -> None:
        """A sandbox over the kept work dir, and the pristine copy the census reads."""
        if not self.paths.workdir.is_dir():
            raise AttemptError(f"the kept state of attempt {self.number} is gone: {self.paths.workdir}", "infra")
        self.sandbox = self.lease.host.sandbox(self.paths.workdir, lease=self.lease, attempt=self, reopen=True)
        await self._start_sandbox()
        repo = self.ctx.suite.repo(self.job["repo_id"])
        source = repo.source
        local = (self.ctx.bench.base_dir / source.path).resolve() if getattr(source, "path", None) else None
        self.pristine = await self.ctx.pristines.get(
            repo.id, local_tree=local, url=getattr(source, "git", None), commit=getattr(source, "commit", None))

    # -- phases -----------------------------------------------------------------------------
    def _queued_s(self) -> float:
        """Seconds this attempt's commands have waited in a cluster's queue so far (0 elsewhere)."""
        queued = getattr(self.sandbox, "queued_s", None)
        return queued() if queued is not None else 0.0

    async def _phase(self, name: str, timeout: float | None, body: Callable[[], Awaitable[None]]) -> None:
        started = time.time()
        waited_before, queued_before = self._waited_s, self._queued_s()
        self._set_phase(name)
        self.ctx.writer.execute(
            "INSERT INTO phases (attempt_id, name, status, started_at) VALUES (?, ?, 'running', ?)",
            (self.attempt_id, name, started),
        )
        self.sink.emit("phase", {"phase": name, "status": "started"})
        status, reason = "done", None
        try:
            await self._within(body, timeout)
        except TimeoutError:
            assert timeout is not None
            status, reason = "timeout", f"timeout:{name} ({timeout:g} s)"
            self.sink.emit("timeout", {"name": f"phase:{name}", "seconds": timeout})
            raise AttemptError(f"phase {name} exceeded its {timeout:g} s timeout", "timeout") from None
        except AttemptError as error:
            status, reason = "error", str(error)
            raise
        except asyncio.CancelledError:
            status, reason = "cancelled", "cancelled"
            raise
        except HostSetupError as error:
            status, reason = "error", str(error)
            self.lease.host.mark_broken(str(error))
            raise AttemptError(str(error), "host_setup") from error
        except (SandboxError, OSError) as error:
            status, reason = "error", f"{type(error).__name__}: {error}"
            if (failure := disk_failure(error, self.ctx.run_dir)) is not None:
                raise failure from error  # the engine's own disk (a raw log's): the run stops, not this job
            raise AttemptError(f"phase {name}: {reason}", "infra") from error
        finally:
            finished = time.time()
            # Its working time: the wall time less what its commands spent not running (queued, held,
            # paused): what `show` and `report` call agent time, the same on a busy cluster as on an idle one.
            active = max(0.0, (finished - started) - (self._waited_s - waited_before))
            self.ctx.writer.execute(
                "UPDATE phases SET status = ?, finished_at = ?, reason = ?, active_s = ?, queued_s = ?"
                " WHERE attempt_id = ? AND name = ?",
                (status, finished, reason, round(active, 4), round(self._queued_s() - queued_before, 4),
                 self.attempt_id, name),
            )
            self.sink.emit(
                "phase", {"phase": name, "status": status, "seconds": round(finished - started, 4), "reason": reason}
            )

    async def _within(self, body: Callable[[], Awaitable[None]], timeout: float | None) -> None:
        """Run a phase under its timeout; time its commands spent queued (in a Slurm queue) is not counted."""
        queued = getattr(self.sandbox, "queued_s", None)
        if timeout is None or queued is None:
            await asyncio.wait_for(body(), timeout=timeout)
            return
        task = asyncio.ensure_future(body())
        started, queued_before = time.monotonic(), queued()
        try:
            while True:
                remaining = started + timeout + (queued() - queued_before) - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                done, _ = await asyncio.wait({task}, timeout=min(remaining, 5.0))
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _set_phase(self, name: str) -> None:
        self.ctx.writer.update("attempts", self.attempt_id, {"phase": name})

    async def _provision(self) -> None:
        workdir = self.paths.workdir

        def provision() -> Sandbox:
            # Making a job's folders waits on the file system (a journaled mkdir can take a millisecond):
            # in a thread, so the loop goes on streaming the other jobs meanwhile.
            (self.base / "logs").mkdir(parents=True, exist_ok=True)
            return self.lease.host.sandbox(workdir, lease=self.lease, attempt=self)  # lease/attempt: containers' labels and GPUs

        self.sandbox = await asyncio.to_thread(provision)
        await self._start_sandbox()

    async def _start_sandbox(self) -> None:
        """A container starts here, in the provision phase, so that one that cannot start fails the
        provision (with the daemon's reason), not the checkout that would have been its first command."""
        if (start := getattr(self.sandbox, "start", None)) is not None:
            await start()

    async def _checkout(self) -> None:
        repo = self.ctx.suite.repo(self.job["repo_id"])
        source = repo.source
        try:
            if getattr(source, "path", None) is not None:
                tree = (self.ctx.bench.base_dir / source.path).resolve()
                pristine = await self.ctx.pristines.get(repo.id, local_tree=tree, url=None, commit=None)
            else:
                pristine = await self.ctx.pristines.get(repo.id, local_tree=None, url=source.git, commit=source.commit)
        except CheckoutError as error:
            raise AttemptError(str(error), error.category) from error
        self.pristine = pristine
        self.sink.emit("checkout", {"commit": pristine.commit, "pristine": str(pristine.path)})
        if (stage := getattr(self.sandbox, "stage_pristine", None)) is not None:  # remote/container: copy the pristine repo there
            await stage(pristine.path)
        result = await self.run_command("checkout", checkout_argv(pristine, self.paths.repo),
                                        timeout=self.timeouts.checkout)
        if not result.ok:
            raise AttemptError(f"checkout failed: git exited {result.returncode}"
                               f"{git_fatal_line(result.stderr_path)}", "infra")
        try:
            # git leaves out files whose objects the source lacks and still exits 0: check the tree.
            await verify_checkout(self, pristine, await self.ctx.pristines.manifest(pristine), self.timeouts.checkout)
        except CheckoutError as error:
            raise AttemptError(str(error), error.category) from error
        if (unstage := getattr(self.sandbox, "unstage_pristine", None)) is not None:
            unstage()  # the agent never sees the pristine copy
        if getattr(source, "git", None):
            # Submodules need the network (a sandbox may have none): without them the agent still
            # gets the repo, and the transcript says they are missing.
            result = await self.run_command("checkout", submodules_argv(self.paths.repo, source.git),
                                            timeout=self.timeouts.checkout, log_name="submodules")
            if not result.ok:
                self.sink.emit("checkout", {"submodules": "not initialised", "returncode": result.returncode,
                                            "log_tail": tail_text(result.stderr_path, limit=2000)})

    def _agent_deadline(self) -> float:
        budget = self.ctx.bench.defaults.budgets.wall_clock_s
        return min(self.timeouts.agent, budget) if budget else self.timeouts.agent

    async def _agent(self) -> None:
        adapter = self.ctx.agents[self.job["agent"]]
        session = AgentSession(self, adapter)  # version, prompt, secrets, usage, budgets
        command = await session.prepare()
        if command is None:  # the run's dollar budget is spent: the agent does not start
            self.agent_stop_reason = session.stop_reason
            return
        for rel_path, data in command.files.items():
            await self.sandbox.put(rel_path, data)
        # The agent sees exactly the GPUs its job leased, as the probes will.
        env = {"CUDA_VISIBLE_DEVICES": self.paths.template_values()["gpus"], **command.env}
        # A CLI's own state (transcripts, shell snapshots, temp files) copies its tool outputs and its
        # environment, keys included: kept in memory, never on disk, where the sandbox can.
        in_memory = self._keep_private_state(adapter, env)
        try:
            result = await self.run_command(
                "agent", command.argv, env=env, stdin=command.stdin,
                timeout=self._agent_deadline(), timeout_name="agent", parse=session.parse,
            )
        finally:
            if in_memory is not None:
                in_memory([])
        summary = await session.finish(result)
        self.agent_stop_reason = session.stop_reason
        self.sink.emit("agent_finished", {
            "returncode": result.returncode, "timed_out": result.timed_out,
            "seconds": round(result.active_s, 4), **summary,
        })
        if (failure := session.failure()) is not None:
            # The hosted model failed, not the agent: nothing to judge, and the attempt is retried.
            raise AttemptError(failure, "model_api")

    def _keep_private_state(self, adapter: Any, env: dict[str, str]) -> Callable[[list[Path]], Any] | None:
        """Point the agent CLI at its private state folders (``adapter.private_state``) and have the
        sandbox keep them in memory for the agent command (``sandbox.keep_in_memory``); returns that
        method (to undo it), or None where the adapter or the sandbox has no such thing."""
        state = getattr(adapter, "private_state", None)
        home = getattr(self.sandbox, "home", None)
        if state is None or home is None:
            return None
        folders, state_env = state(self.paths, Path(home))
        for name, value in state_env.items():
            env.setdefault(name, value)  # the agent's own configuration wins
        keep = getattr(self.sandbox, "keep_in_memory", None)
        if keep is None:
            return None
        keep(folders)
        return keep

    async def _teardown(self) -> None:
        started = time.time()
        if self.sandbox is not None:
            try:
                await asyncio.wait_for(self.sandbox.close(), timeout=self.timeouts.teardown)
            except (TimeoutError, SandboxError, OSError) as error:
                self.sink.emit("error", {"phase": "teardown", "message": f"{type(error).__name__}: {error}"})
        self.ctx.writer.execute(
            "INSERT INTO phases (attempt_id, name, status, started_at, finished_at) VALUES (?, 'teardown', 'done', ?, ?)",
            (self.attempt_id, started, time.time()),
        )

    # -- commands ---------------------------------------------------------------------------
    async def run_command(
        self, phase: str, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
        stdin: bytes | None = None, timeout_name: str | None = None, cwd: Path | None = None,
        parse: Callable[[OutputLine], list[dict[str, Any]]] | None = None, log_name: str | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult:
        """Run one command in the sandbox with its output streamed to raw files and to events.

        Every line is parsed (`parse`: an agent's transcript parser) and goes through the attempt's
        output budget, which decides what of it is stored (engine/output.py). `on_start` gets the
        command's process group as the sandbox announces it (the GPU tiers watch that group's
        processes on the GPU)."""
        assert self.sandbox is not None
        self._log_counter += 1
        log_name = f"{log_name or phase}-{self._log_counter}" if phase != "agent" else "agent"
        log_name = self.log_prefix + log_name
        prefix = self.base / "logs" / log_name
        kind = log_kind(log_name)
        self.sink.emit("command", {"phase": phase, "argv": argv, "log": log_name})
        gate = self.output.command(log_name, kind)

        def on_line(line: OutputLine) -> None:
            gate.line(line, parse(line) if parse is not None else None)

        def started(pgid: int) -> None:
            self.sink.emit("process", {"log": log_name, "pgid": pgid})
            if on_start is not None:
                on_start(pgid)

        reveal = getattr(self.sandbox, "reveal", None) if phase in CONFIGURED_PHASES else None
        if reveal is not None:
            # The configured program's own files and the paths its declared environment names, read-only;
            # its package caches read-write. Never for a command built from what an agent wrote.
            caches, named = env_paths(env or {}, self.paths.workdir)
            reveal(command_files(argv, self.paths.workdir) + named, writable=caches)
        try:
            result = await self.sandbox.exec(
                argv, env=env, cwd=cwd or self.paths.workdir, timeout=timeout, timeout_name=timeout_name or phase,
                stdin=stdin, log_prefix=prefix, on_line=on_line, on_start=started,
            )
        finally:
            if reveal is not None:
                self.sandbox.conceal()  # type: ignore[attr-defined]
            gate.finish()  # the count of lines left out, then the tail of each stream
        self._waited_s += max(0.0, result.duration_s - result.active_s)  # queued, held, paused: not working
        if result.timed_out:
            self.sink.emit("timeout", {"name": result.timeout_name, "seconds": timeout})
        self.sink.emit("exit", {
            "phase": phase, "log": log_name, "returncode": result.returncode, "timed_out": result.timed_out,
            "killed": result.killed, "seconds": round(result.active_s, 4),
        })
        if not getattr(self.sandbox, "output_redacted", False):
            # A sandbox whose job writes its raw files itself (Slurm on a shared file system): redacted
            # here, before excerpts are taken. The others redacted every byte as it streamed.
            await asyncio.to_thread(redact_files, result.stdout_path, result.stderr_path)  # whole logs: off the loop
        await self.index_logs(log_name, {"stdout": result.stdout_path, "stderr": result.stderr_path})
        return result

    async def index_logs(self, name: str, paths: dict[str, Path]) -> None:
        """Record a command's raw logs in the DB with a capped head and tail each, never a whole body
        (read in a thread: a log can be large, and the loop serves the other jobs meanwhile)."""
        excerpts = await asyncio.to_thread(lambda: {stream: read_excerpt(path) for stream, path in paths.items()})
        for stream, path in paths.items():
            head, tail, size, lines = excerpts[stream]
            self.ctx.writer.execute(
                "INSERT INTO logs (run_id, job_id, attempt_id, name, stream, path, nbytes, nlines, head, tail, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.ctx.run_id, self.job["id"], self.attempt_id, name, stream, str(path), size, lines,
                 head, tail, time.time()),
            )


def command_files(argv: list[str], workdir: Path) -> list[Path]:
    """The host files a configured agent command names (its program, its script), outside the work dir;
    a shell command line given as one string is split into its words."""
    words: list[str] = []
    for word in argv:
        words.append(word)
        if " " in word:
            try:
                words += shlex.split(word)
            except ValueError:
                pass
    out: list[Path] = []
    for word in words:
        path = Path(word)
        if path.is_absolute() and path_exists(path):
            for shown in installation_of(path):
                if shown != workdir and workdir not in shown.parents and shown not in workdir.parents \
                        and shown != Path("/") and shown not in out:
                    out.append(shown)
    return out


def installation_of(program: Path) -> list[Path]:
    """A configured program and what it runs from: the file its links lead to, and the ``node_modules``
    folder it was installed into (an npm CLI's entry point is a link into a package that loads its
    siblings)."""
    found = [program]
    real = Path(os.path.realpath(program))
    if real != program:
        found.append(real)
    for path in (program, real):
        if "node_modules" in path.parts[:-1]:
            found.append(Path(*path.parts[: path.parts.index("node_modules") + 1]))
    return found


def read_excerpt(path: Path) -> tuple[str, str, int, int]:
    """Head, tail, size and line count of a file, reading it in blocks (logs can be huge)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return "", "", 0, 0
    with handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(EXCERPT_BYTES)
        lines = head.count(b"\n")
        if size <= 2 * EXCERPT_BYTES:  # small: all of it is the head
            rest = handle.read()
            return (head + rest).decode(errors="replace"), "", len(head) + len(rest), lines + rest.count(b"\n")
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
        handle.seek(size - EXCERPT_BYTES)
        tail = handle.read()
    return head.decode(errors="replace"), tail.decode(errors="replace"), size, lines
