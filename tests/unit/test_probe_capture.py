"""What probes and an agent's interpreter print is read with a cap (probes/capture.py): a flood on
stdout costs the engine a head and a tail of it, never the whole."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from resenv.probes.c0 import check_interpreter

FLOOD_MB = 100


def flooding_interpreter(tmp_path: Path, where: str = "") -> Path:
    """A 'python' that answers anything with FLOOD_MB MB on stdout (or stderr) and exits 0."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nhead -c {FLOOD_MB * 1000 * 1000} /dev/zero {where}\nexit 0\n")
    script.chmod(0o755)
    return script


async def test_an_interpreter_flooding_stdout_is_read_capped_and_is_no_python(tmp_path: Path) -> None:
    python = flooding_interpreter(tmp_path)
    tracemalloc.start()
    try:
        ok, answer = await check_interpreter(python, env={"PATH": os.environ["PATH"]}, cwd=tmp_path, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20
    assert ok is False and "printed more than" in answer and len(answer) < 2000


async def test_an_interpreter_flooding_stderr_and_failing_is_read_capped(tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nhead -c {FLOOD_MB * 1000 * 1000} /dev/zero >&2\necho the-last-words >&2\nexit 3\n")
    script.chmod(0o755)
    tracemalloc.start()
    try:
        ok, answer = await check_interpreter(script, env={"PATH": os.environ["PATH"]}, cwd=tmp_path, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20
    assert ok is False and "exited 3" in answer and "the-last-words" in answer and len(answer) < 2000


async def test_a_real_interpreter_still_answers(tmp_path: Path) -> None:
    import sys

    ok, answer = await check_interpreter(Path(sys.executable), env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert ok is True and answer == sys.version


async def test_run_capped_keeps_head_and_tail_and_stops_a_flood(tmp_path: Path) -> None:
    from resenv.probes.capture import run_capped

    run = await run_capped(["sh", "-c", "echo first; yes middle; echo never"], env={"PATH": os.environ["PATH"]},
                           cwd=tmp_path, timeout=60, head=100, tail=100, stop_after=10 * 2**20)
    assert run.overflow is True and run.returncode is not None
    value = run.stdout.value()
    assert value.startswith(b"first\nmiddle\n") and b"bytes left out" in value and len(value) < 300


async def test_run_capped_writes_stdout_up_to_its_limit(tmp_path: Path) -> None:
    from resenv.probes.capture import run_capped

    out = tmp_path / "out.json"
    small = await run_capped(["sh", "-c", "echo '{\"a\": 1}'"], env={"PATH": os.environ["PATH"]}, cwd=tmp_path,
                             timeout=60, stdout_path=out, stdout_limit=1000)
    assert (small.returncode, small.overflow, out.read_bytes()) == (0, False, b'{"a": 1}\n')
    big = await run_capped(["sh", "-c", "head -c 5000000 /dev/zero"], env={"PATH": os.environ["PATH"]},
                           cwd=tmp_path, timeout=60, stdout_path=out, stdout_limit=100_000)
    assert big.overflow is True and out.stat().st_size == 100_000


async def test_run_capped_times_out_and_kills_the_group(tmp_path: Path) -> None:
    from resenv.probes.capture import run_capped

    marker = tmp_path / "pid"
    run = await run_capped(["sh", "-c", f"sleep 300 & echo $! > {marker}; wait"], env={"PATH": os.environ["PATH"]},
                           cwd=tmp_path, timeout=0.5)
    assert run.returncode is None
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_head_tail() -> None:
    from resenv.probes.capture import HeadTail

    kept = HeadTail(head=4, tail=3)
    for chunk in (b"ab", b"cdef", b"ghij"):
        kept.feed(chunk)
    assert (bytes(kept.head), bytes(kept.tail), kept.total, kept.cut) == (b"abcd", b"hij", 10, True)
    assert kept.value() == b"abcd\n[\xe2\x80\xa6 3 bytes left out \xe2\x80\xa6]\nhij"
    whole = HeadTail(head=4, tail=3)
    whole.feed(b"abcdefg")
    assert whole.value() == b"abcdefg" and not whole.cut


@pytest.mark.parametrize("text", ["[" * 200_000, "", "\n\n", "not json", "{\"a\": 1"])
def test_last_json_line_refuses_what_is_no_json(text: str) -> None:
    from resenv.probes.capture import last_json_line

    with pytest.raises(ValueError):
        last_json_line(text)


def test_last_json_line_reads_the_last_line() -> None:
    from resenv.probes.capture import last_json_line

    assert last_json_line('noise\n{"a": 1}\n\n') == {"a": 1}


def test_capped_reads(tmp_path: Path) -> None:
    from resenv.probes.capture import read_head, read_tail

    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_head(path, 4) == b"0123" and read_tail(path, 4) == b"6789" and read_tail(path, 100) == b"0123456789"
    assert read_head(tmp_path / "missing", 4) == b"" == read_tail(tmp_path / "missing", 4)
