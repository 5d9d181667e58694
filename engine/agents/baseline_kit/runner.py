"""How the baseline agent reports and runs: its jsonl events on stdout, and each command run with its
output streamed, a timeout and its whole process tree killed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .constants import STREAM_LINES, TAIL_CHARS


# --------------------------------------------------------------------------------------------------
# events


class Events:
    """Writes resenv's jsonl events on stdout; thread-safe (command output is read by a thread)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.lock = threading.Lock()
        self.calls = 0

    def emit(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, ensure_ascii=False, default=str)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def message(self, step: str, text: str, **extra: Any) -> None:
        self.emit({"type": "message", "step": step, "text": text, **extra})

    def error(self, step: str, category: str, message: str, **extra: Any) -> None:
        self.emit({"type": "error", "step": step, "category": category, "message": message, **extra})

    def next_id(self) -> str:
        with self.lock:
            self.calls += 1
            return f"c{self.calls}"


# --------------------------------------------------------------------------------------------------
# running commands


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
            ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill a command and everything it started (they stay in the sandbox's process group, so the
    sandbox can still pause and kill them; here only this command's own tree is ended)."""
    victims = _descendants(proc.pid) + [proc.pid]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Result:
    def __init__(self, exit_code: int | None, seconds: float, output: str, timed_out: bool,
                 skipped: bool = False) -> None:
        self.exit_code, self.seconds, self.output = exit_code, seconds, output
        self.timed_out, self.skipped = timed_out, skipped

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Runner:
    """Runs commands with events for each, under the budget."""

    def __init__(self, events: Events, budget_s: float | None, reserve_s: float | None = None) -> None:
        self.events = events
        self.start = time.monotonic()
        self.deadline = None if budget_s is None else self.start + budget_s
        if reserve_s is None and budget_s is not None:
            reserve_s = min(90.0, max(10.0, 0.15 * budget_s))
        self.reserve = reserve_s or 0.0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def install_time_left(self) -> float | None:
        """Seconds an install step may still take (the reserve is kept for verify + report)."""
        left = self.remaining()
        return None if left is None else left - self.reserve

    def run(self, step: str, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, install: bool = False, display: list[str] | None = None,
            quiet: bool = False) -> Result:
        """Run `argv` (shown in the events as `display`, if given). A `quiet` command (the agent's
        own measurement scripts, whose output is one JSON line) streams no output events."""
        limit = timeout
        if self.deadline is not None:
            left = (self.install_time_left() if install else self.remaining()) or 0.0
            left = left if install else left - 2
            if left < 5:
                self.events.error(step, "budget", f"skipped: {max(0, int(left))} s of budget left for this step",
                                  command=argv)
                return Result(None, 0.0, "", False, skipped=True)
            limit = left if limit is None else min(limit, left)
        call_id = self.events.next_id()
        self.events.emit({"type": "tool_call", "id": call_id, "name": "shell", "step": step,
                          "command": display or argv,
                          "cwd": str(cwd) if cwd else os.getcwd(),
                          "timeout_s": None if limit is None else round(limit, 1)})
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
        except OSError as exc:
            message = f"cannot start {argv[0]}: {exc.strerror or exc}"
            self.events.emit({"type": "tool_result", "id": call_id, "exit_code": None, "seconds": 0.0,
                              "timed_out": False, "output_tail": message, "lines_dropped": 0})
            return Result(None, 0.0, message, False)
        tail: list[str] = []
        size = [0, 0]  # chars in tail, lines dropped from the stream

        def pump() -> None:
            assert proc.stdout is not None
            streamed = 0
            for raw in iter(proc.stdout.readline, b""):
                text = raw.decode(errors="replace").rstrip("\r\n")
                if quiet:
                    pass
                elif streamed < STREAM_LINES:
                    self.events.emit({"type": "output", "id": call_id, "text": text[:4000]})
                    streamed += 1
                else:
                    size[1] += 1
                tail.append(text)
                size[0] += len(text) + 1
                while size[0] > 64 * 1024 and len(tail) > 1:
                    size[0] -= len(tail.pop(0)) + 1

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc)
            proc.wait()
        reader.join(timeout=10)
        seconds = round(time.monotonic() - started, 3)
        output = "\n".join(tail)
        code = None if timed_out else proc.returncode
        shown = output[-TAIL_CHARS:] if not quiet or code != 0 else f"({len(output)} characters of JSON)"
        self.events.emit({"type": "tool_result", "id": call_id, "exit_code": code, "seconds": seconds,
                          "timed_out": timed_out, "output_tail": shown, "lines_dropped": size[1]})
        return Result(code, seconds, output, timed_out)
