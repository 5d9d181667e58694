"""The `codex` agent: OpenAI Codex's CLI in exec mode, read from its ``--json`` event stream.

Command: ``codex exec --json --skip-git-repo-check <sandbox flags> [-m MODEL] [-c key=value...]
[args...] -`` with the prompt on stdin; ``-`` makes it read the prompt from stdin, and it prints
nothing until stdin is closed (the sandbox closes it once the prompt is written). ``config:`` entries
of the agent become ``-c`` overrides, i.e. anything a ``$CODEX_HOME/config.toml`` could hold (for
instance a ``model_providers.<id>`` entry with its ``base_url`` and ``env_key``). Its CODEX_HOME is
``~/.codex`` in the sandbox's private HOME.

The stream (one JSON object per line):

* ``thread.started`` (thread id) → ``session``; ``turn.started`` → ``status``;
* ``item.started|updated|completed`` with an item of type ``agent_message`` → ``message``,
  ``reasoning`` → ``thinking``, ``command_execution`` (command, aggregated_output, exit_code,
  status) → ``tool_call`` when it starts and ``tool_result`` when it completes, ``file_change``,
  ``mcp_tool_call``, ``web_search`` → ``tool_call``/``tool_result``, ``todo_list`` → ``status``,
  ``error`` (a warning item, e.g. unknown model metadata) → ``error`` (not fatal); unknown item
  types are kept as ``unknown``;
* ``turn.completed`` → ``completion`` with the usage, which is the THREAD's running total (cached
  input inside input, reasoning inside output; fields absent in older versions count 0);
  ``turn.failed`` → ``completion`` with status ``error``;
* a top-level ``error`` → ``error``: ``Reconnecting... n/m (why)`` is a retry, any other is fatal;
  a why that names a model-API failure (a status, quota, 5xx, a broken stream) makes it a
  model-API error (see `api_errors`), and ``turn.failed`` then carries ``api_error``;
* the legacy envelope ``{"id": ..., "msg": {"type": ...}}`` of Codex < 0.44 (``agent_message``,
  ``agent_reasoning``, ``exec_command_begin|end``, ``patch_apply_begin|end``, ``token_count``,
  ``task_complete``, ``error``, ``stream_error``, ``session_configured``...).

Codex reports neither the model it used nor a cost: the model is the agent's ``model`` (or the
legacy ``session_configured`` model), and tokens are priced from ``defaults.prices``.

Live usage: ``--json`` gives usage only when the turn ends (``turn.completed``), too late for a
budget. Codex also writes its session log (``$CODEX_HOME/sessions/**/rollout-*.jsonl``) as it goes:
a ``token_usage_record`` as soon as each model response ends (the thread's running total, before
the response's tool calls run) and an ``event_msg/token_count`` after them. The session tails that
file (`live_usage_dir`, `parse_rollout_line`) so token and dollar budgets stop a Codex run between
two requests, and a stream cut before ``turn.completed`` is still counted. It is Codex's own log,
read best-effort: when it is absent or its shape changes, usage still arrives with
``turn.completed``.

Verified against Codex 0.169.0 (``tests/fixtures/streams/codex-*.jsonl``).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..sandbox.base import OutputLine
from ..spec import render
from .base import JobPaths
from .llm import CliAgent
from .transcript import as_int, compact_json, head, stdout_object, tail, unknown
from .api_errors import api_error, codex_failure, completion_failure
from .usage import from_openai


def toml_value(value: Any) -> str:
    """A scalar as TOML for ``-c key=value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


