"""A fake of the hosted model APIs that coding-agent CLIs talk to, playing a fixed script.

It speaks the real wire formats on loopback, so the real `claude` and `codex` CLIs run unmodified
against it (`ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`; a Codex `model_providers` entry whose
`base_url` is `http://127.0.0.1:PORT/v1`):

* Anthropic Messages API: ``POST /v1/messages`` with ``stream: true`` answered as server-sent
  events (``message_start``, ``content_block_start|delta|stop``, ``message_delta``,
  ``message_stop``), ``stream: false`` answered with one JSON message; ``POST
  /v1/messages/count_tokens``.
* OpenAI Responses API: ``POST /v1/responses`` with ``stream: true`` answered as server-sent events
  (``response.created``, ``response.output_item.added|done``, ``response.output_text.delta``,
  ``response.completed``).

The script is a list of *steps*; each step is one model turn: optional thinking, optional text and
optional tool calls (shell commands), with the token usage to report. Which step answers a request
is decided by the conversation itself (the number of model turns already in the request's
history), so a CLI that retries a request gets the same answer again. Requests that are not part
of the agent loop (a CLI's side calls: titles, quota probes — recognised by having no tools) get a
short text answer and never advance the script.

Failure behaviours a step can ask for with ``fail: {"status": S, "times": N}``: answer the first N
requests of that step with HTTP status S (401, 429, 500, 529...), or with ``"status": "drop"``
start the event stream and close the connection before the message ends. A huge tool output or a
planted secret need no server support: the scripted commands produce them.

Run it standalone for manual experiments::

    python tests/fakes/scripted_model.py --port 8765 --script script.json --log requests.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------------------
# the script


@dataclass
class Step:
    """One model turn."""

    text: str | None = None
    thinking: str | None = None
    commands: list[str] = field(default_factory=list)  # each becomes one shell tool call
    usage: dict[str, int] = field(default_factory=dict)  # input, cache_read, cache_write, output, reasoning
    fail: dict[str, Any] | None = None  # {"status": 401, "times": 2, "type": "authentication_error"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(text=data.get("text"), thinking=data.get("thinking"),
                   commands=list(data.get("commands", [])), usage=dict(data.get("usage", {})),
                   fail=data.get("fail"))


DEFAULT_USAGE = {"input": 1200, "cache_read": 800, "cache_write": 300, "output": 150, "reasoning": 40}


@dataclass
class Script:
    steps: list[Step]
    model: str = "scripted-model"
    final_text: str = "Done."

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Script:
        return cls(steps=[Step.from_dict(step) for step in data["steps"]],
                   model=data.get("model", "scripted-model"), final_text=data.get("final_text", "Done."))

    def step(self, index: int) -> Step:
        if index < len(self.steps):
            return self.steps[index]
        return Step(text=self.final_text)


# --------------------------------------------------------------------------------------------------
# the server


class ScriptedModel:
    """The server: `start()` binds 127.0.0.1 on a free port (or `port`) and serves in a thread."""

    def __init__(self, script: Script, *, port: int = 0, log_path: Path | None = None,
                 routes: dict[str, Script] | None = None) -> None:
        self.script = script
        self.routes = dict(routes or {})  # marker text in a request -> the script that answers it
        self.port = port
        self.log_path = log_path
        self.requests: list[dict[str, Any]] = []  # method, path, step, status, body summary
        self._failures: dict[tuple[str, int], int] = {}  # (route, step index) -> errors already sent
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ScriptedModel:
        owner = self

        class Handler(_Handler):
            model = owner

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- bookkeeping ---------------------------------------------------------------------------
    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}{int(time.time() * 1000) % 100000:05d}"

    def record(self, entry: dict[str, Any]) -> None:
        entry.setdefault("ts", time.time())  # when the request arrived (requests after a budget stop)
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with open(self.log_path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry) + "\n")

    def script_for(self, body: dict[str, Any]) -> tuple[str, Script]:
        """The script of the first route whose marker the request's text contains, else the default.
        (Several jobs can share one server: each job's prompt names its own repo path.)"""
        if self.routes:
            text = json.dumps(body)
            for marker, script in self.routes.items():
                if marker in text:
                    return marker, script
        return "", self.script

    def failure_for(self, route: str, index: int, step: Step) -> dict[str, Any] | None:
        """The error to answer with for this request of `step`, if it still owes one."""
        if not step.fail:
            return None
        with self._lock:
            sent = self._failures.get((route, index), 0)
            if sent >= int(step.fail.get("times", 1)):
                return None
            self._failures[(route, index)] = sent + 1
        return step.fail


class _Handler(BaseHTTPRequestHandler):
    model: ScriptedModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ------------------------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding", "").lower() in ("gzip", "zstd", "br"):
            if self.headers.get("Content-Encoding").lower() == "gzip":
                import gzip
                raw = gzip.decompress(raw)
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"_raw": raw[:200].decode(errors="replace")}

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, event: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    # -- routes --------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self.model.record({"method": "GET", "path": self.path})
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": self.model.script.model, "object": "model"}],
                             "models": []})
            return
        self._json(404, {"error": {"type": "not_found", "message": f"no route {self.path}"}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/messages/count_tokens"):
            self.model.record({"method": "POST", "path": self.path, "kind": "count_tokens"})
            self._json(200, {"input_tokens": 1000})
        elif path.endswith("/messages"):
            self._anthropic(body)
        elif path.endswith("/responses"):
            self._responses(body)
        else:
            self.model.record({"method": "POST", "path": self.path, "kind": "unknown"})
            self._json(404, {"error": {"type": "not_found", "message": f"no route {self.path}"}})

    # -- Anthropic Messages API ------------------------------------------------------------------
    def _anthropic(self, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        agent_loop = bool(body.get("tools"))
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        route, script = self.model.script_for(body)
        step = script.step(turns) if agent_loop else Step(text="ok", usage={"input": 10, "output": 2})
        entry = {"method": "POST", "path": self.path, "api": "anthropic", "agent_loop": agent_loop,
                 "step": turns if agent_loop else None, "stream": bool(body.get("stream")), "route": route,
                 "model": body.get("model"), "tools": [t.get("name") for t in body.get("tools") or []][:50]}
        failure = self.model.failure_for(route, turns, step) if agent_loop else None
        if failure and failure.get("status") == "drop":
            entry["status"] = "drop"
            self.model.record(entry)
            if not body.get("stream"):
                self.close_connection = True  # no answer at all: the connection just closes
                return
            self._sse_start()
            self._sse("message_start", {"type": "message_start", "message": {
                "id": self.model.next_id("msg"), "type": "message", "role": "assistant", "model": body.get("model"),
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1}}})
            return  # the connection closes mid-stream
        if failure:
            status = int(failure.get("status", 500))
            entry["status"] = status
            self.model.record(entry)
            kind = failure.get("type") or {401: "authentication_error", 429: "rate_limit_error",
                                           529: "overloaded_error"}.get(status, "api_error")
            self._json(status, {"type": "error", "error": {"type": kind, "message": failure.get("message", kind)}},
                       {"request-id": self.model.next_id("req")})
            return
        usage = {**DEFAULT_USAGE, **step.usage}
        entry.update(status=200, usage=usage)  # what this answer serves (tests compare counts with it)
        self.model.record(entry)
        blocks: list[dict[str, Any]] = []
        if step.thinking:
            blocks.append({"type": "thinking", "thinking": step.thinking, "signature": "c2lnbmF0dXJl"})
        if step.text:
            blocks.append({"type": "text", "text": step.text})
        for command in step.commands:
            blocks.append({"type": "tool_use", "id": self.model.next_id("toolu"), "name": "Bash",
                           "input": {"command": command, "description": "run a shell command"}})
        if not blocks:
            blocks.append({"type": "text", "text": script.final_text})
        usage = {**DEFAULT_USAGE, **step.usage}
        wire_usage = {"input_tokens": usage["input"], "cache_creation_input_tokens": usage["cache_write"],
                      "cache_read_input_tokens": usage["cache_read"], "output_tokens": usage["output"]}
        stop = "tool_use" if step.commands else "end_turn"
        message = {"id": self.model.next_id("msg"), "type": "message", "role": "assistant",
                   "model": body.get("model") or script.model, "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": wire_usage}
        if not body.get("stream"):
            self._json(200, message)
            return
        self._sse_start()
        start = dict(message, content=[], stop_reason=None, usage={**wire_usage, "output_tokens": 1})
        self._sse("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                self._sse("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": {"type": "text", "text": ""}})
                for piece in _pieces(block["text"]):
                    self._sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                      "delta": {"type": "text_delta", "text": piece}})
            elif block["type"] == "thinking":
                self._sse("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
                self._sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "thinking_delta", "thinking": block["thinking"]}})
                self._sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "signature_delta", "signature": block["signature"]}})
            else:
                self._sse("content_block_start", {"type": "content_block_start", "index": index, "content_block":
                                                  {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                self._sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "input_json_delta",
                                                            "partial_json": json.dumps(block["input"])}})
            self._sse("content_block_stop", {"type": "content_block_stop", "index": index})
        self._sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": usage["output"]}})
        self._sse("message_stop", {"type": "message_stop"})

    # -- OpenAI Responses API --------------------------------------------------------------------
    def _responses(self, body: dict[str, Any]) -> None:
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        tools = body.get("tools") or []
        tool_names = [t.get("name") or t.get("type") for t in tools]
        agent_loop = bool(tools)
        # A model turn in the history: each run of assistant output items (messages, function calls,
        # reasoning) that follows a user message or tool outputs.
        turns = 0
        previous_was_model = False
        for item in items:
            is_model = item.get("type") in ("function_call", "reasoning", "local_shell_call", "custom_tool_call") or (
                item.get("type", "message") == "message" and item.get("role") == "assistant")
            if is_model and not previous_was_model:
                turns += 1
            previous_was_model = is_model
        route, script = self.model.script_for(body)
        step = script.step(turns) if agent_loop else Step(text="ok", usage={"input": 10, "output": 2})
        entry = {"method": "POST", "path": self.path, "api": "responses", "agent_loop": agent_loop,
                 "step": turns if agent_loop else None, "stream": bool(body.get("stream")), "route": route,
                 "model": body.get("model"), "tools": tool_names[:50]}
        failure = self.model.failure_for(route, turns, step) if agent_loop else None
        if failure and failure.get("status") == "drop":
            entry["status"] = "drop"
            self.model.record(entry)
            self._sse_start()
            self._sse("response.created", {"type": "response.created", "sequence_number": 0, "response": {
                "id": self.model.next_id("resp"), "object": "response", "status": "in_progress", "output": []}})
            return  # the connection closes before response.completed
        if failure:
            status = int(failure.get("status", 500))
            entry["status"] = status
            self.model.record(entry)
            self._json(status, {"error": {"type": failure.get("type", "invalid_request_error"),
                                          "message": failure.get("message", "scripted failure"),
                                          "code": failure.get("code")}})
            return
        usage = {**DEFAULT_USAGE, **step.usage}
        entry.update(status=200, usage=usage)
        self.model.record(entry)
        output: list[dict[str, Any]] = []
        if step.thinking:
            output.append({"type": "reasoning", "id": self.model.next_id("rs"),
                           "summary": [{"type": "summary_text", "text": step.thinking}], "content": None,
                           "encrypted_content": None})
        if step.text or not step.commands:
            output.append({"type": "message", "id": self.model.next_id("msg"), "status": "completed",
                           "role": "assistant", "content": [{"type": "output_text", "text": step.text or script.final_text,
                                                             "annotations": []}]})
        for command in step.commands:
            output.append(_function_call(self.model, tool_names, command))
        response_id = self.model.next_id("resp")
        base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": body.get("model") or script.model}
        total_input = usage["input"] + usage["cache_read"]
        wire_usage = {"input_tokens": total_input, "input_tokens_details": {"cached_tokens": usage["cache_read"]},
                      "output_tokens": usage["output"], "output_tokens_details": {"reasoning_tokens": usage["reasoning"]},
                      "total_tokens": total_input + usage["output"]}
        if not body.get("stream"):
            self._json(200, {**base, "status": "completed", "output": output, "usage": wire_usage})
            return
        self._sse_start()
        seq = itertools.count()
        self._sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                       "response": {**base, "status": "in_progress", "output": []}})
        for index, item in enumerate(output):
            added = dict(item, status="in_progress")
            if item["type"] == "message":
                added["content"] = []
            if item["type"] == "function_call":
                added["arguments"] = ""
            self._sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                                     "output_index": index, "item": added})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                for piece in _pieces(text):
                    self._sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": next(seq),
                                                             "item_id": item["id"], "output_index": index,
                                                             "content_index": 0, "delta": piece})
            self._sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                                    "output_index": index, "item": item})
        self._sse("response.completed", {"type": "response.completed", "sequence_number": next(seq),
                                         "response": {**base, "status": "completed", "output": output,
                                                      "usage": wire_usage}})


def _function_call(model: ScriptedModel, tool_names: list[str], command: str) -> dict[str, Any]:
    """A shell call in whichever shape the CLI offered (shell, shell_command, exec_command...)."""
    call = {"type": "function_call", "id": model.next_id("fc"), "call_id": model.next_id("call"), "status": "completed"}
    if "shell_command" in tool_names:
        return {**call, "name": "shell_command", "arguments": json.dumps({"command": command})}
    if "exec_command" in tool_names:
        return {**call, "name": "exec_command", "arguments": json.dumps({"cmd": command})}
    if "shell" in tool_names:
        return {**call, "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", command]})}
    if "local_shell" in tool_names:
        return {"type": "local_shell_call", "id": model.next_id("lsh"), "call_id": call["call_id"], "status": "completed",
                "action": {"type": "exec", "command": ["bash", "-lc", command], "env": {}}}
    return {**call, "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", command]})}


def _pieces(text: str, size: int = 40) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    server = ScriptedModel(Script.from_dict(json.loads(args.script.read_text())), port=args.port, log_path=args.log)
    server.start()
    print(f"listening on {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
