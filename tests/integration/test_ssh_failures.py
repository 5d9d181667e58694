"""How a run behaves when an SSH host cannot work, on a real loopback sshd with an unprivileged user.

Each case is one a new user meets: a data dir the remote user cannot create, a host key that is
wrong or unknown, a host that is down when the run starts, and a connection lost mid-command
followed by the engine's death. Permanent problems must fail their jobs at once, with the cause and
the fix, and end the run with a non-zero status; transient ones wait visibly; nothing of a dead
attempt may keep running on the host.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import cli_environ, rows
from ..sshd_rig import free_port, keygen, make_sshd, remote_user, sshd_available
from .test_ssh_hosts import MAIN, bench_text

pytestmark = [pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server"),
              pytest.mark.timeout(240)]

RESENV = [sys.executable, "-m", "resenv.engine.cli.main"]


def run(bench: Path, env: dict[str, str], cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1",
                           *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def server(tmp_path):
    server = make_sshd(tmp_path / "sshd")
    yield server
    server.stop()


@pytest.fixture
def user(server):
    user = remote_user(server)
    yield user
    user.remove()


def test_a_data_dir_the_remote_user_cannot_create_fails_the_job_at_once_with_the_fix(tmp_path, server, user):
    # The engine runs as root with its data dir under a folder only root may enter: the remote user
    # can never create the mirrored work dirs. Retrying cannot help.
    data = tmp_path / "private" / "data"
    data.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    bench = bench_text(tmp_path, server.host_yaml("remote", user=user.name, gpus=0),
                       {"one": {"main.py": MAIN}}, retries=3)
    env = cli_environ(tmp_path) | {"RESENV_DATA_DIR": str(data)}
    started = time.monotonic()
    done = run(bench, env, tmp_path)
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    db = tmp_path / "store.db"
    attempts = rows(db, "SELECT state, category, reason FROM attempts")
    assert len(attempts) == 1, attempts  # not retried
    attempt = attempts[0]
    assert (attempt["state"], attempt["category"]) == ("error", "host_setup"), attempt
    assert str(data) in attempt["reason"] and "Permission denied" in attempt["reason"], attempt
    assert user.name in attempt["reason"] and "--data-dir" in attempt["reason"], attempt
    # the plain display names the cause in one unbroken line, as soon as the host is found broken
    assert any(line.startswith("host remote cannot run jobs: cannot create files in") and "--data-dir" in line
               for line in done.stdout.splitlines()), out
    assert took < 60, took
    # hosts check says so before any run
    check = subprocess.run([*RESENV, "hosts", "check", str(bench)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout
    assert f"cannot create files in {data} as {user.name}" in check.stdout, check.stdout
    assert "python3 3." in check.stdout and "git" in check.stdout, check.stdout


@pytest.mark.parametrize("case", ["mismatch", "unknown"])
def test_a_wrong_or_unknown_host_key_ends_the_run_with_the_file_and_the_fingerprint(tmp_path, server, case):
    known = tmp_path / "known_hosts_for_test"
    if case == "mismatch":
        other = tmp_path / "other_host_key"
        pub = keygen(other)
        known.write_text(f"[{server.address}]:{server.port} {' '.join(pub.split()[:2])}\n")
    else:
        known.write_text("")
    bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0, known_hosts=str(known)),
                       {"one": {"main.py": MAIN}}, retries=3)
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(server.root / "host_key.pub")],
                                 capture_output=True, text=True, check=True).stdout.split()[1]
    done = run(bench, cli_environ(tmp_path), tmp_path, timeout=90)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert str(known) in out and fingerprint in out, out
    assert ("does not match" in out) if case == "mismatch" else ("is not in" in out), out
    job = rows(tmp_path / "store.db", "SELECT j.state, a.category, j.reason FROM jobs j"
                                      " JOIN attempts a ON a.job_id = j.id")[0]
    assert (job["state"], job["category"]) == ("error", "host_setup"), job
    assert fingerprint in job["reason"], job


def test_a_host_down_at_the_start_is_waited_for_visibly_and_then_used(tmp_path):
    port = free_port()
    root = tmp_path / "sshd"
    # The server exists (its keys, known_hosts) but is not listening yet.
    server = make_sshd(root, port=port)
    server.stop()
    bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0, connect_timeout_s=2),
                       {"one": {"main.py": MAIN}})
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1"],
                              env=cli_environ(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in engine.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if "waiting for host remote" in line:
                break
        assert any("waiting for host remote" in line for line in seen), seen
        server.start()
        rest, _ = engine.communicate(timeout=120)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        server.stop()
    assert engine.returncode == 0, "".join(seen) + rest
    job = rows(tmp_path / "store.db", "SELECT state FROM jobs")[0]
    assert job["state"] == "done"


SLEEPER = """\
a:
  kind: command
  command: >-
    echo started > {workdir}/agent-started; sleep 300
"""


def test_after_a_lost_connection_and_a_killed_engine_resume_kills_what_the_old_attempt_left(tmp_path):
    # The host has its own pid namespace: its process ids mean nothing on the engine's machine, so
    # only a kill sent over SSH can end the old attempt's group.
    server = make_sshd(tmp_path / "sshd", own_pids=True)
    bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0, keepalive_s=1, keepalive_count=2),
                       {"one": {"main.py": MAIN}}, agent=SLEEPER)
    env = cli_environ(tmp_path)
    db = tmp_path / "store.db"
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1"],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    resume = None
    try:
        pgid = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and pgid is None:
            try:
                found = rows(db, "SELECT json_extract(data, '$.pgid') AS pgid FROM events WHERE kind = 'process'"
                                 " AND json_extract(data, '$.log') = 'agent'") if db.exists() else []
            except sqlite3.OperationalError:
                found = []
            pgid = found[0]["pgid"] if found else None
            time.sleep(0.1)
        assert pgid is not None, "the agent never started"
        assert _group_alive(server, pgid), server.host_run("ps", "-eo", "pid,pgid,cmd").stdout
        server.drop_connections()  # the connection is lost; the command runs on in its own session
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(10)
        assert _group_alive(server, pgid), "the remote command should outlive the lost connection"
        run_id = rows(db, "SELECT id FROM runs")[0]["id"]
        log = open(tmp_path / "resume.log", "wb")
        resume = subprocess.Popen([*RESENV, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                                  stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _group_alive(server, pgid):
            time.sleep(0.1)
        assert not _group_alive(server, pgid), "the old attempt's process group survived the resume"
        deadline = time.monotonic() + 30
        killed = []
        while time.monotonic() < deadline and not killed:
            killed = rows(db, "SELECT data FROM events WHERE kind = 'leftover_killed'")
            time.sleep(0.1)
        assert killed and {k: json.loads(killed[0]["data"])[k] for k in ("pgid", "host")} == {
            "pgid": pgid, "host": "remote"}, killed
    finally:
        for process in (engine, resume):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        server.stop()


def _group_alive(server, pgid: int) -> bool:
    return server.host_run("sh", "-c", f"kill -0 -{pgid}").returncode == 0