class CodexAgent(CliAgent):
    kind = "codex"

    def argv(self, paths: JobPaths) -> list[str]:
        argv = [self.spec.executable, "exec", "--json", "--skip-git-repo-check"]
        if self.spec.sandbox == "none":
            # resenv's own sandbox isolates the job; Codex's would need kernel features (landlock,
            # seccomp) that containers often lack.
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        else:
            argv += ["--sandbox", self.spec.sandbox]
        if self.spec.model:
            argv += ["-m", self.spec.model]
        values = paths.template_values()
        for key, value in self.spec.config.items():
            rendered = render(value, values) if isinstance(value, str) else value
            argv += ["-c", f"{key}={toml_value(rendered)}"]
        return argv + [render(arg, values) for arg in self.spec.args] + ["-"]

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        return parse_codex_line(line)

    def live_usage_dir(self, paths: JobPaths, home: Path) -> Path:
        """Where Codex writes its session logs in this job (CODEX_HOME, default ~/.codex)."""
        return self.codex_home(paths, home) / "sessions"

    def codex_home(self, paths: JobPaths, home: Path) -> Path:
        codex_home = self.spec.env.get("CODEX_HOME")
        return Path(render(codex_home, paths.template_values())) if codex_home else home / ".codex"

    def private_state(self, paths: JobPaths, home: Path) -> tuple[list[Path], dict[str, str]]:
        """The CLI's own state, which copies tool outputs and its environment (so the key): its
        session logs, shell snapshots and thread history, all in CODEX_HOME. The sandbox keeps it in
        memory where it can (see the lifecycle's agent phase); the session log is then read through
        the sandbox (`live_path`)."""
        return [self.codex_home(paths, home)], {}

    @staticmethod
    def parse_rollout_line(text: str) -> dict[str, Any] | None:
        return parse_rollout_line(text)


# --------------------------------------------------------------------------------------------------
# the parser (stateless)


def parse_codex_line(line: OutputLine) -> list[dict[str, Any]]:
    data, events = stdout_object(line)
    if data is None:
        return events
    if "type" not in data and isinstance(data.get("msg"), dict):
        return _legacy(data["msg"], line.text)
    kind = data.get("type")
    if kind == "thread.started":
        return [{"type": "session", "session_id": data.get("thread_id")}]
    if kind == "turn.started":
        return [{"type": "status", "subtype": "turn.started"}]
    if kind == "turn.completed":
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return [{"type": "completion", "status": "success", "subtype": "turn.completed",
                 "usage": from_openai(usage).as_dict(), "usage_scope": "thread"}]
    if kind == "turn.failed":
        error = data.get("error") if isinstance(data.get("error"), dict) else {}
        message = str(error.get("message") or "")
        event = {"type": "completion", "status": "error", "subtype": "turn.failed", "is_error": True,
                 "result": message[:4000]}
        failure = codex_failure(message)
        if failure is not None:
            event["api_error"] = completion_failure(failure[0], failure[1], message)
        return [event]
    if kind == "error":
        return [_error(str(data.get("message") or ""))]
    if isinstance(kind, str) and kind.startswith("item.") and isinstance(data.get("item"), dict):
        return _item(kind.removeprefix("item."), data["item"], line.text)
    return [unknown(line.text, f"type {kind!r}")]


def _error(message: str) -> dict[str, Any]:
    """A top-level ``error``: ``Reconnecting... n/m (why)`` while Codex retries, else it gave up."""
    retrying = message.startswith("Reconnecting")
    failure = codex_failure(message)
    if failure is not None:
        return api_error(failure[0], failure[1], message, retry=retrying, fatal=not retrying)
    return {"type": "error", "category": "reconnect" if retrying else "agent", "retry": retrying,
            "fatal": not retrying, "message": message[:2000]}


