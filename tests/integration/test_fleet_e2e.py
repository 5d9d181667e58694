"""Remote hosts and containers together in one benchmark.yaml: the starter suite across the local
host, a docker host and two SSH hosts (each in its own network namespace, with its own sshd),
`resenv hosts check` explaining every host, and one SSH host killed mid-run without losing a job.

The agent is the built-in baseline in offline mode (the namespaces reach no package index, and the
docker host's containers have no network): each repo is judged by the same rules wherever it ran,
and the baseline leaves a report everywhere, in containers too.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO_ROOT, cli_environ, rows
from ..docker_rig import TEST_IMAGE, build_rootfs, docker_available, import_image, start_dockerd
from ..sshd_rig import NetLab, make_sshd, netns_available
from .test_ssh_hosts import RESENV

pytestmark = [pytest.mark.skipif(not (docker_available() and netns_available()),
                                 reason="needs root, docker.io, openssh-server and ip netns"),
              pytest.mark.timeout(900)]

HOSTS = ("local", "box", "A", "B")


def fleet_benchmark(root: Path, servers: dict, known: Path, memlock: int) -> Path:
    """The repo's own benchmark.yaml with its hosts replaced by the four test hosts."""
    data = yaml.safe_load((REPO_ROOT / "benchmark.yaml").read_text())
    for repo in data["suites"]["starter"]["repos"]:
        repo["source"]["path"] = str((REPO_ROOT / repo["source"]["path"]).resolve())
    data["defaults"]["retries"] = {"infra": 2, "backoff_s": 0.5}
    data["hosts"] = {
        "local": {"kind": "local", "slots": 1, "gpus": 0},
        "box": {"kind": "local", "slots": 1, "gpus": 0, "sandbox": "docker", "image": TEST_IMAGE,
                "docker": {"network": "none", "memlock": memlock}},
    }
    for name, server in servers.items():
        data["hosts"][name] = {"kind": "ssh", "address": server.address, "port": server.port, "user": "root",
                               "key": str(server.client_key), "known_hosts": str(known), "gpus": 0, "slots": 1,
                               "keepalive_s": 1, "keepalive_count": 2, "connect_timeout_s": 3,
                               "data_dir": str(server.host_data_dir(name))}
    path = root / "benchmark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_for_running_attempt_on(db: Path, host: str, timeout: float) -> None:
    import sqlite3

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if db.exists() and rows(db, "SELECT 1 FROM attempts WHERE host = ? AND state = 'running'", (host,)):
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no attempt ever ran on {host}")


def test_starter_suite_across_local_docker_and_two_ssh_hosts_survives_a_killed_host(tmp_path):
    import resource

    data = tmp_path / "data"
    data.mkdir()
    daemon = start_dockerd()
    lab = NetLab()
    servers = {}
    try:
        import_image(daemon.client(), build_rootfs(tmp_path / "rootfs" / "root"))
        engine_ns = lab.namespace("eng")
        devices = {}
        client_key = None
        for index, name in enumerate(["A", "B"], start=1):
            host_ns = lab.namespace(name.lower())
            _, _, host_ip = lab.link(engine_ns, host_ns, index)
            devices[name] = host_ns
            servers[name] = make_sshd(tmp_path / f"sshd-{name}", address=host_ip, netns=host_ns, hide=[data],
                                      client_key=client_key)
            client_key = servers[name].client_key
        known = tmp_path / "known_hosts"
        known.write_text("".join(s.known_hosts.read_text() for s in servers.values()))
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        bench = fleet_benchmark(tmp_path, servers, known, -1 if memlock == resource.RLIM_INFINITY else memlock)
        env = cli_environ(tmp_path) | {"DOCKER_HOST": daemon.socket}
        in_engine_ns = ["ip", "netns", "exec", engine_ns]

        check = subprocess.run([*in_engine_ns, *RESENV, "hosts", "check", str(bench)], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=120)
        report = check.stdout
        for name, kind in (("local", "local"), ("box", "local"), ("A", "ssh"), ("B", "ssh")):
            assert f"{name} ({kind}): reachable" in report, report
        assert report.count("gpus: no NVIDIA driver") == 4 and "docker: 20." in report, report
        # each SSH host works under its own data dir (the engine's is hidden from it): no problem anywhere
        problems = [line.strip() for line in report.splitlines() if line.strip().startswith("problem:")]
        assert problems == [] and report.count("problems: none") == 4, report
        for name, server in servers.items():
            assert f"data dir: {server.host_data_dir(name)} (can create files there)" in report, report
        assert check.returncode == 0

        engine = subprocess.Popen(
            [*in_engine_ns, *RESENV, "run", str(bench), "--suite", "starter", "--agent", "baseline-offline",
             *(arg for host in HOSTS for arg in ("--host", host)), "--display", "plain"],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        db = tmp_path / "store.db"
        try:
            wait_for_running_attempt_on(db, "A", 120)
            lab.kill_all(devices["A"])  # sshd and everything it ran: the machine is gone
            out, _ = engine.communicate(timeout=780)
        finally:
            if engine.poll() is None:
                engine.kill()
                engine.wait()
        assert engine.returncode == 0, out[-4000:]

        jobs = rows(db, "SELECT id, repo_id, state, host FROM jobs")
        assert len(jobs) == 7 and {job["state"] for job in jobs} == {"done"}, jobs
        attempts = rows(db, "SELECT job_id, number, host, state, category FROM attempts ORDER BY job_id, number")
        killed = [a for a in attempts if a["host"] == "A"]
        assert killed and all((a["state"], a["category"]) == ("error", "infra") for a in killed), attempts
        for attempt in killed:  # each job the dead host had finished on another host
            final = [a for a in attempts if a["job_id"] == attempt["job_id"]][-1]
            assert final["host"] != "A" and final["state"] == "done", attempts
        ran_on = {job["host"] for job in jobs}
        assert {"local", "box", "B"} <= ran_on, jobs

        results = rows(db, "SELECT t.job_id, t.tier, t.status, t.category FROM tier_results t"
                           " JOIN attempts a ON a.id = t.attempt_id WHERE a.state = 'done'")
        per_job: dict[int, dict[str, str]] = {}
        for row in results:
            per_job.setdefault(row["job_id"], {})[row["tier"]] = row["status"]
            assert row["status"] != "error", row  # judged everywhere: no host or sandbox failure
        assert all(set(tiers) == {"C0", "C1", "C2", "C3", "C4", "C5"} for tiers in per_job.values()), per_job
        # the baseline really worked in every sandbox: each final attempt has a report to judge
        categories = rows(db, "SELECT t.category FROM tier_results t JOIN attempts a ON a.id = t.attempt_id"
                              " WHERE a.state = 'done' AND t.tier = 'C5'")
        assert all(row["category"] not in ("missing_report", "invalid_report") for row in categories), categories
        stdlib = next(job["id"] for job in jobs if job["repo_id"] == "tiny-stdlib")
        assert per_job[stdlib]["C0"] == per_job[stdlib]["C1"] == per_job[stdlib]["C5"] == "pass", per_job[stdlib]
    finally:
        for server in servers.values():
            server.stop()
        lab.close()
        daemon.stop()
