"""Docker hosts with their defaults, and each way they can fail, on a real private dockerd.

The daemon runs as this machine runs it (tests/docker_rig.py: --bridge=none --iptables=false). Where
it lacks CAP_SYS_RESOURCE (its memlock hard limit is the machine's, 8 MiB here), a container that
asks for an unlimited memlock cannot start: the default must not ask, and asking must break the host
before any job, with the cause and the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resenv.engine.sandbox.base import HostSetupError
from resenv.engine.sandbox.docker import CheckpointGone

from ..docker_rig import TEST_IMAGE, docker_available
from .test_docker_sandbox import FakeAttempt, dockerd  # noqa: F401  (the module's private daemon)
from .test_ssh_hosts import MAIN, bench_text, rows

pytestmark = [pytest.mark.skipif(not docker_available(), reason="needs root, docker.io and the docker SDK"),
              pytest.mark.timeout(300)]

CLI = [sys.executable, "-m", "resenv.engine.cli"]
CAP_SYS_RESOURCE = 24


def daemon_may_raise_rlimits(daemon) -> bool:
    """Whether the private dockerd holds CAP_SYS_RESOURCE (then any memlock starts)."""
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    caps = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    return bool(caps & (1 << CAP_SYS_RESOURCE))


def environ(tmp_path: Path, daemon=None) -> dict[str, str]:
    """The CLI's environment; DOCKER_HOST only when given a daemon (else the spec names the socket)."""
    env = dict(os.environ, RESENV_DB=str(tmp_path / "store.db"), RESENV_DATA_DIR=str(tmp_path / "data"))
    env.pop("DOCKER_HOST", None)
    if daemon is not None:
        env["DOCKER_HOST"] = daemon.socket
    return env


def run_box(tmp_path: Path, docker: str, *, image: str = TEST_IMAGE, env: dict[str, str],
            tiers: str = "C1,C5") -> subprocess.CompletedProcess[str]:
    hosts = f"  box: {{kind: local, gpus: 0, slots: 2, sandbox: docker, image: {image}, docker: {docker}}}\n"
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}, "two": {"main.py": MAIN}})
    return subprocess.run([*CLI, "run", str(bench), "--host", "box", "--display", "plain", "--tiers", tiers],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)