def parse_rollout_line(text: str) -> dict[str, Any] | None:
    """A usage record of Codex's session log as a cumulative ``usage`` event (a ``turn_context``: a
    ``session`` event naming the model), else None.

    ``token_usage_record`` is written as soon as a model response ends (``thread_token_usage``: the
    thread's running total; ``response_id`` names the response); ``event_msg/token_count`` repeats
    the total later, after the response's tool calls ran."""
    if '"token_usage_record"' not in text and '"token_count"' not in text and '"turn_context"' not in text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    payload = record.get("payload") if isinstance(record, dict) else None
    if not isinstance(payload, dict):
        return None
    if record.get("type") == "turn_context":  # the model of the turn: prices the usage when no model is configured
        model = payload.get("model")
        return {"type": "session", "model": model} if isinstance(model, str) and model else None
    if record.get("type") == "token_usage_record":
        total = payload.get("thread_token_usage")
        extra = {"response_id": payload.get("response_id")} if isinstance(payload.get("response_id"), str) else {}
    elif payload.get("type") == "token_count":
        info = payload.get("info")
        total = info.get("total_token_usage") if isinstance(info, dict) else None
        extra = {}
    else:
        return None
    if not isinstance(total, dict):
        return None
    return {"type": "usage", "scope": "cumulative", "source": "rollout", **from_openai(total).as_dict(), **extra}


def _item(phase: str, item: dict[str, Any], text: str) -> list[dict[str, Any]]:
    kind = item.get("type") or item.get("item_type")  # item_type: Codex 0.4x
    item_id = item.get("id")
    base = {"id": item_id, "phase": phase}
    if kind in ("agent_message", "assistant_message"):
        if phase != "completed":
            return [{"type": "status", "subtype": f"agent_message.{phase}", **base}]
        return [{"type": "message", **head(item.get("text")), **base}]
    if kind == "reasoning":
        if phase != "completed":
            return [{"type": "status", "subtype": f"reasoning.{phase}", **base}]
        return [{"type": "thinking", **head(item.get("text")), **base}]
    if kind == "command_execution":
        command = item.get("command")
        command = shlex.join(command) if isinstance(command, list) else str(command or "")
        if phase == "started":
            return [{"type": "tool_call", "name": "shell", "command": command[:8000], **base}]
        if phase == "updated":
            return [{"type": "status", "subtype": "command_execution.updated", **base,
                     **tail(item.get("aggregated_output"), 400)}]
        exit_code = as_int(item.get("exit_code"))
        status = item.get("status")
        return [{"type": "tool_result", "name": "shell", "command": command[:2000], "exit_code": exit_code,
                 "is_error": status == "failed" or (exit_code not in (None, 0)), "status": status,
                 **tail(item.get("aggregated_output")), **base}]
    if kind == "file_change":
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        listed = [{"path": c.get("path"), "kind": c.get("kind")} for c in changes[:100] if isinstance(c, dict)]
        if phase == "started":
            return [{"type": "tool_call", "name": "file_change", "changes": listed, **base}]
        if phase == "updated":
            return [{"type": "status", "subtype": "file_change.updated", **base}]
        return [{"type": "tool_result", "name": "file_change", "changes": listed, "status": item.get("status"),
                 "is_error": item.get("status") == "failed", "exit_code": None, **base}]
    if kind == "mcp_tool_call":
        name = f"{item.get('server')}/{item.get('tool')}"
        if phase == "started":
            return [{"type": "tool_call", "name": name, "input": compact_json(item.get("arguments")), **base}]
        if phase == "updated":
            return [{"type": "status", "subtype": "mcp_tool_call.updated", **base}]
        result = item.get("result") if item.get("result") is not None else item.get("error")
        return [{"type": "tool_result", "name": name, "status": item.get("status"), "exit_code": None,
                 "is_error": item.get("status") == "failed", **tail(compact_json(result, 100_000)), **base}]
    if kind == "web_search":
        if phase == "completed":
            return [{"type": "tool_result", "name": "web_search", "query": item.get("query"), "exit_code": None,
                     "is_error": False, **base}]
        return [{"type": "tool_call", "name": "web_search", "query": item.get("query"), **base}]
    if kind == "todo_list":
        items = item.get("items") if isinstance(item.get("items"), list) else []
        done = sum(1 for entry in items if isinstance(entry, dict) and entry.get("completed"))
        return [{"type": "status", "subtype": "todo_list", "items": len(items), "completed": done, **base}]
    if kind == "error":
        return [{"type": "error", "category": "warning", "retry": False, "fatal": False,
                 "message": str(item.get("message") or "")[:2000], **base}]
    return [unknown(text, f"item type {kind!r}")]


