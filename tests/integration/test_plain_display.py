"""`resenv run --display plain`: a line per phase, tier verdict and attempt end (a retried attempt's
error included), heartbeats in long phases, and a closing summary whose numbers are the report's."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..conftest import REPO_ROOT, RESENV, resenv, rows, wait_for, write_benchmark
from .test_controls import gated_agent, open_gate
from .test_error_jobs import AGENT, REPO, broken_upstream

MISSING_MODULE = "import resenv_no_such_module\n"


class OnTerminal:
    """A resenv command on a pseudo-terminal of its own; `seen` collects what it wrote there."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.leader, follower = pty.openpty()
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        self.seen = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.leader, 65536)
            except OSError:  # the terminal's other side closed: the command has ended
                return
            if not chunk:
                return
            self.seen.extend(chunk)

    def text(self) -> str:
        return bytes(self.seen).decode(errors="replace")

    def close(self) -> None:
        """Kill the command if it still runs, and stop reading its terminal."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self.reader.join(timeout=10)
        os.close(self.leader)
VENV_BIN = Path(sys.executable).parent


def unfolded(lines: list[str], at: int) -> str:
    """The text folded onto lines[at] and the continuation lines under it (two spaces deeper)."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    parts = [lines[at].strip()]
    for line in lines[at + 1:]:
        if not line.startswith(" " * (indent + 2)) or line.startswith(" " * (indent + 3)):
            break
        parts.append(line.strip())
    return " ".join(parts)


def offered(lines: list[str], command: str) -> bool:
    """Whether the summary's next steps offer `command` as it is typed (beside its comment, or under it)."""
    return any(line == f"  {command}" or line.startswith(f"  {command} ") for line in lines)


def typed(program: str) -> str:
    """How the summary prints this installation's `program`: bare when PATH finds it, else its path."""
    found = shutil.which(program)
    mine = VENV_BIN / program
    return program if found is not None and Path(found).resolve() == mine.resolve() else str(mine)


