"""The `claude-code` agent: Claude Code's CLI in print mode, read from its stream-json output.

Command: ``claude -p --output-format stream-json --verbose --include-partial-messages
--no-session-persistence --permission-mode <mode> [--model M] [--max-turns N] [args...]`` with the
prompt on stdin (then closed), in the job's work dir. The sandbox gives it a private HOME, so its
settings and caches stay in the job; it keeps no session transcript (which would hold every tool
output, a printed key included), and its state folder is kept in memory (`private_state`).

The stream (one JSON object per line; parsed as JSON, never by line prefixes):

* ``system``: ``init`` (session id, model, tools, CLI version) → ``session``; ``api_retry``
  (attempt, max_retries, error_status, error) → a model-API ``error`` with ``retry: true`` (see
  `api_errors`); ``permission_denied`` → ``error`` ``permission_denied``; other subtypes
  (``status: requesting`` before each model request, background tasks, thinking estimates…) →
  ``status``.
* ``assistant``: one line per content block (``text``, ``thinking``, ``redacted_thinking``,
  ``tool_use``), all blocks of one API message sharing ``message.id`` and its ``usage``. The
  usage rides on the event with the message id; the session counts each id once. Its
  ``output_tokens`` is a streaming placeholder. A message with ``is_api_error_message`` is the CLI
  telling a model-API failure (fatal); any other ``<synthetic>`` message is text the CLI wrote
  itself (``message`` with ``synthetic: true``).
* ``stream_event`` (``--include-partial-messages``): the API's own streaming events, each with
  ``api_message_id``; ``message_start`` (input counts) and ``message_delta`` (the message's final
  output count) → ``usage`` with scope ``message``, so a stopped or cut stream is counted exactly
  and a budget sees a message's cost as soon as it ends; content deltas → nothing (the assistant
  lines carry the whole blocks).
* ``user``: ``tool_result`` blocks → ``tool_result`` (exit code from the Bash tool's
  ``Exit code N`` or 0 on success, ``denied`` when a permission check rejected the call).
* ``result``: the process's running totals (``usage``, ``modelUsage`` per model with ``costUSD``,
  ``total_cost_usd``), ``subtype`` (``success``, ``error_max_turns``,
  ``error_during_execution``…), ``is_error`` (true even with subtype ``success`` when the run ended
  on an API error; then ``terminal_reason: api_error`` and ``api_error_status``: the completion gets
  an ``api_error``), ``num_turns``, ``duration_ms``, ``permission_denials`` → ``completion``.

A run without a ``result`` line is incomplete (the session records it); a process that lingers
after ``result`` is killed after `completion_grace_s`.

Verified against Claude Code 2.1.332 (``tests/fixtures/streams/claude-*.jsonl``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..sandbox.base import OutputLine
from ..spec import render
from .base import JobPaths
from .llm import CliAgent
from .transcript import (
    as_int,
    compact_json,
    head,
    stdout_object,
    tail,
    unknown,
)
from .api_errors import api_error, claude_kind, completion_failure
from .usage import from_anthropic, from_claude_model_usage

_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (-?\d+)\b")
FILE_TOOLS = {"Write", "Edit", "MultiEdit", "Read", "NotebookEdit", "NotebookRead"}


class ClaudeCodeAgent(CliAgent):
    kind = "claude-code"

    def default_env(self) -> dict[str, str]:
        env = {
            # A benchmark run is unattended: no update checks, telemetry or error reports.
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if self.spec.permission_mode == "bypassPermissions":
            # The CLI refuses to skip permission checks as root unless told it is sandboxed; it is
            # (a process or container sandbox of resenv's own).
            env["IS_SANDBOX"] = "1"
        return env

    def argv(self, paths: JobPaths) -> list[str]:
        argv = [self.spec.executable, "-p", "--output-format", "stream-json", "--verbose",
                "--include-partial-messages", "--no-session-persistence", "--permission-mode",
                self.spec.permission_mode]
        if self.spec.model:
            argv += ["--model", self.spec.model]
        if self.spec.max_turns:
            argv += ["--max-turns", str(self.spec.max_turns)]
        values = paths.template_values()
        return argv + [render(arg, values) for arg in self.spec.args]

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        return parse_claude_line(line)

    def private_state(self, paths: JobPaths, home: Path) -> tuple[list[Path], dict[str, str]]:
        """The CLI's own state, which copies tool outputs (so a printed key): ``~/.claude`` and its
        temp folder (tool outputs, by default under TMPDIR), moved into it. The sandbox keeps them in
        memory where it can (see the lifecycle's agent phase)."""
        return [home / ".claude"], {"CLAUDE_CODE_TMPDIR": str(home / ".claude" / "tmp")}


# --------------------------------------------------------------------------------------------------
# the parser (stateless: one line in, events out)


def parse_claude_line(line: OutputLine) -> list[dict[str, Any]]:
    data, events = stdout_object(line)
    if data is None:
        return events
    kind = data.get("type")
    handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
    if handler is None:
        return [unknown(line.text, f"type {kind!r}")]
    events = handler(data)
    if not events and kind == "stream_event":
        return events  # a content delta: nothing to keep beyond the raw log
    return events if events else [unknown(line.text, "no content")]


def _system(data: dict[str, Any]) -> list[dict[str, Any]]:
    subtype = data.get("subtype")
    if subtype == "init":
        tools = data.get("tools") if isinstance(data.get("tools"), list) else []
        return [{"type": "session", "session_id": data.get("session_id"), "model": data.get("model"),
                 "version": data.get("claude_code_version"), "cwd": data.get("cwd"),
                 "permission_mode": data.get("permissionMode"), "api_key_source": data.get("apiKeySource"),
                 "tools": [str(t) for t in tools][:200]}]
    if subtype == "api_retry":
        status = as_int(data.get("error_status"))
        return [api_error(claude_kind(status, data.get("error")), status, str(data.get("error") or ""), retry=True,
                          fatal=False, attempt=as_int(data.get("attempt")), max_retries=as_int(data.get("max_retries")),
                          retry_delay_ms=data.get("retry_delay_ms"))]
    if subtype == "permission_denied":
        return [{"type": "error", "category": "permission_denied", "retry": False, "fatal": False,
                 "tool": data.get("tool_name"), "id": data.get("tool_use_id"),
                 "message": str(data.get("message") or "")[:2000]}]
    event: dict[str, Any] = {"type": "status", "subtype": str(subtype)}
    for key in ("task_id", "tool_use_id", "status", "description", "summary", "task_type", "estimated_tokens"):
        if key in data and isinstance(data[key], (str, int, float, bool)):
            event[key] = data[key]
    return [event]


def _assistant(data: dict[str, Any]) -> list[dict[str, Any]]:
    message = data.get("message") if isinstance(data.get("message"), dict) else {}
    message_id = message.get("id")
    model = message.get("model")
    content = message.get("content") if isinstance(message.get("content"), list) else []
    common: dict[str, Any] = {}
    if data.get("parent_tool_use_id"):
        common["parent_id"] = data["parent_tool_use_id"]
    text_blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if data.get("is_api_error_message"):
        status = as_int(data.get("api_error_status"))
        text = " ".join(str(b.get("text", "")) for b in text_blocks)
        return [api_error(claude_kind(status, data.get("api_error"), data.get("error"), message=text), status, text,
                          retry=False, fatal=True, error=data.get("error"), **common)]
    if model == "<synthetic>":  # a message the CLI wrote itself ("No response requested."): no model spoke
        return [{"type": "message", **head(" ".join(str(b.get("text", "")) for b in text_blocks)),
                 "synthetic": True, **common}]
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else None
    if usage is not None and isinstance(message_id, str):
        common["message_id"] = message_id
        common["model"] = model
        common["usage"] = from_anthropic(usage).as_dict()
    elif isinstance(message_id, str):
        common["message_id"] = message_id
    events = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            events.append({"type": "message", **head(block.get("text")), **common})
        elif kind == "thinking":
            events.append({"type": "thinking", **head(block.get("thinking")), **common})
        elif kind == "redacted_thinking":
            events.append({"type": "thinking", "text": "", "redacted": True, **common})
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            events.append({"type": "tool_call", **_tool_call(block), **common})
        else:
            events.append({"type": "unknown", "reason": f"content block {kind!r}",
                           "raw": compact_json(block, 16_384), **common})
    if not events and common.get("usage"):
        events.append({"type": "status", "subtype": "empty_message", **common})
    return events


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    name = block.get("name")
    tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
    event: dict[str, Any] = {"id": block.get("id"), "name": name}
    if isinstance(tool_input.get("command"), str):
        event["command"] = tool_input["command"][:8000]
    if name in FILE_TOOLS:
        path = tool_input.get("file_path") or tool_input.get("notebook_path") or tool_input.get("path")
        if isinstance(path, str):
            event["path"] = path
    if isinstance(tool_input.get("description"), str):
        event["description"] = tool_input["description"][:500]
    event["input"] = compact_json(tool_input)
    return event


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict) and item.get("type") == "text":
                parts.append(str(item.get("text", "")))
            elif isinstance(item, dict):
                parts.append(f"[{item.get('type')}]")
            else:
                parts.append(str(item))
        return "\n".join(parts)
    return "" if content is None else str(content)


