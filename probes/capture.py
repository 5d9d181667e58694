"""Capped capture of a child process's output, for the host-side judges.

What a probe, an agent's interpreter or a tool prints is read through these, never whole: an
interpreter that answers ``print(sys.version)`` with gigabytes must cost the engine a few kilobytes.
`HeadTail` keeps the first and last bytes of a stream and counts the rest; `run_capped` runs a
command in its own process group with both streams captured that way (stdout optionally into a file,
up to a limit), stops it once its stdout is past ``stop_after``, and kills the group on timeout.
`read_head`/`read_tail` read a capped part of a file a command wrote (a raw log);
`last_json_line` decodes a probe's answer from such a part.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
DRAIN_S = 5.0


class HeadTail:
    """The first `head` and the last `tail` bytes of a stream fed in chunks, and its total size."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_cap, self.tail_cap = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap > 0:
            self.tail += chunk[-self.tail_cap:]
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def cut(self) -> bool:
        """Bytes between the head and the tail were left out."""
        return self.total > len(self.head) + len(self.tail)

    def value(self) -> bytes:
        """Head and tail, with a marker where bytes were left out."""
        if not self.cut:
            return bytes(self.head + self.tail)
        left_out = self.total - len(self.head) - len(self.tail)
        return bytes(self.head) + f"\n[… {left_out:,} bytes left out …]\n".encode() + bytes(self.tail)


@dataclass
class Captured:
    returncode: int | None  # None: it ran into the timeout and its group was killed
    stdout: HeadTail
    stderr: HeadTail
    overflow: bool = False  # stdout went past its limit (`stop_after` or the file's): the group was killed


async def run_capped(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | str, timeout: float,
    head: int = HEAD_BYTES, tail: int = TAIL_BYTES, stop_after: int | None = None,
    stdout_path: Path | None = None, stdout_limit: int | None = None,
) -> Captured:
    """Run `argv` in its own session with stdin closed; memory stays bounded by `head` + `tail` per
    stream whatever it prints. `stdout_path` also receives stdout whole, up to `stdout_limit` bytes.
    Past `stop_after` bytes of stdout (or the file's limit) the group is killed (``overflow``).
    Cancellation kills the group and propagates. Raises OSError when it cannot start."""
    process = await asyncio.create_subprocess_exec(
        *argv, env=dict(env), cwd=str(cwd), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    captured = Captured(None, HeadTail(head, tail), HeadTail(head, tail))
    sink: BinaryIO | None = open(stdout_path, "wb") if stdout_path is not None else None
    limit = stop_after
    if stdout_limit is not None and sink is not None:
        limit = stdout_limit if limit is None else min(limit, stdout_limit)

    def kill() -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def pump_stdout() -> None:
        assert process.stdout is not None
        written = 0
        while chunk := await process.stdout.read(READ_CHUNK):
            captured.stdout.feed(chunk)
            if captured.overflow:
                continue  # killed: only draining what is left in the pipe
            if limit is not None and captured.stdout.total > limit:
                captured.overflow = True
                kill()
                chunk = chunk[: max(0, limit - written)]
            if sink is not None and chunk:
                sink.write(chunk)
                written += len(chunk)

    async def pump_stderr() -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.read(READ_CHUNK):
            captured.stderr.feed(chunk)

    async def communicate() -> int:
        await asyncio.gather(pump_stdout(), pump_stderr())
        return await process.wait()

    try:
        captured.returncode = await asyncio.wait_for(communicate(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        kill()
        try:
            await asyncio.wait_for(process.wait(), DRAIN_S)
        except asyncio.TimeoutError:
            pass
        if isinstance(exc, asyncio.CancelledError):
            raise
        captured.returncode = None
    finally:
        if sink is not None:
            sink.close()
    return captured


def last_json_line(text: str) -> object:
    """The JSON value on the last non-blank line of a probe's (capped) output. Raises ValueError when
    there is none or it is not JSON, nested too deeply included (a hostile interpreter can print
    ``[[[[…`` to make a parser recurse)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    try:
        return json.loads(lines[-1])
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def read_head(path: Path, limit: int) -> bytes:
    """The first `limit` bytes of a file (b"" when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except FileNotFoundError:
        return b""


def read_tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of a file (b"" when it does not exist), never more in memory."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            return handle.read(limit)
    except FileNotFoundError:
        return b""