def test_plain_run_prints_phases_verdicts_retries_and_the_reports_numbers(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}, "bad": {"main.py": MISSING_MODULE}},
                            AGENT, retries="{infra: 1, backoff_s: 0.1}")
    source, commit = broken_upstream(tmp_path)
    bench.write_text(bench.read_text() + REPO % ("broken", source, commit)  # infra: retried once, then error
                     + REPO % ("gone", tmp_path / "no-such-upstream", "1" * 40))  # error/download_failed
    done = resenv("run", str(bench), "--tiers", "C1,C5", "--display", "plain", env=cli_env, cwd=tmp_path,
                  timeout=240)
    assert done.returncode == 3, done.stdout + done.stderr  # jobs ended in error: the exit code says so
    assert done.stderr.strip() == f"resenv: 2 of 4 jobs ended in error (their reasons are above; " \
        f"`resenv show {rows(Path(cli_env['RESENV_DB']), 'SELECT id FROM runs')[0]['id']}` lists them)"
    out = done.stdout
    assert "\x1b" not in out, "no control codes off a terminal"
    db = Path(cli_env["RESENV_DB"])
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    lines = out.splitlines()

    assert "one/a  ▸ provision on local" in lines and "one/a  ▸ agent" in lines and "one/a  ▸ probes" in lines and "one/a  ▸ teardown" in lines
    assert "one/a  C1 ✓ pass" in lines
    [bad_c1] = rows(db, "SELECT t.status, t.category FROM tier_results t JOIN jobs j ON j.id = t.job_id"
                        " WHERE j.key = 'bad/a' AND t.tier = 'C1'")
    assert bad_c1["status"] == "fail" and bad_c1["category"]
    assert f"bad/a  C1 ✗ fail/{bad_c1['category']}" in lines
    assert "bad/a  done  C0–C5 ·  ✗  ·  ·  ·  ✓" in lines  # done, yet the line shows what failed

    # The broken checkout's first attempt is retried: its error is printed whole, then the job's end.
    first, second = rows(db, "SELECT a.reason FROM attempts a JOIN jobs j ON j.id = a.job_id"
                             " WHERE j.key = 'broken/a' ORDER BY a.number")
    assert "lib/util.py" in first["reason"]
    ended = lines.index("broken/a  attempt ended error/infra; queued to run again")
    assert unfolded(lines, ended + 1) == first["reason"]  # under it, folded to 80 columns
    assert unfolded(lines, lines.index("broken/a (attempt 2)  error/infra") + 1) == second["reason"]
    gone = rows(db, "SELECT reason FROM jobs WHERE key = 'gone/a'")[0]["reason"]
    assert unfolded(lines, lines.index("gone/a  error/download_failed") + 1) == gone

    # The summary: the pyramid's numbers are the report's and show's, errors by category, paths, next steps.
    report = json.loads(resenv("report", run_id, "--format", "json", env=cli_env, cwd=tmp_path).stdout)
    tiers = report["agents"]["a"]["tiers"]
    at = next(at for at, line in enumerate(lines) if line.startswith("  a (4 jobs): "))
    pyramid = " ".join(lines[at:at + 2])  # folded to 80 columns, a tier and its numbers never split
    shown = {tier: (int(p), int(d)) for tier, p, d in re.findall(r"(C[0-4]) (\d+)/(\d+)", pyramid)}
    assert shown == {tier: (tiers[tier]["passed"], tiers[tier]["denominator"]) for tier in ("C0", "C1", "C2", "C3", "C4")}
    assert shown["C1"] == (1, 2)  # one pass, one fail; the two error jobs are outside
    show = resenv("show", run_id, env=cli_env, cwd=tmp_path).stdout
    errors = next(line for line in show.splitlines() if line.startswith("a: ")).removeprefix("a: ")
    assert unfolded(lines, lines.index(next(line for line in lines if line.startswith("    ended in error: ")))) \
        == "ended in error: " + errors
    assert errors == "1 infra error, outside every denominator; 1 other error (1 download_failed)"
    found = report["agents"]["a"]["hallucinations"]
    assert (f"    C5 hallucinations: {found.get('path', 0)} path, {found.get('version', 0)} version, "
            f"{found.get('capability', 0)} capability; no/invalid report: 0") in lines
    tally = next(at for at, line in enumerate(lines) if line.startswith("failures by category: "))
    assert " ".join(line.strip() for line in lines[tally:tally + 2]) == (  # folded to 80 columns
        f"failures by category: 1 error/download_failed, 1 error/infra, 1 fail/{bad_c1['category']}")
    assert f"run {run_id} finished in " in out and "4 jobs (2 done, 2 error)" in out
    data_dir = Path(rows(db, "SELECT data_dir FROM runs")[0]["data_dir"])
    assert f"store:    {db}" in lines
    failed = lines.index(f"  bad/a: done, C1 fail/{bad_c1['category']}")
    assert lines[failed + 1] == "    C1: ModuleNotFoundError: No module named 'resenv_no_such_module'"
    assert lines[failed + 2].startswith(f"    log: {data_dir / 'jobs' / 'bad--a' / 'attempt-1' / 'logs'}/C1-")
    assert Path(lines[failed + 2].removeprefix("    log: ")).is_file()
    gone_at = lines.index("  gone/a: error/download_failed")
    assert unfolded(lines, gone_at + 1) == gone
    assert f"    logs: {data_dir / 'jobs' / 'gone--a' / 'attempt-1' / 'logs'}" in lines[gone_at + 2:gone_at + 8]
    # Laid out for 80 columns: only a line that holds a path runs longer.
    assert not [line for line in lines if len(line) > 80 and not any("/" in word for word in line.split())]
    for command in (f"{typed('resenv')} show {run_id}", f"{typed('resenv')} report {run_id}",
                    f"{typed('resenv-tui')} {run_id}"):
        assert offered(lines, command), command
    assert "--resume" not in out  # a finished run has nothing to resume


