"""ProcessSandbox against real processes: streams, env, timeouts, pause, kill, cancel, files."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from resenv.engine.sandbox.base import (
    OutputLine,
    Sandbox,
    SandboxError,
    SandboxPathError,
)
from resenv.engine.sandbox.lines import MAX_LINE_BYTES
from resenv.engine.sandbox.isolation import Isolation
from resenv.engine.sandbox.process import DEFAULT_PATH, ProcessSandbox

PY = sys.executable


@pytest.fixture
async def sb(tmp_path: Path) -> AsyncIterator[ProcessSandbox]:
    box = ProcessSandbox(tmp_path / "wd", term_grace_s=0.3)
    yield box
    await box.close()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def pid_alive(pid: int) -> bool:
    """Alive = exists and is not a zombie (PID 1 in containers may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def cpu_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


async def wait_for_pids(path: Path, n: int, limit_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists():
            pids = [int(x) for x in path.read_text().split()]
            if len(pids) >= n:
                return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never got {n} pids")


async def wait_all_dead(pids: list[int], limit_s: float = 3.0) -> None:
    deadline = time.monotonic() + limit_s
    while any(pid_alive(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if pid_alive(p)]
        await asyncio.sleep(0.02)


class Lines:
    """Collects on_line output and lets a test wait for a given line."""

    def __init__(self) -> None:
        self.lines: list[OutputLine] = []
        self._changed = asyncio.Event()

    def __call__(self, line: OutputLine) -> None:
        self.lines.append(line)
        self._changed.set()

    def texts(self, stream: str = "stdout") -> list[str]:
        return [line.text for line in self.lines if line.stream == stream]

    async def wait_for(self, text: str, limit_s: float = 5.0) -> OutputLine:
        async def _wait() -> OutputLine:
            while True:
                for line in self.lines:
                    if line.text == text:
                        return line
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(_wait(), limit_s)


# -- basics -------------------------------------------------------------------------------------


async def test_is_a_sandbox(sb: ProcessSandbox) -> None:
    assert isinstance(sb, Sandbox)


async def test_exit_code_streams_and_raw_files(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    r = await sb.exec(
        ["sh", "-c", "printf 'out1\\nout2'; printf 'err1\\nerr2\\n' >&2; exit 7"],
        log_prefix=logs / "deep" / "job.c1",
        on_line=got,
    )
    assert r.returncode == 7 and not r.ok
    assert not r.timed_out and r.timeout_name is None and not r.killed
    assert r.stdout_path == logs / "deep" / "job.c1.stdout"
    assert r.stdout_path.read_bytes() == b"out1\nout2"
    assert r.stderr_path.read_bytes() == b"err1\nerr2\n"
    assert [(l.stream, l.line_no, l.text) for l in got.lines if l.stream == "stdout"] == [
        ("stdout", 1, "out1"),
        ("stdout", 2, "out2"),  # the final unterminated line is delivered too
    ]
    assert [(l.line_no, l.text) for l in got.lines if l.stream == "stderr"] == [
        (1, "err1"),
        (2, "err2"),
    ]
    assert 0 <= r.active_s <= r.duration_s < 5


async def test_success_and_empty_files_exist(sb: ProcessSandbox, logs: Path) -> None:
    r = await sb.exec(["true"], log_prefix=logs / "t")
    assert r.ok and r.returncode == 0
    assert r.stdout_path.read_bytes() == b"" and r.stderr_path.read_bytes() == b""


async def test_signal_death_is_negative_returncode(sb: ProcessSandbox, logs: Path) -> None:
    r = await sb.exec(["sh", "-c", "kill -SEGV $$"], log_prefix=logs / "s")
    assert r.returncode == -11 and not r.ok and not r.killed


async def test_command_not_found_is_a_result(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    r = await sb.exec(["/no/such/interpreter", "x.py"], log_prefix=logs / "nf", on_line=got)
    assert r.returncode == 127 and not r.ok
    assert b"/no/such/interpreter" in r.stderr_path.read_bytes()
    assert got.texts("stderr") and "No such file" in got.texts("stderr")[0]


async def test_stdin_bytes_delivered_and_closed(sb: ProcessSandbox, logs: Path) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: larger than a pipe buffer
    r = await sb.exec(["cat"], stdin=payload, log_prefix=logs / "cat", timeout=10)
    assert r.ok
    assert r.stdout_path.read_bytes() == payload


async def test_stdin_ignored_by_child_does_not_block(sb: ProcessSandbox, logs: Path) -> None:
    r = await sb.exec(["true"], stdin=b"x" * 2**20, log_prefix=logs / "t", timeout=10)
    assert r.ok and r.duration_s < 5


async def test_no_stdin_is_dev_null(sb: ProcessSandbox, logs: Path) -> None:
    r = await sb.exec(["sh", "-c", "readlink /proc/self/fd/0; cat"], log_prefix=logs / "n", timeout=5)
    assert r.ok
    assert r.stdout_path.read_bytes() == b"/dev/null\n"


async def test_env_is_clean_and_layered(
    tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESENV_TEST_SECRET", "sk-do-not-leak")
    box = ProcessSandbox(tmp_path / "wd", base_env={"A": "base", "B": "base", "PATH": "/opt/x:" + DEFAULT_PATH})
    try:
        r = await box.exec(["env"], env={"B": "call", "C": "call"}, log_prefix=logs / "env")
    finally:
        await box.close()
    assert r.ok
    env = dict(line.split("=", 1) for line in r.stdout_path.read_text().splitlines())
    assert "RESENV_TEST_SECRET" not in env
    assert "sk-do-not-leak" not in r.stdout_path.read_text()
    wd = (tmp_path / "wd").resolve()
    assert env["HOME"] == str(wd / "home") and (wd / "home").is_dir()
    assert env["TMPDIR"] == str(wd / "tmp") and (wd / "tmp").is_dir()
    assert env["LANG"] == "C.UTF-8"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"] == "/opt/x:" + DEFAULT_PATH
    assert (env["A"], env["B"], env["C"]) == ("base", "call", "call")
    # nothing but what we set (env itself adds nothing; sh is not involved)
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "A", "B", "C"}


async def test_cwd_default_relative_absolute_and_missing(
    sb: ProcessSandbox, logs: Path, tmp_path: Path
) -> None:
    (sb.workdir / "repo" / "sub").mkdir(parents=True)
    r = await sb.exec(["pwd"], log_prefix=logs / "a")
    assert r.stdout_path.read_text().strip() == str(sb.workdir)
    r = await sb.exec(["pwd"], cwd=Path("repo/sub"), log_prefix=logs / "b")
    assert r.stdout_path.read_text().strip() == str(sb.workdir / "repo" / "sub")
    r = await sb.exec(["pwd"], cwd=tmp_path.resolve(), log_prefix=logs / "c")
    assert r.stdout_path.read_text().strip() == str(tmp_path.resolve())
    with pytest.raises(SandboxError):
        await sb.exec(["pwd"], cwd=Path("nope"), log_prefix=logs / "d")


# -- output handling ----------------------------------------------------------------------------


async def test_binary_output_survives_byte_for_byte(sb: ProcessSandbox, logs: Path) -> None:
    data = bytes(range(256)) * 3
    code = f"import sys; sys.stdout.buffer.write({data!r}); sys.stderr.buffer.write({data[::-1]!r})"
    got = Lines()
    r = await sb.exec([PY, "-c", code], log_prefix=logs / "bin", on_line=got)
    assert r.ok
    assert r.stdout_path.read_bytes() == data
    assert r.stderr_path.read_bytes() == data[::-1]
    assert all(isinstance(l.text, str) for l in got.lines)


async def test_ten_megabyte_line(sb: ProcessSandbox, logs: Path) -> None:
    size = 10 * 2**20
    got = Lines()
    code = f"import sys; sys.stdout.buffer.write(b'x' * {size} + b'\\n'); print('after')"
    r = await sb.exec([PY, "-c", code], log_prefix=logs / "big", on_line=got, timeout=20)
    assert r.ok
    assert r.stdout_path.stat().st_size == size + len(b"\nafter\n")
    big, after = got.lines
    assert big.nbytes == size and big.truncated and len(big.text) == MAX_LINE_BYTES
    assert (after.text, after.line_no, after.truncated) == ("after", 2, False)


async def test_carriage_return_progress_and_crlf(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    r = await sb.exec(
        ["sh", "-c", "printf '10%%\\r20%%\\r30%%\\n'; printf 'win\\r\\nline\\r\\n'; printf 'no newline'"],
        log_prefix=logs / "cr",
        on_line=got,
    )
    assert r.ok
    assert got.texts() == ["30%", "win", "line", "no newline"]
    assert r.stdout_path.read_bytes() == b"10%\r20%\r30%\nwin\r\nline\r\nno newline"


async def test_on_line_is_live(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    task = asyncio.create_task(
        sb.exec(["sh", "-c", "echo first; sleep 300"], log_prefix=logs / "live", on_line=got)
    )
    await got.wait_for("first")  # delivered while the command is still running
    assert not task.done()
    assert (logs / "live.stdout").read_bytes() == b"first\n"  # raw file written live too
    await sb.kill()
    assert (await task).killed


async def test_on_line_exception_kills_and_propagates(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    def boom(line: OutputLine) -> None:
        raise RuntimeError("parser bug")

    pidfile = tmp_path / "pid"
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="parser bug"):
        await sb.exec(["sh", "-c", f"echo $$ > {pidfile}; echo hi; sleep 300"], log_prefix=logs / "x", on_line=boom)
    assert time.monotonic() - start < 5
    await wait_all_dead([int(pidfile.read_text())])


async def test_daemonized_leftover_does_not_hang(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    start = time.monotonic()
    r = await sb.exec(
        ["sh", "-c", f"(sleep 100 & echo $! > {pidfile}) ; echo done"], log_prefix=logs / "d", timeout=30
    )
    assert time.monotonic() - start < 5
    assert r.returncode == 0 and not r.timed_out
    assert r.stdout_path.read_bytes() == b"done\n"
    await wait_all_dead(await wait_for_pids(pidfile, 1))  # the leftover was killed with its group


async def test_background_leftover_without_pipes_is_killed(
    sb: ProcessSandbox, logs: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    r = await sb.exec(
        ["sh", "-c", f"sleep 100 >/dev/null 2>&1 & echo $! > {pidfile}"], log_prefix=logs / "bg"
    )
    assert r.ok and r.duration_s < 2
    await wait_all_dead(await wait_for_pids(pidfile, 1))


# -- timeouts -----------------------------------------------------------------------------------


async def test_timeout_kills_grandchildren(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = f"sleep 300 & echo $! >> {pidfile}; sleep 300 & echo $! >> {pidfile}; wait"
    start = time.monotonic()
    r = await sb.exec(["sh", "-c", script], timeout=0.5, timeout_name="probe.c1", log_prefix=logs / "to")
    assert time.monotonic() - start < 3
    assert r.timed_out and r.timeout_name == "probe.c1" and not r.killed and not r.ok
    assert r.returncode is not None and r.returncode < 0
    assert r.active_s >= 0.5
    pids = await wait_for_pids(pidfile, 2)
    assert len(pids) == 2
    for pid in pids:
        assert not pid_alive(pid), pid


async def test_timeout_term_respected_quickly(tmp_path: Path, logs: Path) -> None:
    box = ProcessSandbox(tmp_path / "wd", term_grace_s=10.0)  # a long grace must not be waited out
    try:
        r = await box.exec(["sleep", "300"], timeout=0.3, log_prefix=logs / "t")
    finally:
        await box.close()
    assert r.timed_out and r.returncode == -15
    assert r.duration_s < 3


async def test_timeout_sigterm_ignored_gets_sigkill(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    # trap '' TERM: sh ignores TERM and so do the children that inherit the disposition
    script = f"trap '' TERM; sleep 300 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"
    r = await sb.exec(["sh", "-c", script], timeout=0.3, log_prefix=logs / "trap")
    assert r.timed_out and r.returncode == -9
    assert r.duration_s >= 0.3 + 0.3  # timeout + grace (term_grace_s=0.3 in the fixture)
    assert r.duration_s < 4
    for pid in await wait_for_pids(pidfile, 2):
        assert not pid_alive(pid)


# -- pause / resume -----------------------------------------------------------------------------


async def test_pause_freezes_cpu_and_resume_thaws(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    code = "import os\nprint(os.getpid(), flush=True)\nwhile True: pass\n"
    task = asyncio.create_task(sb.exec([PY, "-c", code], log_prefix=logs / "busy", on_line=got, timeout=30))
    pid = int((await asyncio.wait_for(_first_line(got), 5)).text)
    await asyncio.sleep(0.2)
    sb.pause()
    await asyncio.sleep(0.1)  # let SIGSTOP land
    a = cpu_ticks(pid)
    await asyncio.sleep(0.5)
    b = cpu_ticks(pid)
    assert a == b, "a paused process must not use CPU"
    sb.resume()
    await asyncio.sleep(0.5)
    c = cpu_ticks(pid)
    assert c > b, "a resumed process runs again"
    await sb.kill()
    r = await task
    assert r.killed and not r.timed_out and r.returncode == -9 and not r.ok
    assert r.duration_s - r.active_s >= 0.5  # the paused stretch is not active time


async def _first_line(got: Lines) -> OutputLine:
    while not got.lines:
        await asyncio.sleep(0.01)
    return got.lines[0]


async def test_paused_time_does_not_count_toward_timeout(sb: ProcessSandbox, logs: Path) -> None:
    task = asyncio.create_task(
        sb.exec(
            ["sh", "-c", "sleep 0.2; sleep 0.2; sleep 0.2; sleep 0.2"],
            timeout=1.0,
            log_prefix=logs / "p",
        )
    )
    await asyncio.sleep(0.3)
    sb.pause()
    await asyncio.sleep(1.5)
    assert not task.done()
    sb.resume()
    r = await task
    assert r.ok and not r.timed_out, r
    assert r.duration_s >= 1.8
    assert r.active_s < 1.0
    assert r.duration_s - r.active_s == pytest.approx(1.5, abs=0.2)


async def test_timeout_still_fires_after_pause(sb: ProcessSandbox, logs: Path) -> None:
    task = asyncio.create_task(sb.exec(["sleep", "300"], timeout=0.6, log_prefix=logs / "p2"))
    await asyncio.sleep(0.2)
    sb.pause()
    await asyncio.sleep(0.5)
    sb.resume()
    r = await task
    assert r.timed_out
    assert 0.6 <= r.active_s < 1.5
    assert r.duration_s >= 1.1


async def test_exec_while_paused_starts_on_resume(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sb.pause()
    task = asyncio.create_task(sb.exec(["touch", str(marker)], log_prefix=logs / "w"))
    await asyncio.sleep(0.3)
    assert not marker.exists() and not task.done()
    sb.resume()
    r = await task
    assert r.ok and marker.exists()


# -- kill / cancel / close ----------------------------------------------------------------------


async def test_kill_during_exec(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    got = Lines()
    script = f"sleep 300 & echo $! >> {pidfile}; echo ready; wait"
    task = asyncio.create_task(sb.exec(["sh", "-c", script], log_prefix=logs / "k", on_line=got, timeout=60))
    await got.wait_for("ready")
    start = time.monotonic()
    await sb.kill()
    assert task.done()  # kill() returns once the exec has returned
    r = task.result()
    assert time.monotonic() - start < 3
    assert r.killed and not r.timed_out and r.returncode == -9 and not r.ok
    await wait_all_dead(await wait_for_pids(pidfile, 1))


async def test_kill_while_paused(sb: ProcessSandbox, logs: Path) -> None:
    got = Lines()
    task = asyncio.create_task(sb.exec(["sh", "-c", "echo ready; sleep 300"], log_prefix=logs / "kp", on_line=got))
    await got.wait_for("ready")
    sb.pause()
    await sb.kill()
    r = await asyncio.wait_for(task, 3)
    assert r.killed and r.returncode == -9


async def test_cancel_kills_process_group(sb: ProcessSandbox, logs: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    got = Lines()
    script = f"sleep 300 & echo $! >> {pidfile}; echo $$ >> {pidfile}; echo ready; wait"
    task = asyncio.create_task(sb.exec(["sh", "-c", script], log_prefix=logs / "c", on_line=got))
    await got.wait_for("ready")
    pids = await wait_for_pids(pidfile, 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_all_dead(pids, limit_s=1.0)


async def test_close_kills_and_refuses_new_execs(tmp_path: Path, logs: Path) -> None:
    box = ProcessSandbox(tmp_path / "wd")
    got = Lines()
    task = asyncio.create_task(box.exec(["sh", "-c", "echo ready; sleep 300"], log_prefix=logs / "c", on_line=got))
    await got.wait_for("ready")
    await box.close()
    r = await asyncio.wait_for(task, 3)
    assert r.killed
    with pytest.raises(SandboxError):
        await box.exec(["true"], log_prefix=logs / "after")


async def test_concurrent_execs_are_independent(sb: ProcessSandbox, logs: Path) -> None:
    results = await asyncio.gather(
        sb.exec(["sh", "-c", "echo a; exit 1"], log_prefix=logs / "a"),
        sb.exec(["sleep", "300"], timeout=0.3, timeout_name="b", log_prefix=logs / "b"),
        sb.exec(["sh", "-c", "echo c"], log_prefix=logs / "c"),
    )
    assert [r.returncode for r in results][0::2] == [1, 0]
    assert results[1].timed_out and results[1].timeout_name == "b"
    assert not results[0].timed_out and not results[2].timed_out
    assert (logs / "c.stdout").read_bytes() == b"c\n"


# -- put / get ----------------------------------------------------------------------------------


async def test_put_get_roundtrip(sb: ProcessSandbox, tmp_path: Path) -> None:
    p = await sb.put("a/b/report.json", b'{"x": 1}')
    assert p == sb.workdir / "a" / "b" / "report.json"
    assert await sb.get("a/b/report.json") == b'{"x": 1}'
    assert await sb.get("./a/../a/b/report.json") == b'{"x": 1}'  # ".." that stays inside is fine

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text("X = 1\n")
    (src / "link").symlink_to("pkg/m.py")
    single = tmp_path / "single.txt"
    single.write_bytes(b"single")
    await sb.put("repo", src)
    await sb.put("copied/single.txt", single)
    assert await sb.get("repo/pkg/m.py") == b"X = 1\n"
    assert (sb.workdir / "repo" / "link").is_symlink()
    assert await sb.get("repo/link") == b"X = 1\n"
    assert await sb.get("copied/single.txt") == b"single"


async def test_path_escapes_refused(sb: ProcessSandbox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (sb.workdir / "to_file").symlink_to(outside / "secret")
    (sb.workdir / "to_dir").symlink_to(outside)
    (sb.workdir / "inside").mkdir()
    (sb.workdir / "inside" / "up").symlink_to("../../outside")

    for bad in [
        str(outside / "secret"),  # absolute
        "/etc/passwd",
        "../outside/secret",
        "inside/../../outside/secret",
        "to_file",  # symlink to a file outside
        "to_dir/secret",  # symlink dir component
        "inside/up/secret",  # relative symlink climbing out
        "",
    ]:
        with pytest.raises(SandboxPathError):
            await sb.get(bad)
        with pytest.raises(SandboxPathError):
            await sb.put(bad, b"pwned")
    assert (outside / "secret").read_bytes() == b"secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


async def test_get_limits(sb: ProcessSandbox) -> None:
    await sb.put("big.bin", b"x" * 1000)
    assert await sb.get("big.bin", max_bytes=1000) == b"x" * 1000
    with pytest.raises(SandboxError) as info:
        await sb.get("big.bin", max_bytes=999)
    assert not isinstance(info.value, SandboxPathError)
    with pytest.raises(FileNotFoundError):
        await sb.get("missing.txt")
    (sb.workdir / "dir").mkdir()
    with pytest.raises(SandboxError):
        await sb.get("dir")


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is installed by .ci/run")


def live_with(marker: str) -> list[int]:
    """Host pids of live processes whose command line holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes() and \
                        Path(f"/proc/{name}/stat").read_text().split(")")[-1].split()[0] not in ("Z", "X"):
                    found.append(int(name))
            except OSError:
                pass
    return found


@needs_bwrap
async def test_nothing_of_a_namespaced_command_outlives_its_exec(tmp_path: Path, logs: Path) -> None:
    """When bubblewrap exits on its own, its namespace has ended, every process in it with it — a
    setsid daemon included: the exec returns without scanning /proc, so this must hold the moment
    it returns, with no waiting."""
    box = ProcessSandbox(tmp_path / "wd", isolation=Isolation())
    marker = f"resenv-leftover-{os.getpid()}-{time.monotonic_ns()}"
    try:
        for _ in range(5):
            # many of them, so the namespace takes a while to end: an exec that returned before its end
            # would find some still alive
            r = await box.exec(["sh", "-c", "for i in $(seq 30); do setsid sh -c 'sleep 1000; : " + marker + "'"
                                " </dev/null >/dev/null 2>&1 & done; sleep 0.2; echo started"],
                               log_prefix=logs / "ns", timeout=30)
            assert r.ok and r.stdout_path.read_bytes() == b"started\n"
            assert live_with(marker) == []
    finally:
        await box.close()


@needs_bwrap
async def test_a_namespaced_command_resolves_its_own_host_name_without_asking_the_network(
        tmp_path: Path, logs: Path) -> None:
    """Programs look up the machine's own name: git for the identity of every reflog entry a clone
    writes, torch.distributed for the address of its rendezvous store. A name only the namespace
    knows sends that lookup to the network's resolver, which may answer after seconds or never:
    clones stalled five seconds each, and a DDP run failed as if the agent's environment were
    broken. The name must resolve from the files the namespace shows, to this machine."""
    box = ProcessSandbox(tmp_path / "wd", isolation=Isolation(network="none"))
    probe = ("import json, socket; name = socket.gethostname(); "
             "print(json.dumps([name, sorted({a[4][0] for a in socket.getaddrinfo(name, None)})]))")
    try:
        r = await box.exec(["python3", "-I", "-c", probe], log_prefix=logs / "name", timeout=60)
    finally:
        await box.close()
    assert r.ok, r.stderr_path.read_text()
    name, addresses = json.loads(r.stdout_path.read_text())
    assert addresses and all(address.startswith("127.") or address == "::1" for address in addresses), (name, addresses)
