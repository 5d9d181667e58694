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
    # The host's `data_dir:` lies under a folder only root may enter: the remote user can never create
    # the job's work dirs there. Retrying cannot help.
    private = tmp_path / "private"
    private.mkdir()
    os.chmod(private, 0o700)
    there = private / "host-data"
    bench = bench_text(tmp_path, server.host_yaml("remote", user=user.name, gpus=0, data_dir=str(there)),
                       {"one": {"main.py": MAIN}}, retries=3)
    env = cli_environ(tmp_path)
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
    assert str(there) in attempt["reason"] and "Permission denied" in attempt["reason"], attempt
    assert user.name in attempt["reason"] and "`data_dir:`" in attempt["reason"], attempt
    # the plain display names the cause in one unbroken line, as soon as the host is found broken
    assert any(line.startswith("host remote cannot run jobs: cannot create files in the host's data dir")
               and "`data_dir:` of host remote" in line for line in done.stdout.splitlines()), out
    assert took < 60, took
    # hosts check says so before any run
    check = subprocess.run([*RESENV, "hosts", "check", str(bench)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout
    assert f"cannot create files in the host's data dir {there} as {user.name}" in check.stdout, check.stdout
    assert "python3 3." in check.stdout and "git" in check.stdout, check.stdout


def test_a_host_without_data_dir_works_under_the_remote_users_xdg_data_dir(tmp_path, server, user):
    # The engine (root) keeps its data dir where the remote user may not even look: the host's files
    # go to the remote user's own ${XDG_DATA_HOME:-$HOME/.local/share}/resenv, never to the engine's paths.
    data = tmp_path / "private" / "data"
    data.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    bench = bench_text(tmp_path, server.host_yaml("remote", user=user.name, gpus=0),
                       {"one": {"main.py": MAIN}})
    env = cli_environ(tmp_path) | {"RESENV_DATA_DIR": str(data)}
    default = user.home / ".local" / "share" / "resenv"
    check = subprocess.run([*RESENV, "hosts", "check", str(bench), "--host", "remote"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout
    assert f"  data dir: {default} (can create files there)" in check.stdout, check.stdout
    done = run(bench, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = [path for path in data.iterdir() if path.is_dir()]
    host_work = default / "runs" / run_dir.name / "jobs" / "one--a" / "attempt-1" / "work"
    assert (host_work / "repo" / "main.py").is_file(), sorted(str(p) for p in default.rglob("*"))[:20]
    assert host_work.stat().st_uid == user.uid
    assert not (run_dir / "jobs" / "one--a" / "attempt-1" / "work" / "repo").exists()  # the engine holds no checkout
    pristines = list((default / "runs" / run_dir.name / "pristine").glob("*.git"))
    assert pristines, "the pristine repo was not staged under the host's data dir"


EXPLICIT_AGENT = """\
a:
  kind: command
  command: >-
    printf '%s|%s|%s' {repo} {report} "$HOME" > {repo}/seen.txt &&
    printf '{{"python_path": null}}' > {report}
"""


def test_an_explicit_data_dir_holds_the_jobs_files_and_the_command_sees_its_paths(tmp_path, server, user):
    # `data_dir:` is honoured as given, and what the agent's command is told ({repo}, {report}, HOME)
    # names the host's paths, while the engine reads the report back into its own work dir.
    there = Path(f"/tmp/resenv-host-data-{os.getpid()}-{time.monotonic_ns()}")
    there.mkdir()
    os.chown(there, user.uid, user.uid)
    try:
        agent = EXPLICIT_AGENT
        bench = bench_text(tmp_path, server.host_yaml("remote", user=user.name, gpus=0, data_dir=str(there)),
                           {"one": {"main.py": MAIN}}, agent=agent)
        env = cli_environ(tmp_path)
        done = run(bench, env, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        [run_dir] = [path for path in (there / "runs").iterdir()]
        work = run_dir / "jobs" / "one--a" / "attempt-1" / "work"
        repo, report, home = (work / "repo" / "seen.txt").read_text().split("|")
        assert (repo, report, home) == (str(work / "repo"), str(work / "report.json"), str(work / "home"))
        engine_work = Path(env["RESENV_DATA_DIR"]) / run_dir.name / "jobs" / "one--a" / "attempt-1" / "work"
        assert json.loads((engine_work / "report.json").read_text()) == {"python_path": None}
        assert not (engine_work / "repo").exists()
    finally:
        subprocess.run(["rm", "-rf", str(there)], check=False)


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


@pytest.mark.parametrize("case", ["key missing", "public key given", "known_hosts missing"])
def test_a_key_or_known_hosts_file_that_cannot_be_used_ends_the_run_with_the_fix(tmp_path, server, case):
    # Mistakes in the engine's own files: no retry can mend them, so the run must end with the file
    # and the fix, never wait for the host (or hang) and never print a traceback.
    fields: dict[str, object] = {"gpus": 0}
    if case == "key missing":
        path = tmp_path / "no_such_key"
        fields["key"] = str(path)
        fix = "does not exist"
    elif case == "public key given":
        path = Path(f"{server.client_key}.pub")
        fields["key"] = str(path)
        fix = f"the private half, {server.client_key}"
    else:
        path = tmp_path / "no_such_known_hosts"
        fields["known_hosts"] = str(path)
        fix = f"ssh-keyscan -p {server.port} {server.address} >> {path}"
    bench = bench_text(tmp_path, server.host_yaml("remote", **fields), {"one": {"main.py": MAIN}}, retries=3)
    done = run(bench, cli_environ(tmp_path), tmp_path, timeout=90)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "Traceback" not in out and "waiting for host" not in out, out
    line = next((line for line in done.stdout.splitlines() if line.startswith("host remote cannot run jobs: ")), "")
    assert str(path) in line and fix in line, out
    job = rows(tmp_path / "store.db", "SELECT j.state, a.category, j.reason FROM jobs j"
                                      " JOIN attempts a ON a.job_id = j.id")[0]
    assert (job["state"], job["category"]) == ("error", "host_setup"), job
    check = subprocess.run([*RESENV, "hosts", "check", str(bench)], env=cli_environ(tmp_path), cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stdout + check.stderr
    assert str(path) in check.stdout and fix in check.stdout, check.stdout


def test_a_host_down_at_the_start_is_waited_for_visibly_and_then_used(tmp_path):
    port = free_port()
    root = tmp_path / "sshd"
    # The server exists (its keys, known_hosts) but is not listening yet.
    server = make_sshd(root, port=port)
    server.stop()
    bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0, connect_timeout_s=2),
                       {"one": {"main.py": MAIN}})
    # hosts check says what is wrong and what to look at, not only the socket error
    check = subprocess.run([*RESENV, "hosts", "check", str(bench), "--host", "remote"], env=cli_environ(tmp_path),
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout
    assert f"connection refused at {server.address}:{port}" in check.stdout, check.stdout
    assert "is sshd running there and `port` right?" in check.stdout, check.stdout
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1"],
                              env=cli_environ(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in engine.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if "waiting for host remote" in line:
                break
        assert any("waiting for host remote" in line and "connection refused" in line for line in seen), seen
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
        pgid = _agent_group(db)
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


def _agent_group(db: Path) -> int:
    """The process group of the run's agent command on the host, as the store recorded it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            found = rows(db, "SELECT json_extract(data, '$.pgid') AS pgid FROM events WHERE kind = 'process'"
                             " AND json_extract(data, '$.log') = 'agent'") if db.exists() else []
        except sqlite3.OperationalError:
            found = []
        if found:
            return found[0]["pgid"]
        time.sleep(0.1)
    raise AssertionError("the agent never started")


def _group_alive(server, pgid: int) -> bool:
    return server.host_run("sh", "-c", f"kill -0 -{pgid}").returncode == 0


def test_a_group_left_by_a_lost_connection_is_killed_on_resume_even_after_its_attempt_ended(tmp_path):
    # The engine sees the connection go and ends the attempt (error/infra), but dies before the host
    # is back: the group it meant to kill on reconnect is known to the store only, and the resume
    # must kill it there.
    server = make_sshd(tmp_path / "sshd", own_pids=True)
    bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0, keepalive_s=1, keepalive_count=2,
                                                  connect_timeout_s=2), {"one": {"main.py": MAIN}}, agent=SLEEPER)
    env = cli_environ(tmp_path)
    db = tmp_path / "store.db"
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1"],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    resume = None
    listener = None
    try:
        pgid = _agent_group(db)
        listener = server.listener_pid()
        os.kill(listener, signal.SIGSTOP)  # no reconnect can succeed until it continues
        server.drop_connections()
        deadline = time.monotonic() + 60
        ended: list = []
        while time.monotonic() < deadline and not ended:
            ended = rows(db, "SELECT id FROM attempts WHERE state = 'error'")
            time.sleep(0.1)
        assert ended, "the engine never noticed the lost connection"
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(10)
        os.kill(listener, signal.SIGCONT)
        listener = None
        assert _group_alive(server, pgid), "the remote command should outlive the lost connection"
        run_id = rows(db, "SELECT id FROM runs")[0]["id"]
        log = open(tmp_path / "resume.log", "wb")
        resume = subprocess.Popen([*RESENV, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                                  stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _group_alive(server, pgid):
            time.sleep(0.1)
        assert not _group_alive(server, pgid), "the ended attempt's process group survived the resume"
        deadline = time.monotonic() + 30
        killed: list = []
        while time.monotonic() < deadline and not killed:
            killed = rows(db, "SELECT data FROM events WHERE kind = 'leftover_killed'")
            time.sleep(0.1)
        assert killed and json.loads(killed[0]["data"])["pgid"] == pgid, killed
    finally:
        if listener is not None:
            os.kill(listener, signal.SIGCONT)
        for process in (engine, resume):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        server.stop()