LAST_LINE = "collecting packages for the environment of this repository at a steady pace now"
SLOW = f"""\
a:
  kind: command
  command: >-
    echo preparing; echo {LAST_LINE}; sleep 300
"""


def test_heartbeat_in_a_long_phase_then_the_interrupted_summary(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, SLOW)
    env = {**cli_env, "RESENV_HEARTBEAT_S": "0.5", "COLUMNS": "60"}
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "C1", "--display", "plain"], env=env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    stdout = engine.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        beat = wait_for(lambda: next((line for line in seen if "collecting" in line and "  … agent " in line), None))
        wait_for(lambda: sum("  … agent " in line for line in seen) >= 2)  # it keeps coming
        engine.send_signal(signal.SIGINT)
        engine.wait(timeout=60)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    reader.join(timeout=10)
    assert engine.returncode == 130
    # `one/a  … agent 1s · ` then the last output line, cut at a word boundary to the 60 columns
    shown = re.fullmatch(r"one/a  … agent \d+s · (.+)…\n", beat)
    assert shown is not None and len(beat.rstrip("\n")) <= 60, beat
    assert LAST_LINE.startswith(shown[1]) and LAST_LINE[len(shown[1])] == " ", beat
    out = "".join(seen)
    run_id = rows(Path(cli_env["RESENV_DB"]), "SELECT id FROM runs")[0]["id"]
    assert f"run {run_id} interrupted in " in out
    assert offered(out.splitlines(), f"{typed('resenv')} run --resume {run_id}")


def test_on_a_terminal_a_progress_bar_stays_under_the_lines(tmp_path, cli_env):
    gates = tmp_path / "gates"
    gates.mkdir()
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}, "two": {"main.py": "print('ok')\n"}},
                            gated_agent(gates), expose=(gates,))
    terminal = OnTerminal([*RESENV, "run", str(bench), "--tiers", "C1", "--display", "plain"],
                          {**cli_env, "COLUMNS": "120", "TERM": "xterm"}, tmp_path)
    engine = terminal.process
    try:
        # While both agents wait at their gates the bar says so; then one finishes, then the other.
        wait_for(lambda: re.search(r"\d{8}-\d{6}-\w+ · 2 running.*0/2", terminal.text()))
        open_gate(gates, "one/a")
        wait_for(lambda: re.search(r"· 1 running.*1/2", terminal.text()))
        open_gate(gates, "two/a")
        engine.wait(timeout=120)
    finally:
        terminal.close()
    out = terminal.text()
    assert engine.returncode == 0, out[-3000:]
    run_id = rows(Path(cli_env["RESENV_DB"]), "SELECT id FROM runs")[0]["id"]
    assert "\x1b[" in out and "one/a  ▸ agent" in out and "two/a  done  C0–C5" in out
    assert f"run {run_id} finished in " in out and f"resenv show {run_id}" in out


def test_a_cancelled_run_ends_with_its_summary_and_how_to_run_the_job_again(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, SLOW)
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "C1", "--display", "plain"], env=cli_env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    stdout = engine.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: "one/a  ▸ agent\n" in seen)
        run_id = rows(Path(cli_env["RESENV_DB"]), "SELECT id FROM runs")[0]["id"]
        cancelled = resenv("control", "cancel", run_id, env=cli_env, cwd=tmp_path)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        engine.wait(timeout=60)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    reader.join(timeout=10)
    assert engine.returncode == 0
    assert "one/a  cancelled\n" in seen and seen[seen.index("one/a  cancelled\n") + 1] == "    cancelled by operator\n"
    assert any(line.startswith(f"run {run_id} cancelled in ") for line in seen)
    assert "not finished: 1 job\n" in seen and "  one/a: cancelled (cancelled by operator)\n" in seen
    assert offered([line.rstrip("\n") for line in seen], f"{typed('resenv')} control retry {run_id} one/a")
    assert offered([line.rstrip("\n") for line in seen], f"{typed('resenv')} run --resume {run_id}")