def assert_host_broken_before_any_job(tmp_path: Path, done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Every job ended error/host_setup with one attempt that never started a phase; returns the reason."""
    assert done.returncode == 3, done.stdout + done.stderr
    db = tmp_path / "store.db"
    jobs = rows(db, "SELECT key, state, attempts, reason FROM jobs ORDER BY key")
    attempts = rows(db, "SELECT state, category FROM attempts")
    assert [(j["state"], j["attempts"]) for j in jobs] == [("error", 1)] * 2, jobs
    assert attempts == [{"state": "error", "category": "host_setup"}] * 2, attempts
    assert rows(db, "SELECT name FROM phases") == [], "no job was attempted"
    reason = jobs[0]["reason"]
    for needle in needles:
        assert needle in reason, reason
    assert "host box cannot run jobs: docker preflight failed" in done.stdout, done.stdout
    host = rows(db, "SELECT state FROM hosts WHERE name = 'box'")
    assert host == [{"state": "broken"}]
    return reason


def test_the_defaults_run_on_this_daemon_and_the_socket_comes_from_the_spec(dockerd, tmp_path):
    """No memlock asked (the daemon's own is kept), the daemon found by `docker.socket` without DOCKER_HOST."""
    socket_path = dockerd.socket.removeprefix("unix://")
    done = run_box(tmp_path, f"{{socket: {socket_path}}}", env=environ(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    assert [j["state"] for j in rows(db, "SELECT state FROM jobs")] == ["done", "done"]
    preflight = [json.loads(r["data"]) for r in rows(db, "SELECT data FROM events WHERE kind = 'docker_preflight'")]
    assert len(preflight) == 1 and preflight[0]["problems"] == [] and preflight[0]["python3"].startswith("3.")
    assert preflight[0]["daemon"] == dockerd.socket
    first = rows(db, "SELECT workdir FROM attempts ORDER BY id LIMIT 1")[0]
    assert first  # the jobs ran in containers of this daemon:
    client = dockerd.client()
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    assert len(client.images.list(filters={"label": f"resenv.run={run_id}"})) == 2, "their checkpoints are here"
    assert client.containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == [], "preflight removed"


def test_a_memlock_the_daemon_cannot_raise_breaks_the_host_before_any_job(dockerd, tmp_path):
    if daemon_may_raise_rlimits(dockerd):
        pytest.skip("this dockerd holds CAP_SYS_RESOURCE: any memlock starts")
    done = run_box(tmp_path, "{memlock: -1}", env=environ(tmp_path, dockerd))
    assert_host_broken_before_any_job(tmp_path, done, "memlock", "unlimited", "leave `docker.memlock` unset")
    assert "rlimit" in done.stdout and "2 of 2 jobs ended in error" in done.stderr


def test_a_missing_image_breaks_the_host_and_says_how_to_build_one(dockerd, tmp_path):
    done = run_box(tmp_path, "{}", image="resenv-test/absent:9", env=environ(tmp_path, dockerd))
    assert_host_broken_before_any_job(tmp_path, done, "image resenv-test/absent:9 is not on this docker host",
                                      "resenv image build --tag resenv-test/absent:9")


def test_a_daemon_that_is_not_there_breaks_the_host_with_where_it_was_looked_for(dockerd, tmp_path):
    done = run_box(tmp_path, f"{{socket: {tmp_path}/none.sock}}", env=environ(tmp_path))
    assert_host_broken_before_any_job(tmp_path, done, f"cannot reach the docker daemon at unix://{tmp_path}/none.sock",
                                      "start dockerd")


def test_hosts_check_says_each_problem_whole(dockerd, tmp_path):
    socket_path = dockerd.socket.removeprefix("unix://")
    hosts = (f"  good: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE}, docker: {{socket: {socket_path}}}}}\n"
             f"  noimage: {{kind: local, gpus: 0, sandbox: docker, image: absent:1, docker: {{socket: {socket_path}}}}}\n"
             f"  nodaemon: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE},"
             f" docker: {{socket: {tmp_path}/none.sock}}}}\n")
    if not daemon_may_raise_rlimits(dockerd):
        hosts += (f"  memlock: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE},"
                  f" docker: {{socket: {socket_path}, memlock: -1}}}}\n")
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
    env = environ(tmp_path)

    def check(host: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, "hosts", "check", str(bench), "--host", host], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)

    good = check("good")
    assert good.returncode == 0 and "problems: none" in good.stdout, good.stdout + good.stderr
    missing = check("noimage")
    assert missing.returncode == 1
    assert "problem: image absent:1 is not on this docker host; build one there with `resenv image build --tag" \
           " absent:1`" in missing.stdout, missing.stdout
    down = check("nodaemon")
    assert down.returncode == 1
    assert f"problem: cannot reach the docker daemon at unix://{tmp_path}/none.sock: " in down.stdout, down.stdout
    assert "start dockerd, or point `docker.socket` (or DOCKER_HOST) at its socket" in down.stdout
    if not daemon_may_raise_rlimits(dockerd):
        memlock = check("memlock")
        assert memlock.returncode == 1 and "leave `docker.memlock` unset" in memlock.stdout, memlock.stdout
    for result in (missing, down):
        problems = [line for line in result.stdout.splitlines() if "problem:" in line]
        assert problems and all(len(line.split("problem:", 1)[1].strip()) > 20 for line in problems), problems


async def test_a_container_that_cannot_start_fails_the_provision_as_a_host_problem(dockerd, tmp_path):
    """After the preflight (the daemon changed under the run): typed so that no retry is tried."""
    from .test_docker_sandbox import docker_host

    box = docker_host(memlock=None).sandbox(tmp_path / "w1", attempt=FakeAttempt("run-x"))
    box.image = "resenv-test/absent:9"
    with pytest.raises(HostSetupError, match="resenv image build --tag resenv-test/absent:9"):
        await box.start()
    await box.close()
    if not daemon_may_raise_rlimits(dockerd):
        box = docker_host(memlock=-1).sandbox(tmp_path / "w2", attempt=FakeAttempt("run-x"))
        with pytest.raises(HostSetupError, match="leave `docker.memlock` unset"):
            await box.start()
        await box.close()
    gone = docker_host(memlock=None).sandbox(tmp_path / "w3", attempt=FakeAttempt("run-x", number=7), reopen=True)
    with pytest.raises(CheckpointGone, match="resenv prune"):
        await gone.start()
    await gone.close()
    assert dockerd.client().containers.list(all=True, filters={"label": "resenv.run=run-x"}) == []


def test_a_tier_retry_after_prune_is_refused_up_front_with_the_reason(dockerd, tmp_path):
    env = environ(tmp_path, dockerd)
    done = run_box(tmp_path, "{network: none}", env=env, tiers="C1")
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    queued = subprocess.run([*CLI, "control", "retry", run_id, "two/a", "--tier", "C1"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # before the prune: queued for a resume
    assert queued.returncode == 0 and "queued" in queued.stdout, queued.stdout + queued.stderr
    pruned = subprocess.run([*CLI, "prune", run_id], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert pruned.returncode == 0 and "box: removed 2 images" in pruned.stdout, pruned.stdout + pruned.stderr
    retry = subprocess.run([*CLI, "control", "retry", run_id, "one/a", "--tier", "C1"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert retry.returncode == 1, retry.stdout + retry.stderr
    said = " ".join(retry.stdout.split())
    assert "rejected" in said and "the state attempt 1 of job one/a left was a checkpoint image on docker host box" \
        in said and "removed by `resenv prune`" in said, said
    # the retry queued before the prune is refused by the engine when it resumes, with the same reason
    resumed = subprocess.run([*CLI, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    acks = rows(db, "SELECT j.key, c.ack, c.ack_message FROM controls c JOIN jobs j ON j.id = c.job_id ORDER BY c.id")
    assert [(a["key"], a["ack"]) for a in acks] == [("two/a", "rejected"), ("one/a", "rejected")], acks
    assert "the state attempt 1 of job two/a left was a checkpoint image" in acks[0]["ack_message"], acks
    assert rows(db, "SELECT scope FROM attempts WHERE scope != 'job'") == [], "no re-run was started"
    assert [j["state"] for j in rows(db, "SELECT state FROM jobs")] == ["done", "done"]


def test_an_image_without_the_tools_every_command_needs_is_named_with_what_it_lacks(dockerd, tmp_path):
    from resenv.engine.image_build import copy_into, shared_libraries

    from ..docker_rig import import_image

    root = tmp_path / "bare"
    for link in ("bin", "lib", "lib64"):
        (root / "usr" / link).mkdir(parents=True)  # merged /usr, as on the machine the files come from
    for link in ("bin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    for binary in ("/bin/sh", "/usr/bin/env", "/usr/bin/mkdir"):
        for path in (binary, *shared_libraries(binary)):
            copy_into(path, root)
    import_image(dockerd.client(), root, tag="resenv-test/bare:1")
    socket_path = dockerd.socket.removeprefix("unix://")
    hosts = f"  bare: {{kind: local, gpus: 0, sandbox: docker, image: resenv-test/bare:1, docker: {{socket: {socket_path}}}}}\n"
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
    check = subprocess.run([*CLI, "hosts", "check", str(bench), "--host", "bare"], env=environ(tmp_path),
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert check.returncode == 1
    assert "problem: image resenv-test/bare:1 lacks setsid, timeout, git, python3 on its PATH" in check.stdout, check.stdout
    dockerd.client().images.remove("resenv-test/bare:1", force=True)


OFFLINE_BASELINE = "a:\n  kind: baseline\n  offline: true\n"


def test_nothing_of_the_engines_pip_setup_reaches_a_container_and_an_offline_miss_is_its_own_category(
        dockerd, tmp_path):
    """The engine's find-links folder, pip config and cache are paths of this machine: none travels.
    Offline (no index), a package the local sources lack was never downloaded: `offline_miss`."""
    hosts = f"  box: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE}}}\n"
    repo = {"main.py": "import numpy\n", "requirements.txt": "numpy\n"}
    bench = bench_text(tmp_path, hosts, {"one": repo}, agent=OFFLINE_BASELINE)
    wheels = tmp_path / "engine-wheels"
    wheels.mkdir()
    env = environ(tmp_path, dockerd) | {"PIP_FIND_LINKS": str(wheels), "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
                                        "PIP_CACHE_DIR": str(tmp_path / "pip-cache")}
    (tmp_path / "pip.conf").write_text("[global]\nfind-links = /engine/config/wheels\n")
    done = subprocess.run([*CLI, "run", str(bench), "--host", "box", "--display", "plain", "--tiers", "C1"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    c1 = rows(db, "SELECT status, category, evidence_json FROM tier_results WHERE tier = 'C1'")
    assert [(r["status"], r["category"]) for r in c1] == [("fail", "offline_miss")], c1
    evidence = json.loads(c1[0]["evidence_json"])
    assert "numpy" in evidence["root_cause_line"] and evidence["root_cause"] == "agent log (offline: no package index)"
    agent_log = "".join(path.read_text() for path in (tmp_path / "data").rglob("agent.std*"))
    assert "No matching distribution found for numpy" in agent_log  # pip ran, without an index
    for engine_path in ("Looking in links", str(wheels), "/engine/config/wheels", "pip-cache", "pip.conf"):
        assert engine_path not in agent_log, (engine_path, agent_log[-2000:])


def test_a_checkpoint_removed_behind_resenvs_back_fails_the_re_runs_provision_with_the_reason(dockerd, tmp_path):
    """Removed by hand (no prune event to refuse it up front): the container cannot start, and that is
    the provision phase's failure, printed with its reason, not retried."""
    env = environ(tmp_path, dockerd)
    done = run_box(tmp_path, "{network: none}", env=env, tiers="C1")
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    client = dockerd.client()
    for image in client.images.list(filters={"label": [f"resenv.run={run_id}", "resenv.job=one/a"]}):
        client.images.remove(image.id, force=True)
    queued = subprocess.run([*CLI, "control", "retry", run_id, "one/a", "--tier", "C1"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert queued.returncode == 0, queued.stdout + queued.stderr
    resumed = subprocess.run([*CLI, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    said = " ".join(resumed.stdout.split())
    assert "one/a: tier C1 re-run error: phase provision: CheckpointGone: the checkpoint image resenv-ckpt:" in said, said
    rerun = rows(db, "SELECT id, state, reason FROM attempts WHERE scope = 'C1'")
    assert len(rerun) == 1 and rerun[0]["state"] == "error", rerun
    phases = rows(db, "SELECT name, status FROM phases WHERE attempt_id = ? AND name != 'teardown'", (rerun[0]["id"],))
    assert phases == [{"name": "provision", "status": "error"}], phases