def _user(data: dict[str, Any]) -> list[dict[str, Any]]:
    message = data.get("message") if isinstance(data.get("message"), dict) else {}
    content = message.get("content")
    meta = {m.get("id"): m for m in data.get("tool_result_meta") or [] if isinstance(m, dict)}
    extra = data.get("tool_use_result")
    common: dict[str, Any] = {}
    if data.get("parent_tool_use_id"):
        common["parent_id"] = data["parent_tool_use_id"]
    if isinstance(content, str):
        return [{"type": "status", "subtype": "user_text", **head(content, 2000), **common}]
    events = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") != "tool_result":
            events.append({"type": "status", "subtype": f"user_{block.get('type')}",
                           **head(_flatten([block]), 2000), **common})
            continue
        text = _flatten(block.get("content"))
        is_error = bool(block.get("is_error"))
        event: dict[str, Any] = {"type": "tool_result", "id": block.get("tool_use_id"), "is_error": is_error,
                                 "exit_code": None, **tail(text), **common}
        match = _EXIT_CODE.match(text)
        if match:
            event["exit_code"] = int(match.group(1))
        elif not is_error and isinstance(extra, dict) and "stdout" in extra:
            event["exit_code"] = None if extra.get("interrupted") else 0
        if isinstance(extra, dict) and extra.get("interrupted"):
            event["interrupted"] = True
        decision = meta.get(block.get("tool_use_id"), {})
        verdict = decision.get("permission_decision") if isinstance(decision.get("permission_decision"), dict) else {}
        if verdict.get("decision") == "reject" or decision.get("non_execution_kind"):
            event["denied"] = True
        events.append(event)
    return events