def test_the_dashboard_of_resenv_run_leaves_the_summary_on_the_terminal(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, AGENT)
    terminal = OnTerminal([*RESENV, "run", str(bench), "--tiers", "C1"],  # a terminal: the dashboard
                          {**cli_env, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}, tmp_path)
    engine = terminal.process
    db = Path(cli_env["RESENV_DB"])
    try:
        wait_for(lambda: db.exists() and rows(db, "SELECT state FROM runs")[0]["state"] == "finished", timeout=120)
        deadline = time.monotonic() + 60
        while engine.poll() is None and time.monotonic() < deadline:
            # Quit the dashboard once it listens. Until the engine thread has ended, `q` asks whether to
            # stop the run: `n` answers no, and the next round asks again.
            os.write(terminal.leader, b"nq")
            try:
                engine.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
    finally:
        terminal.close()
    out = terminal.text()
    assert engine.returncode == 0, out[-3000:]
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    assert "\x1b[?1049h" in out  # the dashboard had the terminal's alternate screen
    tail = out[out.rindex(f"run {run_id} finished in "):]
    assert "  a (1 job): C0 0/0 (imports —)  C1 1/1 (100.0%)" in tail
    assert f"resenv show {run_id}" in tail and f"store:    {db}" in tail


def test_a_reader_that_goes_away_never_stops_the_run(tmp_path, cli_env):
    """`resenv run … | head -3`: the display stops printing when its pipe breaks; the run finishes
    and the exit status is the run's own."""
    engine = subprocess.Popen([*RESENV, "run", str(REPO_ROOT / "benchmark.yaml"), "--repo", "tiny-stdlib",
                               "--tiers", "C1", "--display", "plain"],
                              env={**cli_env, "RESENV_HEARTBEAT_S": "-1"}, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert engine.stdout is not None
    try:
        head = [engine.stdout.readline() for _ in range(3)]
        engine.stdout.close()  # what `head -3` does after its third line
        engine.wait(timeout=120)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert head[0].startswith(b"run ")
    assert engine.returncode == 0
    assert [row["state"] for row in rows(Path(cli_env["RESENV_DB"]), "SELECT state FROM runs")] == ["finished"]
    assert [row["state"] for row in rows(Path(cli_env["RESENV_DB"]), "SELECT state FROM jobs")] == ["done"]


def follow(engine: subprocess.Popen) -> list[str]:
    """The engine's output lines as they come (a thread appends them to the list returned)."""
    seen: list[str] = []
    stdout = engine.stdout
    assert stdout is not None
    threading.Thread(target=lambda: seen.extend(iter(stdout.readline, "")), daemon=True).start()
    return seen


def test_a_run_resumed_paused_says_so_and_how_to_go_on_and_a_paused_job_beats_paused(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, SLOW)
    db = Path(cli_env["RESENV_DB"])
    first = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "C1", "--display", "plain"], env=cli_env,
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: rows(db, "SELECT 1 FROM phases WHERE name = 'agent'"))
    finally:
        first.kill()  # the engine dies without a word
        first.wait()
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    assert resenv("control", "pause", run_id, "--wait", "0", env=cli_env, cwd=tmp_path).returncode == 0
    env = {**cli_env, "RESENV_HEARTBEAT_S": "0.5"}
    engine = subprocess.Popen([*RESENV, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = follow(engine)
    try:
        wait_for(lambda: f"run {run_id} is paused: no job starts until `resenv control resume {run_id}`\n" in seen)
        wait_for(lambda: any(re.fullmatch(rf"run {run_id}  … paused \d+s · resume with `resenv control resume "
                                          rf"{run_id}`\n", line) for line in seen))
        assert resenv("control", "resume", run_id, env=cli_env, cwd=tmp_path).returncode == 0
        wait_for(lambda: "one/a (attempt 2)  ▸ agent\n" in seen)  # the first attempt was interrupted
        assert resenv("control", "pause", run_id, "one/a", env=cli_env, cwd=tmp_path).returncode == 0
        wait_for(lambda: any(re.fullmatch(r"one/a \(attempt 2\)  … paused in agent \d+s · .*\n", line) for line in seen))
        assert resenv("control", "cancel", run_id, env=cli_env, cwd=tmp_path).returncode == 0
        engine.wait(timeout=60)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert engine.returncode == 0, "".join(seen)
    assert not any("attempt ended paused" in line for line in seen)  # a paused job's attempt goes on


def test_why_a_tier_failed_is_on_its_line_in_the_summary_and_in_show(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"bad": {"main.py": "raise RuntimeError('the widget is gone')\n"}}, AGENT)
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "plain", env=cli_env, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    [c1] = rows(db, "SELECT category, evidence_json FROM tier_results WHERE tier = 'C1'")
    [stderr_log] = [log for log in json.loads(c1["evidence_json"])["logs"] if log.endswith(".stderr")]
    assert Path(stderr_log).is_file()
    lines = done.stdout.splitlines()
    verdict = lines.index(f"bad/a  C1 ✗ fail/{c1['category']}")
    assert lines[verdict + 1:verdict + 3] == ["    RuntimeError: the widget is gone", f"    log: {stderr_log}"]
    failed = lines.index(f"  bad/a: done, C1 fail/{c1['category']}")
    assert lines[failed + 1:failed + 3] == ["    C1: RuntimeError: the widget is gone", f"    log: {stderr_log}"]
    # C5 was not selected: no audit phase ran, and the summary does not count hallucinations it never looked for.
    assert "bad/a  ▸ audit" not in lines and not rows(db, "SELECT 1 FROM phases WHERE name = 'audit'")
    assert "    C5 not scored" in lines and not any("hallucinations" in line for line in lines)

    shown = json.loads(resenv("show", run_id, "--json", env=cli_env, cwd=tmp_path).stdout)
    [job] = shown["jobs"]
    assert job["reason"] == "C1: RuntimeError: the widget is gone"
    assert job["tier_reasons"]["C1"] == "RuntimeError: the widget is gone" and job["tier_logs"]["C1"] == stderr_log
    table = resenv("show", run_id, env=cli_env, cwd=tmp_path).stdout
    assert any("bad/a" in line and "C1: RuntimeError: the widget is gone" in line for line in table.splitlines()), table


def test_the_next_commands_work_as_printed_with_another_store_and_no_venv_on_the_path(tmp_path, cli_env):
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, AGENT)
    elsewhere = tmp_path / "elsewhere.db"
    bare = {**cli_env, "PATH": "/usr/bin:/bin"}  # a newcomer who never activated the venv
    done = subprocess.run([str(VENV_BIN / "resenv"), "run", str(bench), "--tiers", "C1", "--display", "plain",
                           "--db", str(elsewhere)], env=bare, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = rows(elsewhere, "SELECT id FROM runs")[0]["id"]
    nexts = done.stdout[done.stdout.index("\nnext:\n"):].splitlines()[2:]
    commands = [line.split("  # ")[0].strip() for line in nexts if not line.startswith("  # ")]
    assert all(len(line) <= 80 for line in nexts if line.startswith("  # "))  # too wide: each comment above
    assert commands == [f"{VENV_BIN / 'resenv'} show {run_id} --db {elsewhere}",
                        f"{VENV_BIN / 'resenv'} report {run_id} --db {elsewhere}",
                        f"{VENV_BIN / 'resenv-tui'} {run_id} --db {elsewhere}"]
    shown = subprocess.run(commands[0].split(), env=bare, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "one/a" in shown.stdout, shown.stderr

    on_path = {**cli_env, "PATH": f"{VENV_BIN}:/usr/bin:/bin"}  # activated, and the default store
    again = subprocess.run(["resenv", "run", str(bench), "--tiers", "C1", "--display", "plain"], env=on_path,
                           cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    run_id = rows(Path(cli_env["RESENV_DB"]), "SELECT id FROM runs")[0]["id"]
    assert f"\n  resenv show {run_id}  " in again.stdout and "--db" not in again.stdout