def _join(command: Any) -> str:
    if isinstance(command, list):
        return shlex.join(str(part) for part in command)
    return str(command or "")


def _legacy(msg: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """The pre-0.44 envelope ``{"id": "0", "msg": {"type": ...}}``."""
    kind = msg.get("type")
    if kind == "session_configured":
        return [{"type": "session", "session_id": msg.get("session_id"), "model": msg.get("model")}]
    if kind in ("task_started", "turn_started"):
        return [{"type": "status", "subtype": str(kind)}]
    if kind == "agent_message":
        return [{"type": "message", **head(msg.get("message"))}]
    if kind in ("agent_reasoning", "agent_reasoning_raw_content"):
        return [{"type": "thinking", **head(msg.get("text"))}]
    if isinstance(kind, str) and kind.endswith("_delta"):
        return [{"type": "status", "subtype": kind}]
    if kind == "exec_command_begin":
        return [{"type": "tool_call", "id": msg.get("call_id"), "name": "shell",
                 "command": _join(msg.get("command"))[:8000], "cwd": msg.get("cwd")}]
    if kind == "exec_command_end":
        out = msg.get("aggregated_output")
        if out is None:
            out = (msg.get("stdout") or "") + (msg.get("stderr") or "")
        exit_code = as_int(msg.get("exit_code"))
        return [{"type": "tool_result", "id": msg.get("call_id"), "name": "shell", "exit_code": exit_code,
                 "is_error": exit_code not in (None, 0), **tail(out)}]
    if kind == "patch_apply_begin":
        changes = msg.get("changes") if isinstance(msg.get("changes"), dict) else {}
        return [{"type": "tool_call", "id": msg.get("call_id"), "name": "apply_patch",
                 "changes": [{"path": path} for path in list(changes)[:100]]}]
    if kind == "patch_apply_end":
        success = bool(msg.get("success"))
        return [{"type": "tool_result", "id": msg.get("call_id"), "name": "apply_patch", "exit_code": None,
                 "is_error": not success, **tail((msg.get("stdout") or "") + (msg.get("stderr") or ""))}]
    if kind in ("mcp_tool_call_begin", "web_search_begin"):
        return [{"type": "tool_call", "id": msg.get("call_id"), "name": str(kind).removesuffix("_begin")}]
    if kind in ("mcp_tool_call_end", "web_search_end"):
        return [{"type": "tool_result", "id": msg.get("call_id"), "name": str(kind).removesuffix("_end"),
                 "exit_code": None, "is_error": False}]
    if kind == "token_count":
        info = msg.get("info")
        if isinstance(info, dict):
            if isinstance(info.get("total_token_usage"), dict):
                return [{"type": "usage", "scope": "cumulative", **from_openai(info["total_token_usage"]).as_dict()}]
            if isinstance(info.get("last_token_usage"), dict):
                return [{"type": "usage", "scope": "delta", **from_openai(info["last_token_usage"]).as_dict()}]
            return [{"type": "status", "subtype": "token_count"}]
        if info is None and "input_tokens" not in msg:
            return [{"type": "status", "subtype": "token_count"}]
        return [{"type": "usage", "scope": "delta", **from_openai(msg).as_dict()}]
    if kind == "task_complete":
        return [{"type": "completion", "status": "success", "subtype": "task_complete",
                 "result": str(msg.get("last_agent_message") or "")[:4000]}]
    if kind == "turn_aborted":
        return [{"type": "completion", "status": "error", "subtype": "turn_aborted", "is_error": True,
                 "result": str(msg.get("reason") or "")}]
    if kind == "error":
        return [_error(str(msg.get("message") or ""))]
    if kind == "stream_error":
        message = str(msg.get("message") or "")
        failure = codex_failure(message) or ("connection", None)
        return [api_error(failure[0], failure[1], message, retry=True, fatal=False)]
    return [unknown(text, f"legacy msg type {kind!r}")]