def _result(data: dict[str, Any]) -> list[dict[str, Any]]:
    subtype = data.get("subtype")
    is_error = bool(data.get("is_error"))
    event: dict[str, Any] = {
        "type": "completion",
        "status": "success" if subtype == "success" and not is_error else "error",
        "subtype": subtype, "is_error": is_error, "session_id": data.get("session_id"),
        "num_turns": as_int(data.get("num_turns")),
        "cost_usd": data.get("total_cost_usd") if isinstance(data.get("total_cost_usd"), (int, float)) else None,
        "terminal_reason": data.get("terminal_reason"),
    }
    for key, name in (("duration_ms", "duration_s"), ("duration_api_ms", "api_duration_s")):
        if isinstance(data.get(key), (int, float)):
            event[name] = round(data[key] / 1000, 3)
    if isinstance(data.get("result"), str):
        event["result"] = head(data["result"], 4000)["text"]
    if data.get("api_error_status") is not None:
        event["api_error_status"] = data.get("api_error_status")
    if is_error and data.get("terminal_reason") == "api_error":
        status = as_int(data.get("api_error_status"))
        message = str(data.get("result") or "")
        kind = claude_kind(status, "unknown" if status is None else None, message=message)  # no status: no answer
        event["api_error"] = completion_failure(kind, status, message)
    if isinstance(data.get("errors"), list):
        event["errors"] = [str(e)[:500] for e in data["errors"][:20]]
    denials = data.get("permission_denials")
    if isinstance(denials, list):
        event["permission_denials"] = len(denials)
        event["denied_tools"] = [d.get("tool_name") for d in denials[:50] if isinstance(d, dict)]
    if isinstance(data.get("usage"), dict):
        event["usage"] = from_anthropic(data["usage"]).as_dict()
    models = data.get("modelUsage")
    if isinstance(models, dict) and models:
        event["models"] = {
            str(model): {**from_claude_model_usage(entry).as_dict(),
                         "cost_usd": entry.get("costUSD") if isinstance(entry.get("costUSD"), (int, float)) else None}
            for model, entry in models.items() if isinstance(entry, dict)
        }
    return [event]


def _quiet(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "status", "subtype": str(data.get("type"))}]


def _stream_event(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A raw API streaming event (``--include-partial-messages``). Only the usage is read: the
    ``assistant`` lines repeat every content block whole, so deltas would only bloat the store (the
    raw log keeps them). ``message_start`` has the input counts; ``message_delta`` the final output
    count, which the ``assistant`` lines never get (theirs is a placeholder of 1), and it comes
    before the tools run, so a budget can stop the agent before its next request."""
    event = data.get("event") if isinstance(data.get("event"), dict) else {}
    kind = event.get("type")
    if kind == "message_start" and isinstance(event.get("message"), dict):
        message = event["message"]
        message_id, usage = message.get("id"), message.get("usage")
        model = message.get("model")
    elif kind == "message_delta":
        message_id, usage, model = data.get("api_message_id"), event.get("usage"), None
    else:
        return []
    if not isinstance(message_id, str) or not isinstance(usage, dict):
        return [{"type": "status", "subtype": f"stream_event.{kind}"}]
    out: dict[str, Any] = {"type": "usage", "scope": "message", "message_id": message_id, "model": model,
                           "stage": kind, **from_anthropic(usage).as_dict()}
    if data.get("parent_tool_use_id"):
        out["parent_id"] = data["parent_tool_use_id"]
    return [out]


_HANDLERS = {
    "system": _system,
    "assistant": _assistant,
    "user": _user,
    "result": _result,
    "stream_event": _stream_event,
    "keep_alive": _quiet,
    "control_request": _quiet,
    "control_response": _quiet,
}
