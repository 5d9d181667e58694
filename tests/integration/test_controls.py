"""Controls sent by a second process (`resenv control`) to a live engine process, and to a dead run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import RESENV, resenv, write_benchmark
from .test_engine_run import db_rows, wait_for

MAIN = "print('ok')\n"


def no_tiers() -> list[str]:
    """`--tiers none` where the CLI has it: these tests are about scheduling, not about scoring."""
    from resenv.engine.cli import main as cli

    return ["--tiers", "none"] if any("--tiers" in param.opts for param in cli.run.params) else []


def gated_agent(gates: Path) -> str:
    """An agent that burns some CPU in its own shell process until the file GATES/<job key> exists."""
    return """\
a:
  kind: command
  command: >-
    echo started {job};
    while [ ! -e GATES/{job} ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.05; done;
    echo finished {job}
""".replace("GATES", str(gates))


def open_gate(gates: Path, key: str) -> None:
    path = gates / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def cpu_ticks(pid: int) -> int:
    """utime + stime of one process (its own, not its children's), in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2:].split()[0].decode()


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process whose process group is `pgid`."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


class Harness:
    """One engine subprocess on a benchmark of gated repos, plus the DB and CLI around it."""

    def __init__(self, tmp_path: Path, env: dict[str, str], repos: list[str]) -> None:
        self.tmp = tmp_path
        self.env = env
        self.gates = tmp_path / "gates"
        self.gates.mkdir()
        self.bench = write_benchmark(tmp_path, {repo: {"main.py": MAIN} for repo in repos}, gated_agent(self.gates),
                                     expose=(self.gates,))
        self.db = Path(env["RESENV_DB"])
        self.engine: subprocess.Popen | None = None
        self.run_id = ""

    def start(self, *args: str) -> None:
        self.engine = subprocess.Popen(
            [*RESENV, "run", str(self.bench), "--display", "none", *no_tiers(), *args], env=self.env, cwd=self.tmp,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        wait_for(self._claimed, timeout=30)
        self.run_id = db_rows(self.db, "SELECT id FROM runs")[0]["id"]

    def _claimed(self) -> bool:
        """The engine has claimed its run (the DB may not even have its tables yet)."""
        try:
            if self.db.exists() and db_rows(self.db, "SELECT id FROM runs WHERE state != 'queued'"):
                return True
        except sqlite3.OperationalError:
            pass
        if self.engine is not None and self.engine.poll() is not None:
            raise AssertionError(f"engine exited {self.engine.returncode}: {self.engine.stderr.read()}")
        return False

    def finish(self, timeout: float = 30) -> int:
        assert self.engine is not None
        out, err = self.engine.communicate(timeout=timeout)
        self.stdout, self.stderr = out, err
        return self.engine.returncode

    def stop(self) -> None:
        if self.engine is not None and self.engine.poll() is None:
            self.engine.kill()
            self.engine.communicate(timeout=10)

    def control(self, *args: str) -> subprocess.CompletedProcess:
        return resenv("control", *args, env=self.env, cwd=self.tmp, timeout=30)

    def job(self, key: str) -> dict:
        return db_rows(self.db, "SELECT * FROM jobs WHERE key = ?", (key,))[0]

    def attempts(self, key: str) -> list[dict]:
        return db_rows(self.db, "SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = ? ORDER BY a.number", (key,))

    def agent_pgid(self, key: str, number: int = 1) -> int:
        """The agent's process group (= its leader's PID), from the attempt's `process` event."""
        def found():
            rows = db_rows(self.db, "SELECT json_extract(e.data, '$.pgid') AS pgid FROM events e"
                           " JOIN attempts a ON a.id = e.attempt_id JOIN jobs j ON j.id = a.job_id"
                           " WHERE j.key = ? AND a.number = ? AND e.kind = 'process'"
                           " AND json_extract(e.data, '$.log') = 'agent'", (key, number))
            return rows[0]["pgid"] if rows else None
        return wait_for(found, timeout=30)

    def wait_started(self, key: str, number: int = 1) -> int:
        pgid = self.agent_pgid(key, number)
        wait_for(lambda: db_rows(self.db, "SELECT e.id FROM events e JOIN attempts a ON a.id = e.attempt_id"
                                 " JOIN jobs j ON j.id = a.job_id WHERE j.key = ? AND a.number = ?"
                                 " AND e.kind = 'transcript' AND json_extract(e.data, '$.text') = ?",
                                 (key, number, f"started {key}")), timeout=30)
        return pgid

    def job_state(self, key: str, state: str, timeout: float = 30) -> None:
        wait_for(lambda: self.job(key)["state"] == state, timeout=timeout)

    def acks(self) -> list[tuple]:
        return [(c["action"], c["job_id"], c["ack"]) for c in db_rows(
            self.db, "SELECT * FROM controls WHERE run_id = ? ORDER BY id", (self.run_id,))]


@pytest.fixture
def harness(tmp_path, cli_env):
    made: list[Harness] = []

    def make(repos: list[str]) -> Harness:
        made.append(Harness(tmp_path, cli_env, repos))
        return made[-1]

    yield make
    for h in made:
        h.stop()


def grows(pid: int, window: float = 0.8) -> int:
    before = cpu_ticks(pid)
    time.sleep(window)
    return cpu_ticks(pid) - before


def agent_shell(gates: Path, key: str) -> int:
    """The agent's own shell, the one burning CPU (inside the sandbox's namespace, below bubblewrap)."""
    marker = f"{gates}/{key}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and not cmdline.startswith(b"bwrap") and b"/bwrap\0" not in cmdline:
                return int(name)
    raise AssertionError(f"no process of {key} runs")


def test_pause_freezes_the_agent_and_resume_thaws_it(harness):
    h = harness(["p"])
    h.start()
    h.wait_started("p/a")
    pid = agent_shell(h.gates, "p/a")
    assert grows(pid) > 0  # it is burning CPU before the pause

    out = h.control("pause", h.run_id, "p/a")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "applied" in out.stdout
    assert proc_state(pid) == "T"
    h.job_state("p/a", "paused")
    time.sleep(0.2)
    assert grows(pid, 1.0) == 0, "the paused agent still used CPU"
    assert proc_state(pid) == "T"

    out = h.control("resume", h.run_id, "p/a")
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    h.job_state("p/a", "running")
    assert grows(pid) > 0, "the resumed agent did not run again"

    open_gate(h.gates, "p/a")
    assert h.finish() == 0, h.stderr
    assert h.job("p/a")["state"] == "done"
    assert [(a["number"], a["state"]) for a in h.attempts("p/a")] == [(1, "done")]
    assert [(action, ack) for action, _, ack in h.acks()] == [("pause", "applied"), ("resume", "applied")]
    assert not group_alive(pid)
    controls = db_rows(h.db, "SELECT data FROM events WHERE run_id = ? AND kind = 'control'", (h.run_id,))
    assert [json.loads(c["data"])["action"] for c in controls] == ["pause", "resume"]


def test_cancel_kills_one_job_and_the_others_go_on(harness):
    h = harness(["victim", "other"])
    h.start("--jobs", "2")
    victim = h.wait_started("victim/a")
    other = h.wait_started("other/a")

    out = h.control("cancel", h.run_id, "victim/a")
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    h.job_state("victim/a", "cancelled", timeout=15)
    wait_for(lambda: not group_alive(victim), timeout=10)
    assert group_alive(other) and h.job("other/a")["state"] == "running"
    [attempt] = h.attempts("victim/a")
    assert attempt["state"] == "cancelled" and "operator" in (attempt["reason"] or "")

    open_gate(h.gates, "other/a")
    assert h.finish() == 0, h.stderr
    assert h.job("other/a")["state"] == "done"
    assert h.job("victim/a")["state"] == "cancelled"
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"
    assert not group_alive(other)


def test_retry_runs_a_new_attempt_and_keeps_the_old_one(harness):
    h = harness(["fast", "slow"])
    open_gate(h.gates, "fast/a")
    h.start("--jobs", "2")
    h.wait_started("slow/a")
    h.job_state("fast/a", "done")

    out = h.control("retry", h.run_id, "fast/a")
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: [(a["number"], a["state"]) for a in h.attempts("fast/a")] == [(1, "done"), (2, "done")], timeout=30)
    h.job_state("fast/a", "done")
    assert h.job("fast/a")["attempts"] == 2
    first, second = h.attempts("fast/a")
    assert first["workdir"] != second["workdir"] and Path(first["workdir"]).is_dir()
    assert second["started_at"] >= first["finished_at"]

    # retrying a running job stops its attempt (kept, as superseded) and starts a new one
    slow = h.wait_started("slow/a")
    out = h.control("retry", h.run_id, "slow/a")
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    slow2 = h.wait_started("slow/a", 2)
    assert slow2 != slow and not group_alive(slow)
    first = h.attempts("slow/a")[0]
    assert first["state"] == "cancelled" and "retry" in first["reason"], first

    open_gate(h.gates, "slow/a")
    assert h.finish() == 0, h.stderr
    assert [(a["number"], a["state"]) for a in h.attempts("slow/a")] == [(1, "cancelled"), (2, "done")]
    assert h.job("slow/a")["state"] == "done"


def test_run_pause_holds_queued_jobs_until_resume_and_bad_controls_are_rejected(harness):
    h = harness(["q1", "q2", "q3"])
    h.start("--jobs", "1")
    h.wait_started("q1/a")

    out = h.control("pause", h.run_id)
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "paused", timeout=10)
    # a running job goes on under a paused run
    open_gate(h.gates, "q1/a")
    h.job_state("q1/a", "done")
    time.sleep(1.5)  # several dispatch rounds
    assert [h.job(k)["state"] for k in ("q2/a", "q3/a")] == ["queued", "queued"]
    assert h.attempts("q2/a") == [] and h.attempts("q3/a") == []

    # controls that cannot apply are rejected with a reason, and the CLI says so with a non-zero exit
    for action, key, why in [("pause", "q2/a", "not running"), ("resume", "q1/a", "not paused"),
                             ("retry", "q2/a", "already queued")]:
        out = h.control(action, h.run_id, key)
        assert out.returncode != 0, (action, key, out.stdout)
        assert "rejected" in out.stdout and why in out.stdout, (action, key, out.stdout)

    out = h.control("resume", h.run_id)
    assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
    h.wait_started("q2/a")
    open_gate(h.gates, "q2/a")
    open_gate(h.gates, "q3/a")
    assert h.finish() == 0, h.stderr
    assert [h.job(k)["state"] for k in ("q1/a", "q2/a", "q3/a")] == ["done", "done", "done"]
    # with --jobs 1 and the run paused, q2 started only after the resume
    resume_at = db_rows(h.db, "SELECT acked_at FROM controls WHERE run_id = ? AND action = 'resume' AND job_id IS NULL",
                        (h.run_id,))[0]["acked_at"]
    assert h.attempts("q2/a")[0]["started_at"] >= resume_at - 0.5
    assert [ack for _, _, ack in h.acks()] == ["applied", "rejected", "rejected", "rejected", "applied"]
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"


def test_control_without_a_live_engine_is_queued_and_applied_on_resume(harness):
    h = harness(["one", "two"])
    open_gate(h.gates, "one/a")
    open_gate(h.gates, "two/a")
    h.start()
    assert h.finish() == 0, h.stderr
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"

    out = h.control("retry", h.run_id, "one/a")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "queued" in out.stdout and f"--resume {h.run_id}" in out.stdout
    assert [ack for _, _, ack in h.acks()] == [None]

    resumed = resenv("run", "--resume", h.run_id, "--display", "none", *no_tiers(), env=h.env, cwd=h.tmp, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert [ack for _, _, ack in h.acks()] == ["applied"]
    assert [(a["number"], a["state"]) for a in h.attempts("one/a")] == [(1, "done"), (2, "done")]
    assert h.job("one/a")["state"] == "done" and h.job("one/a")["attempts"] == 2
    assert [(a["number"], a["state"]) for a in h.attempts("two/a")] == [(1, "done")]
    assert db_rows(h.db, "SELECT state FROM runs")[0]["state"] == "finished"
