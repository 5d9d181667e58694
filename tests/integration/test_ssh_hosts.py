"""SSH hosts end to end with real OpenSSH servers and the real engine.

* loopback: one sshd on 127.0.0.1 whose mount namespace hides the engine's data dir behind a tmpfs,
  so checkout, agent, probes and report really travel over SSH (nothing is shared by accident);
* network namespaces: an engine namespace and two host namespaces linked by veth pairs, an sshd in
  each host namespace; one host is killed (or cut off) mid-job and the job finishes on the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import bundle_repos, cli_environ, rows
from ..sshd_rig import NetLab, make_sshd, netns_available, sshd_available

pytestmark = [pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server"),
              pytest.mark.timeout(240)]

RESENV = [sys.executable, "-m", "resenv.engine.cli.main"]
MAIN = "import sys\nprint('main ran on', sys.executable)\n"

AGENT = """\
a:
  kind: command
  command: >-
    echo agent on $(cat /proc/sys/kernel/hostname) in $(pwd);
    case {workdir} in */attempt-1/work) if [ -f {repo}/slow ]; then sleep 60; fi;; esac;
    python3 -m venv --without-pip {env} &&
    printf '{{"python_path": "%s", "python_version": null}}' {env}/bin/python > {report}
"""


def bench_text(root: Path, hosts: str, repos: dict[str, dict[str, str]], *, retries: int = 2,
               agent: str = AGENT) -> Path:
    text = "version: 1\n"
    text += f"defaults:\n  suite: s\n  agent: a\n  retries: {{infra: {retries}, backoff_s: 0.5}}\n"
    text += "  timeouts: {teardown: 20}\n"
    text += "hosts:\n  local: {kind: local, gpus: 0}\n" + hosts
    text += "agents:\n" + textwrap.indent(agent, "  ")
    text += bundle_repos(root, repos)
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


def test_job_runs_end_to_end_on_a_loopback_ssh_host_with_nothing_shared(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    server = make_sshd(tmp_path / "sshd", hide=[data])
    try:
        hosts = server.host_yaml("remote", gpus=0, slots=2)
        bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}, "two": {"main.py": MAIN}})
        env = cli_environ(tmp_path)
        done = subprocess.run([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain",
                               "--tiers", "C1,C5"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        db = tmp_path / "store.db"
        jobs = rows(db, "SELECT key, state, host, attempts FROM jobs ORDER BY key")
        assert [(j["state"], j["host"], j["attempts"]) for j in jobs] == [("done", "remote", 1)] * 2, jobs
        tiers = {(r["key"], r["tier"]): r["status"] for r in rows(
            db, "SELECT j.key, t.tier, t.status FROM tier_results t JOIN jobs j ON j.id = t.job_id")}
        assert tiers == {("one/a", "C1"): "pass", ("one/a", "C5"): "pass",
                         ("two/a", "C1"): "pass", ("two/a", "C5"): "pass"}, tiers
        # Output came back over SSH into the local raw logs and the store ...
        c1 = rows(db, "SELECT tail, head FROM logs WHERE name LIKE 'C1%' AND stream = 'stdout'")
        assert all("main ran on" in row["head"] for row in c1)
        events = rows(db, "SELECT data FROM events WHERE kind = 'output' AND data LIKE '%main ran on%'")
        assert len(events) == 2
        # ... while the checkout and the env exist only on the host: the engine's mirror has the report only.
        attempt = rows(db, "SELECT workdir FROM attempts LIMIT 1")[0]
        work = Path(attempt["workdir"])
        assert (work / "report.json").is_file()
        assert not (work / "repo").exists() and not (work / "env").exists()
        host_row = rows(db, "SELECT state, inventory_json FROM hosts WHERE name = 'remote'")[0]
        assert json.loads(host_row["inventory_json"])["os"]
    finally:
        server.stop()


C0_AGENT = """\
a:
  kind: command
  command: >-
    python3 -m venv --without-pip {env} &&
    site=$({env}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
    mkdir -p $site/fakedep && touch $site/fakedep/__init__.py &&
    printf '{{"python_path": "%s", "python_version": null}}' {env}/bin/python > {report}
"""


def test_c0_on_an_ssh_host_judges_the_environment_on_the_host(tmp_path):
    """The env exists only on the host; C0 still names exactly the one import the agent left out."""
    data = tmp_path / "data"
    data.mkdir()
    server = make_sshd(tmp_path / "sshd", hide=[data])
    try:
        repo = {"main.py": "import json\nimport mypkg\nimport fakedep\nimport otherdep\n",
                "mypkg/__init__.py": "from . import sub\n", "mypkg/sub.py": "import os\n"}
        bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0), {"one": repo}, agent=C0_AGENT)
        done = subprocess.run([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain",
                               "--tiers", "C0"], env=cli_environ(tmp_path), cwd=tmp_path, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        row = rows(tmp_path / "store.db", "SELECT status, category, evidence_json FROM tier_results WHERE tier = 'C0'")[0]
        evidence = json.loads(row["evidence_json"])
        assert (row["status"], row["category"]) == ("fail", "deps_missing"), evidence["log_tail"]
        assert evidence["missing"] == ["otherdep"] and evidence["interpreter_ok"], evidence["log_tail"]
        assert evidence["import_map"] and evidence["python_version"].startswith("3.")
    finally:
        server.stop()


def test_unknown_host_key_is_refused_and_the_host_stays_down(tmp_path):
    server = make_sshd(tmp_path / "sshd")
    try:
        (tmp_path / "empty_known_hosts").write_text("")
        hosts = server.host_yaml("remote", gpus=0, known_hosts=str(tmp_path / "empty_known_hosts"))
        bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
        env = cli_environ(tmp_path)
        check = subprocess.run([*RESENV, "hosts", "check", str(bench)], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 1
        assert "UNREACHABLE" in check.stdout and "not trusted" in check.stdout.lower() + check.stderr.lower()
    finally:
        server.stop()


def test_hosts_check_reports_facts_and_problems(tmp_path):
    server = make_sshd(tmp_path / "sshd")
    try:
        hosts = server.host_yaml("remote", gpus="[0, 1]") + "  here: {kind: local, gpus: 0}\n"
        bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
        check = subprocess.run([*RESENV, "hosts", "check", str(bench)], env=cli_environ(tmp_path), cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
        out = check.stdout
        assert "remote (ssh): reachable" in out and "here (local): reachable" in out, out
        assert "os: " in out and "cpus: " in out and "free disk: " in out
        # the host's own data dir is named and proved: created, a file made and removed there
        there = server.host_data_dir("remote")
        assert f"  data dir: {there} (can create files there)" in out.split("remote (ssh)")[1], out
        assert there.is_dir() and not list(there.iterdir()), list(there.iterdir())
        # this machine has no NVIDIA driver: a state, and a problem only where the spec asks for GPUs
        assert "gpus: no NVIDIA driver" in out
        assert "spec asks for GPUs [0, 1] but the host has no NVIDIA driver" in out
        assert check.returncode == 1
    finally:
        server.stop()


# ----------------------------------------------------------------------------- host faults (netns)
@pytest.fixture
def lab():
    if not netns_available():
        pytest.skip("needs root and ip netns")
    lab = NetLab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.mark.parametrize("fault", ["killed", "cut_off"])
def test_host_dies_mid_job_and_the_job_finishes_on_another_host(tmp_path, lab, fault):
    data = tmp_path / "data"
    data.mkdir()
    engine_ns = lab.namespace("eng")
    servers = {}
    devices = {}
    client_key = None
    for index, name in enumerate(["A", "B"], start=1):
        host_ns = lab.namespace(name.lower())
        device, _, host_ip = lab.link(engine_ns, host_ns, index)
        devices[name] = (host_ns, device)
        servers[name] = make_sshd(tmp_path / f"sshd-{name}", address=host_ip, netns=host_ns, hide=[data],
                                  client_key=client_key)
        client_key = servers[name].client_key
    known = tmp_path / "known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers.values()))
    hosts = "".join(s.host_yaml(name, gpus=0, slots=1, known_hosts=str(known), keepalive_s=1, keepalive_count=2,
                                connect_timeout_s=3)
                    for name, s in servers.items())
    bench = bench_text(tmp_path, hosts, {"slowjob": {"main.py": MAIN, "slow": "1"}})
    env = cli_environ(tmp_path)
    engine = subprocess.Popen(
        ["ip", "netns", "exec", engine_ns, *RESENV, "run", str(bench), "--host", "A", "--host", "B",
         "--display", "plain", "--tiers", "C1,C5"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = tmp_path / "store.db"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:  # the file may exist before its tables do
                agent = rows(db, "SELECT a.host FROM attempts a JOIN phases p ON p.attempt_id = a.id"
                                 " WHERE p.name = 'agent' AND p.status = 'running'") if db.exists() else []
            except sqlite3.OperationalError:
                agent = []
            if agent:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the agent never started")
        assert agent[0]["host"] == "A"
        time.sleep(1.0)
        if fault == "killed":
            lab.kill_all(devices["A"][0])  # sshd and everything it ran: the machine is gone
        else:
            lab.cut(engine_ns, devices["A"][1])  # the cable: nothing answers, nothing closes
        out, _ = engine.communicate(timeout=150)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert engine.returncode == 0, out
    attempts = rows(db, "SELECT number, host, state, category, reason FROM attempts ORDER BY number")
    assert attempts[0]["host"] == "A" and (attempts[0]["state"], attempts[0]["category"]) == ("error", "infra"), attempts
    assert attempts[-1]["host"] == "B" and attempts[-1]["state"] == "done", attempts
    assert all(a["host"] == "B" for a in attempts[1:]), "a dead host was chosen again"
    job = rows(db, "SELECT state FROM jobs")[0]
    assert job["state"] == "done"
    tiers = {r["tier"]: r["status"] for r in rows(db, "SELECT tier, status FROM tier_results")}
    assert tiers == {"C1": "pass", "C5": "pass"}
    states = [json.loads(r["data"]) for r in rows(db, "SELECT data FROM events WHERE kind = 'host_state'")]
    assert {"host": "A", "state": "down"} in [{k: s[k] for k in ("host", "state")} for s in states]
    assert rows(db, "SELECT state FROM hosts WHERE name = 'A'")[0]["state"] == "down"
    for server in servers.values():
        server.stop()


# ------------------------------------------------------------------ connection: channels, reconnect
async def test_execs_beyond_max_sessions_wait_for_a_channel_and_all_succeed(tmp_path):
    from resenv.engine.hosts.ssh import build_ssh_host
    from resenv.engine.spec import SshHost as SshSpec

    server = make_sshd(tmp_path / "sshd", max_sessions=5)
    spec = SshSpec(kind="ssh", address=server.address, port=server.port, user="root", key=str(server.client_key),
                   known_hosts=str(server.known_hosts), gpus=0, max_sessions=5)
    host = build_ssh_host("h", spec)
    try:
        assert await host.start()
        box = host.sandbox(tmp_path / "work")
        results = await asyncio.gather(*(
            box.exec(["sh", "-c", f"sleep 0.2; echo {i}"], log_prefix=tmp_path / "logs" / f"x{i}") for i in range(12)))
        assert [r.returncode for r in results] == [0] * 12
        assert [(tmp_path / "logs" / f"x{i}.stdout").read_text() for i in range(12)] == [f"{i}\n" for i in range(12)]
        assert host.connection.channel_limit == 2  # 5 - SFTP - control - one of margin
        await box.close()
    finally:
        await host.close()
        server.stop()


async def test_a_lost_connection_marks_the_host_down_and_the_monitor_brings_it_back(tmp_path):
    from resenv.engine.sandbox.remote import SshConnection, SshTarget

    server = make_sshd(tmp_path / "sshd")
    states = []
    connection = SshConnection(SshTarget(name="h", address=server.address, port=server.port, user="root",
                                         key=str(server.client_key), known_hosts=str(server.known_hosts),
                                         keepalive_s=1, keepalive_count=2, connect_timeout_s=2),
                               on_state=lambda state, reason: states.append(state))
    connection.backoff_start_s = 0.2
    try:
        await connection.connect()
        assert connection.up
        server.stop()  # the listener and every session (our connection) die
        deadline = time.monotonic() + 10
        while connection.up:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert states[-1] == "down"
        await asyncio.sleep(1.0)  # the monitor retries with backoff while nothing listens
        assert not connection.up
        server.start()
        assert await connection.wait_up(timeout=15)
        assert (await connection.run("echo back")).stdout == b"back\n"
        assert states[-2:] == ["down", "up"] or states[-1] == "up"
    finally:
        await connection.close()
        server.stop()


SECRET_AGENT = """\
a:
  kind: command
  env_from: [RESENV_TEST_REMOTE_SECRET]
  command: >-
    python3 -c 'import hashlib, json, os; seen = dict(os.environ);
    seen["RESENV_TEST_REMOTE_SECRET"] = hashlib.sha256(seen.get("RESENV_TEST_REMOTE_SECRET", "").encode()).hexdigest();
    print(json.dumps(seen))' > {workdir}/agent-env.json;
    touch {workdir}/agent-started;
    while [ ! -f {workdir}/go ]; do sleep 0.1; done;
    python3 -m venv --without-pip {env} &&
    printf '{{"python_path": "%s", "python_version": null}}' {env}/bin/python > {report}
"""


def test_a_remote_command_gets_only_its_declared_environment_and_no_process_shows_a_secret(tmp_path):
    # Any user of a shared host can read every process's command line: a secret given to the agent
    # must reach its environment without ever being part of one.
    secret = "sk-test-" + secrets.token_hex(20)
    server = make_sshd(tmp_path / "sshd")
    try:
        bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0), {"one": {"main.py": MAIN}},
                           agent=SECRET_AGENT)
        env = cli_environ(tmp_path) | {"RESENV_TEST_REMOTE_SECRET": secret, "RESENV_TEST_ENGINE_ONLY": "engine"}
        engine = subprocess.Popen([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain",
                                   "--tiers", "C1"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        host_runs = server.host_data_dir("remote") / "runs"  # the job's files are under the host's data dir
        try:
            started = None
            deadline = time.monotonic() + 90
            while started is None and time.monotonic() < deadline and engine.poll() is None:
                started = next(host_runs.glob("*/jobs/*/attempt-1/work/agent-started"), None)
                time.sleep(0.1)
            assert started is not None, "the agent never started"
            shown = [pid for pid, line in _command_lines() if secret.encode() in line]
            assert not shown, f"processes {shown} show the secret in their command line"
            (started.parent / "go").touch()
            out, _ = engine.communicate(timeout=120)
        finally:
            if engine.poll() is None:
                engine.kill()
                engine.wait()
            for work in host_runs.glob("*/jobs/*/attempt-*/work"):
                (work / "go").touch()  # a failed test's agent must not wait on the host for ever
        assert engine.returncode == 0, out
        work = started.parent
        seen = json.loads((work / "agent-env.json").read_text())
        # the agent saw the secret (the file holds its hash: files the agent wrote are masked after it)
        assert not list((tmp_path / "data").glob("*/jobs/*/attempt-1/work/agent-env.json"))  # not the engine's
        assert seen["RESENV_TEST_REMOTE_SECRET"] == hashlib.sha256(secret.encode()).hexdigest()
        assert seen["HOME"] == str(work / "home") and seen["TMPDIR"] == str(work / "tmp"), seen
        assert set(seen) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES",
                             "RESENV_PROMPT", "RESENV_TEST_REMOTE_SECRET", "PWD"}, sorted(seen)
    finally:
        server.stop()


def _command_lines() -> list[tuple[int, bytes]]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdecimal():
            try:
                lines.append((int(entry.name), (entry / "cmdline").read_bytes()))
            except OSError:
                pass
    return lines


SIZED_AGENT = """\
a:
  kind: command
  command: >-
    python3 -m venv --without-pip {env} && head -c 3000000 /dev/urandom > {env}/blob &&
    printf '{{"python_path": "%s", "python_version": null}}' {env}/bin/python > {report}
"""


def test_the_size_of_an_environment_built_on_an_ssh_host_is_measured_there(tmp_path):
    # The environment exists only on the host: sizing the engine's (empty) mirror would report 0 B.
    data = tmp_path / "data"
    data.mkdir()
    server = make_sshd(tmp_path / "sshd", hide=[data])
    try:
        bench = bench_text(tmp_path, server.host_yaml("remote", gpus=0), {"one": {"main.py": MAIN}},
                           agent=SIZED_AGENT)
        env = cli_environ(tmp_path)
        done = subprocess.run([*RESENV, "run", str(bench), "--host", "remote", "--display", "plain",
                               "--tiers", "C5"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        evidence = json.loads(rows(tmp_path / "store.db", "SELECT evidence_json FROM tier_results WHERE tier = 'C5'")[0][
            "evidence_json"])
        size = evidence["environment"]["size_bytes"]
        assert size is not None and 3_000_000 <= size < 100_000_000, evidence["environment"]
        report = subprocess.run([*RESENV, "report", "--format", "json"], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert json.loads(report.stdout)["agents"]["a"]["env_bytes"] == [size], report.stdout
    finally:
        server.stop()
