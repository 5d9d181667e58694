"""One attempt's agent phase: version, prompt, secrets, live usage and cost, budgets, completion.

The lifecycle's agent phase builds an `AgentSession` and uses it around its one `run_command`:

1. `prepare()` records the CLI's ``--version`` (event ``agent_version``) and the task prompt
   (event ``agent_prompt``), checks the agent's secrets loaded (else the attempt fails as
   ``infra``: a configuration problem, not the agent's), refuses to start when the run's dollar
   budget is already spent, and returns the command with the secrets in its environment (they go
   to the agent process only: probes never get them).
2. `parse(line)` is the exec's line parser: it gives truncated lines back their full text from the
   raw log (the sandbox hands ``on_line`` at most 16 KiB of a line; the file has every byte), runs
   the adapter's stateless parser, and watches the events: per-message and cumulative usage go to
   a `UsageLedger`; the totals are kept in the `usage` table (one row per attempt and model, kept
   current) and announced as ``usage`` events at most every `USAGE_EVERY_S` s; budgets
   (``tokens``, ``dollars`` per job, ``run_dollars`` per run) are checked on every change (for an
   adapter with ``live_usage_dir`` — Codex — also on the running totals of the CLI's own session
   log, tailed every `LIVE_USAGE_POLL_S` s, since its stream has usage only at the end) and a
   breach stops the agent (the sandbox exec is killed; event ``budget``; the attempt's reason is
   ``budget:tokens`` / ``budget:dollars`` / ``budget:run_dollars``); a ``completion`` event starts a
   grace period after which a lingering process is killed (event ``agent_hung``).
3. `finish(result)` writes the final usage, marks a transcript without a completion as incomplete
   (an ``error`` event, category ``incomplete``), masks the agent's secrets in every file it
   created or changed in the work dir, and returns the fields of ``agent_finished``.

The probes run afterwards on whatever the agent left, whether it finished, was stopped or hung.

Optional adapter attributes the session uses (beyond the `AgentAdapter` protocol's ``command`` and
``parse``; an adapter without them works as before): ``uses_prompt`` (the task prompt is rendered,
recorded and passed as ``command(paths, prompt=...)``), ``secrets`` (`secrets.AgentSecrets`),
``model`` (the model to price when the stream names none), ``version_argv()``,
``completion_grace_s`` (a stream that must end with a completion; lingering after it is killed),
``live_usage_dir(paths, home)`` + ``parse_rollout_line(text)`` (a side log with running usage).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from ...probes.capture import read_head
from ..attempt import Attempt, AttemptError
from ..sandbox.base import ExecResult, OutputLine
from ..secrets import registry
from .api_errors import describe, hopeless
from .base import AgentCommand
from .prompt import prompt_event, render_prompt
from .transcript import unknown
from .usage import Usage, UsageLedger, run_spend, usage_row_sql


USAGE_EVERY_S = 0.5
LIVE_USAGE_POLL_S = 0.1  # a new usage record is seen this soon (a read of nothing new costs one stat)
VERSION_TIMEOUT_S = 60.0
FULL_LINE_MAX = 64 << 20  # a longer line is parsed from its first 16 KiB only
VERSION_BYTES = 64 << 10  # of a CLI's --version output
ROLLOUT_DRAIN_CHUNKS = 16  # at most this many 4 MiB chunks of an agent's own log are read after it exits


class AgentSession:
    def __init__(self, attempt: Attempt, adapter: Any) -> None:
        self.attempt = attempt
        self.adapter = adapter
        self.sink = attempt.sink
        bench = attempt.ctx.bench
        self.agent_spec = bench.agent(attempt.job["agent"])
        self.defaults = bench.defaults
        self.budgets = bench.defaults.budgets
        self.ledger = UsageLedger(default_model=getattr(adapter, "model", None), prices=bench.defaults.prices)
        self.run = run_spend(attempt.ctx.run_id, getattr(attempt.ctx.writer, "path", None))
        self.stdout_path = attempt.base / "logs" / f"{getattr(attempt, 'log_prefix', '')}agent.stdout"
        self.completion: dict[str, Any] | None = None
        self.stop_reason: str | None = None
        self.killed_after_completion = False
        self.started_at: float | None = None
        self.finished = False
        self._offset = 0  # byte offset of the next stdout line in the raw file
        self._grace: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._last_flush = 0.0
        self._flushed_version = -1
        self._checked_version = -1
        self._pending_flush: asyncio.TimerHandle | None = None
        self._watcher: asyncio.Task | None = None
        self._warned: set[str] = set()
        self._full_lines = bool(getattr(adapter, "full_lines", True))  # False: the cut text is all it reads
        self._rollout: _LogTail | None = None  # the agent's own session log, when it has one (Codex)
        self.api_failure: dict[str, Any] | None = None  # the model-API failure the attempt ended on
        self.budget_exceeded: str | None = None  # a budget the final totals broke after the agent finished

    # -- before ---------------------------------------------------------------------------------
    async def prepare(self) -> AgentCommand | None:
        """The command to run, or None when the agent must not start (run budget spent)."""
        await self._record_version()
        paths = self.attempt.paths
        prompt = None
        if getattr(self.adapter, "uses_prompt", False):
            template, where = getattr(self.agent_spec, "prompt", None), "agent"
            if template is None:
                template, where = getattr(self.defaults, "prompt", None), "defaults"
            prompt, source = render_prompt(template, paths.template_values())
            self.sink.emit("agent_prompt", prompt_event(prompt, source, where if template is not None else None))
        secrets = getattr(self.adapter, "secrets", None)
        if secrets is not None and secrets.problems:
            message = f"agent {self.attempt.job['agent']!r}: secrets missing: " + "; ".join(secrets.problems)
            self.sink.emit("error", {"category": "secrets", "message": message})
            raise AttemptError(message, "infra")
        limit = self.budgets.run_dollars
        if limit is not None and self.run.total >= limit:
            self.stop_reason = "budget:run_dollars"
            self.sink.emit("budget", {"name": self.stop_reason, "limit": limit, "used": round(self.run.total, 6),
                                      "when": "before start"})
            return None
        if prompt is not None and "prompt" in inspect.signature(self.adapter.command).parameters:
            command = self.adapter.command(paths, prompt=prompt)
        else:
            command = self.adapter.command(paths)
        env = dict(command.env)
        if secrets is not None:
            env.update(secrets.env)
        self.run.sessions.add(self)
        self.run.live.setdefault(self.attempt.attempt_id, 0.0)
        self.started_at = time.time()
        live_dir = getattr(self.adapter, "live_usage_dir", None)
        home = getattr(self.attempt.sandbox, "home", None)
        if live_dir is not None and home is not None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch_usage(live_dir(paths, Path(home))))
        return dataclasses.replace(command, env=env)

    async def _watch_usage(self, directory: Path) -> None:
        """Tail the agent's own session log for running usage totals (see codex.py)."""
        self._rollout = _LogTail(directory, (self.started_at or 0) - 1, self._live_path)
        while True:
            more = self._read_rollout()
            await asyncio.sleep(0 if more else LIVE_USAGE_POLL_S)  # a flood of log never holds the loop

    def _read_rollout(self) -> bool:
        """Account the session log's new usage records; True when there may be more to read now."""
        if self._rollout is None:
            return False
        try:
            lines, more = self._rollout.read()
            for text in lines:
                event = self.adapter.parse_rollout_line(text)
                if event is None or self.completion is not None:
                    continue
                if event.get("type") == "session" or self._rollout.advances(event):
                    self.ledger.observe(event)
        except Exception:  # best-effort: the CLI's own log may vanish or change shape
            return False
        self._after_change()
        return more

    def _live_path(self, path: Path) -> Path:
        """Where the engine reads a path of the sandbox while the agent runs (a CLI's state may be in
        the sandbox's memory only: ``sandbox.live_path``)."""
        live = getattr(self.attempt.sandbox, "live_path", None)
        return live(path) if live is not None else path

    async def _record_version(self) -> None:
        version_argv = getattr(self.adapter, "version_argv", None)
        if version_argv is None:
            return
        argv = version_argv()
        try:
            result = await self.attempt.run_command("version", argv, timeout=VERSION_TIMEOUT_S, log_name="version")
            # a CLI's --version is a line; what it prints beyond VERSION_BYTES is never read
            text = read_head(result.stdout_path, VERSION_BYTES).decode(errors="replace").strip()
            if not text:
                text = read_head(result.stderr_path, VERSION_BYTES).decode(errors="replace").strip()
            self.sink.emit("agent_version", {"agent": self.attempt.job["agent"], "kind": getattr(self.adapter, "kind", None),
                                             "argv": argv, "version": text.splitlines()[0][:200] if result.ok and text else None,
                                             "returncode": result.returncode,
                                             "error": None if result.ok else text[-500:]})
        except Exception as error:  # the version is informative only: never fail the job on it
            self.sink.emit("agent_version", {"agent": self.attempt.job["agent"], "argv": argv, "version": None,
                                             "error": f"{type(error).__name__}: {error}"})

    # -- during ---------------------------------------------------------------------------------
    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        """The exec's on_line parser: never raises (a raising on_line would kill the agent)."""
        try:
            if line.stream == "stdout" and self._full_lines:
                line = self._full_line(line)
            events = self.adapter.parse(line)
        except Exception as error:
            return [unknown(line.text, f"parser error: {type(error).__name__}: {error}")]
        for event in events:
            try:
                self._observe(event)
            except Exception as error:  # accounting must never break the transcript
                event.setdefault("accounting_error", f"{type(error).__name__}: {error}")
        try:
            self._after_change()
        except Exception as error:  # nor kill the agent (a raising on_line would)
            for event in events[:1]:
                event.setdefault("accounting_error", f"{type(error).__name__}: {error}")
        return events

    def _full_line(self, line: OutputLine) -> OutputLine:
        """Give a line cut by the sandbox its whole text back from the raw stdout file."""
        start = self._offset
        self._offset += line.nbytes + 1
        if not line.truncated:
            return line
        if line.nbytes > FULL_LINE_MAX:
            return line
        try:
            with open(self.stdout_path, "rb") as handle:
                handle.seek(start)
                data = handle.read(line.nbytes + 2)
        except OSError:
            return line
        if data[line.nbytes:line.nbytes + 2] == b"\r\n":
            self._offset += 1
        elif data[line.nbytes:line.nbytes + 1] not in (b"\n", b""):
            return line  # out of step (a CR-terminated line before?): keep the cut text
        text = data[:line.nbytes].decode("utf-8", errors="replace")
        return OutputLine(line.stream, line.line_no, text, line.nbytes, False)

    def _observe(self, event: dict[str, Any]) -> None:
        if event.get("type") == "error" and event.get("category") == "model_api":
            self._api_error(event)
        if self.ledger.observe(event) and self.completion is None:
            self.completion = event
            failure = event.get("api_error")
            if isinstance(failure, dict) and failure.get("category") == "model_api" and event.get("status") != "success":
                self.api_failure = self.api_failure or {"fatal": True, **failure}
            elif event.get("status") == "success" or isinstance(failure, dict):
                self.api_failure = None  # the agent got through, or ended on a request of its own making
            grace = getattr(self.adapter, "completion_grace_s", None)
            if grace is not None and self._grace is None and not self.finished:
                self._grace = asyncio.get_running_loop().call_later(grace, self._grace_expired, grace)

    def _api_error(self, event: dict[str, Any]) -> None:
        """A model-API error: the CLI gave up (fatal), or no retry can cure it (a refused key): the
        attempt ends as an infrastructure failure, and a refused key stops the agent at once."""
        if self.completion is not None or event.get("parent_id"):
            return  # after the end, or a subagent's (its parent goes on and reports for itself)
        if event.get("fatal") or hopeless(event):
            self.api_failure = event
        if hopeless(event) and not self.finished and self.stop_reason is None:
            self.stop_reason = "model_api"
            self.sink.emit("agent_stopped", {"reason": "model_api", "status": event.get("status"),
                                             "message": "the model API refused the key; retrying cannot help"})
            self._kill()

    def _grace_expired(self, grace: float) -> None:
        if self.finished:
            return
        self.killed_after_completion = True
        self.sink.emit("agent_hung", {"grace_s": grace, "message": f"the agent was still running {grace:g} s after "
                                      "it reported completion; killed"})
        self._kill()

    def _after_change(self) -> None:
        if self.ledger.version in (self._flushed_version, self._checked_version):
            return
        self._checked_version = self.ledger.version
        tokens, cost = self.ledger.summary()
        self.run.live[self.attempt.attempt_id] = cost
        self._check_budgets(tokens, cost)
        wait = USAGE_EVERY_S - (time.monotonic() - self._last_flush)
        if wait <= 0:
            self._flush(self.ledger.totals())
        elif self._pending_flush is None and not self.finished:
            self._pending_flush = asyncio.get_running_loop().call_later(wait, self._deferred_flush)

    def _deferred_flush(self) -> None:
        self._pending_flush = None
        if not self.finished and self.ledger.version != self._flushed_version:
            self._flush(self.ledger.totals())

    def _flush(self, totals: dict[str, Any]) -> None:
        self._last_flush = time.monotonic()
        self._flushed_version = self.ledger.version
        writer = self.attempt.ctx.writer
        for spend in self.ledger.by_model().values():
            for sql, params in usage_row_sql(self.attempt.ctx.run_id, self.attempt.job["id"], self.attempt.attempt_id, spend):
                writer.execute(sql, params)
        usage: Usage = totals["usage"]
        self.sink.emit("usage", {"scope": "attempt", **usage.as_dict(), "tokens": totals["tokens"],
                                 "cost_usd": None if totals["unpriced"] else round(totals["cost_usd"], 6),
                                 "models": totals["models"],
                                 "run_cost_usd": round(self.run.total, 6)})
        if self.budgets.dollars is not None or self.budgets.run_dollars is not None or self.finished:
            self._warn_unpriced(totals["unpriced"])

    def _warn_unpriced(self, models: list[Any]) -> None:
        """Once per model: its cost is unknown (live only when a dollar budget needs it; else at the
        end, when the CLI had its chance to report a cost)."""
        for model in models:
            key = str(model)
            if key not in self._warned:
                self._warned.add(key)
                when = "so far" if not self.finished else "in the end"
                self.sink.emit("warning", {"message": f"no price for model {model!r} in defaults.prices or resenv's "
                                           f"price table, and no cost reported by the agent {when}: its cost is "
                                           "unknown (a dollar budget cannot see it)", "model": model})

    # -- budgets --------------------------------------------------------------------------------
    def _check_budgets(self, tokens: int, cost: float) -> None:
        if self.stop_reason or self.finished or self.budget_exceeded:
            return
        budgets = self.budgets
        breach: tuple[str, float, float] | None = None
        if budgets.tokens is not None and tokens > budgets.tokens:
            breach = ("budget:tokens", budgets.tokens, tokens)
        elif budgets.dollars is not None and cost > budgets.dollars:
            breach = ("budget:dollars", budgets.dollars, round(cost, 6))
        elif budgets.run_dollars is not None and self.run.total > budgets.run_dollars:
            breach = ("budget:run_dollars", budgets.run_dollars, round(self.run.total, 6))
        if breach is None:
            return
        if self.completion is not None:
            # A finished agent is never stopped or relabelled: its final totals (the CLI's own
            # cost, say) crossing a budget are noted, and its result stands.
            self.budget_exceeded = breach[0]
            self.sink.emit("budget", {"name": breach[0], "limit": breach[1], "used": breach[2], "stopped": False,
                                      "when": "after completion"})
        elif breach[0] == "budget:run_dollars":
            for session in list(self.run.sessions):
                session.stop(*breach)
        else:
            self.stop(*breach)

    def stop(self, reason: str, limit: float, used: float) -> None:
        """Stop the agent for a breached budget (once); the probes still run afterwards. An agent
        that has reported completion is not stopped (the run's other sessions call this too)."""
        if self.stop_reason or self.finished or self.completion is not None:
            return
        self.stop_reason = reason
        self.sink.emit("budget", {"name": reason, "limit": limit, "used": used, "stopped": True})
        self._kill()

    def _kill(self) -> None:
        sandbox = self.attempt.sandbox
        if sandbox is None:
            return
        task = asyncio.get_running_loop().create_task(sandbox.kill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- after ----------------------------------------------------------------------------------
    async def finish(self, result: ExecResult) -> dict[str, Any]:
        self.finished = True
        for handle in (self._grace, self._pending_flush, self._watcher):
            if handle is not None:
                handle.cancel()
        self.run.sessions.discard(self)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for _ in range(ROLLOUT_DRAIN_CHUNKS):  # what the agent's own log got after the last poll (a cut stream)
            if not self._read_rollout():
                break
            await asyncio.sleep(0)
        if self._rollout is not None:
            self._rollout.close()
        if self.stop_reason and self.stop_reason.startswith("budget:") and not result.killed and self.completion:
            # the agent finished on its own before the stop landed: its result stands
            self.budget_exceeded, self.stop_reason = self.stop_reason, None
            self.sink.emit("budget", {"name": self.budget_exceeded, "stopped": False,
                                      "when": "the agent finished before the stop landed"})
        totals = self.ledger.totals()
        self.run.live[self.attempt.attempt_id] = totals["cost_usd"]
        if self.ledger.version != self._flushed_version:
            self._flush(totals)
        self._warn_unpriced(totals["unpriced"])
        if result.timed_out and not self.stop_reason:
            wall = self.budgets.wall_clock_s
            agent_timeout = self.attempt.timeouts.agent
            self.stop_reason = "budget:wall_clock" if wall is not None and wall < agent_timeout else "timeout:agent"
        if self.api_failure is not None and self.stop_reason is None:
            self.stop_reason = "model_api"
        elif self.api_failure is None and self.stop_reason == "model_api":
            self.stop_reason = None  # stopped for a refused key, yet it reported success first: its result stands
        if self.completion is None and self.stop_reason is None and getattr(self.adapter, "completion_grace_s", None) is not None:
            self.sink.emit("error", {"category": "incomplete", "message": "the agent exited without reporting "
                                     f"completion (exit status {result.returncode}); its transcript is incomplete"})
        if self.started_at is not None and registry():
            changed = await asyncio.to_thread(registry().scrub_tree, self.attempt.paths.workdir, self.started_at - 1)
            if changed:
                self.sink.emit("redacted", {"files": len(changed), "paths": [str(p) for p in changed[:20]]})
        completion = self.completion or {}
        return {
            "completed": self.completion is not None,
            "completion_status": completion.get("status"),
            "completion_subtype": completion.get("subtype"),
            "stop_reason": self.stop_reason,
            "killed_after_completion": self.killed_after_completion,
            "tokens": totals["tokens"],
            "cost_usd": None if totals["unpriced"] else round(totals["cost_usd"], 6),
            "cost_estimate_usd": _estimate(totals),
            "budget_exceeded": self.budget_exceeded,
            "model_api": None if self.api_failure is None else {
                key: self.api_failure.get(key) for key in ("api_kind", "status", "message")},
        }

    def failure(self) -> str | None:
        """The attempt's infrastructure failure, if the model API failed it (a one-line reason): only
        when the agent ended on it, not when a budget, a timeout or its own result ended it."""
        if self.api_failure is None or self.stop_reason != "model_api":
            return None
        return describe(self.api_failure)



def _estimate(totals: dict[str, Any]) -> float | None:
    """The price-table estimate of what the agent reported itself, when it did (reconciliation)."""
    estimates = [m["estimate_usd"] for m in totals["models"] if m.get("estimate_usd") is not None]
    return round(sum(estimates), 6) if estimates else None


class _LogTail:
    """Complete new lines of the newest ``rollout-*.jsonl`` under a directory, read as it grows; a
    line longer than `FULL_LINE_MAX` is skipped, never held whole.

    The directory may live in the sandbox's memory only (`live` maps it to where the engine sees it
    while the agent runs); the file stays open once found, so what the agent wrote just before it
    exited can still be read after its sandbox's mounts are gone."""

    CHUNK = 1 << 22

    def __init__(self, directory: Path, since: float, live: Callable[[Path], Path]) -> None:
        self.directory = directory
        self.since = since
        self.live = live
        self.handle: BinaryIO | None = None
        self.last: Usage | None = None  # the last running total accepted
        self.pending = b""
        self.skipping = False

    def read(self) -> tuple[list[str], bool]:
        """(new complete lines, whether a full chunk was read: there may be more now)."""
        if self.handle is None:
            path = _newest_log(self.live(self.directory), self.since)
            if path is None:
                return [], False
            self.handle = open(path, "rb")
        data = self.handle.read(self.CHUNK)
        self.pending += data
        *complete, self.pending = self.pending.split(b"\n")
        if self.skipping and complete:  # the end of a line too long to keep: not a line
            complete, self.skipping = complete[1:], False
        if len(self.pending) > FULL_LINE_MAX:
            self.pending, self.skipping = b"", True
        return [raw.decode("utf-8", errors="replace") for raw in complete], len(data) == self.CHUNK

    def advances(self, event: dict[str, Any]) -> bool:
        """Whether a running total is at least the last one in every count: the log is the agent's
        own file, and a total that went down was not written by its CLI (ignored, so a forged zero
        cannot reset a budget's count)."""
        usage = Usage.from_dict(event)
        if self.last is not None and usage.maximum(self.last) != usage:
            return False
        self.last = usage
        return True

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _newest_log(directory: Path, since: float) -> Path | None:
    """The newest ``rollout-*.jsonl`` under `directory` modified at or after `since`."""
    best: tuple[float, Path] | None = None
    if not directory.is_dir():
        return None
    for path in directory.rglob("rollout-*.jsonl"):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= since and (best is None or mtime > best[0]):
            best = (mtime, path)
    return best[1] if best else None
