"""The docker sandbox against a real, private dockerd, and jobs end to end in containers.

The daemon is started by the fixture with its own socket, data root, exec root and pidfile, no bridge
and no iptables; the image is made from this machine's own files (tests/docker_rig.py); nothing is
pulled. Containers use network mode `none` (or `host`) only.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resenv.engine.hosts.pool import Host
from resenv.engine.sandbox.base import SandboxPathError
from resenv.engine.sandbox.docker import LABEL_RUN, DockerSandbox, prune, reap
from resenv.engine.spec import LocalHost

from ..docker_rig import TEST_IMAGE, build_rootfs, docker_available, import_image, start_dockerd
from .test_ssh_hosts import C0_AGENT, MAIN, bench_text, rows

pytestmark = [pytest.mark.skipif(not docker_available(), reason="needs root, docker.io and the docker SDK"),
              pytest.mark.timeout(300)]

LEFT_SLEEPERS = ("import os; print(sum(1 for p in os.listdir('/proc') if p.isdigit() and "
                 "open(f'/proc/{p}/cmdline', 'rb').read() == b'sleep\\x0060\\x00'))")
MEMLOCK = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]  # the daemon may not raise it past its own


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory):
    daemon = start_dockerd()
    try:
        client = daemon.client()
        import_image(client, build_rootfs(tmp_path_factory.mktemp("rootfs") / "root"))
        old = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = daemon.socket
        yield daemon
    finally:
        if old is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = old
        daemon.stop()


def docker_host(**docker: object) -> Host:
    options = {"memlock": MEMLOCK if MEMLOCK != resource.RLIM_INFINITY else -1, **docker}
    spec = LocalHost(kind="local", sandbox="docker", image=TEST_IMAGE, gpus=0, docker=options)
    return Host(name="local", kind="local", slots=2, gpu_ids=[], spec=spec)


class FakeAttempt:
    """What DockerSandbox.for_job reads from a JobAttempt."""

    def __init__(self, run_id: str, key: str = "repo/agent", number: int = 1, attempt_id: int = 11) -> None:
        self.ctx = type("Ctx", (), {"run_id": run_id})()
        self.job = {"key": key, "id": 5}
        self.number = number
        self.attempt_id = attempt_id


def sandbox(tmp_path: Path, run_id: str = "run-1", **docker: object) -> DockerSandbox:
    work = tmp_path / "jobs" / "repo--agent" / "attempt-1" / "work"
    return docker_host(**docker).sandbox(work, attempt=FakeAttempt(run_id))


async def test_exec_streams_output_clean_env_exit_codes_and_missing_commands(dockerd, tmp_path):
    box = sandbox(tmp_path)
    lines = []
    try:
        result = await box.exec(["sh", "-c", "echo out; echo err >&2; pwd; env; exit 3"], env={"A": "1"},
                                log_prefix=tmp_path / "logs" / "a", on_line=lines.append)
        assert result.returncode == 3 and not result.timed_out
        text = {(line.stream, line.text) for line in lines}
        assert ("stdout", "out") in text and ("stderr", "err") in text and ("stdout", str(box.workdir)) in text
        env = sorted(line.text for line in lines if "=" in line.text)
        assert env == sorted([f"HOME={box.home}", f"TMPDIR={box.tmp}", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1",
                              "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1",
                              f"PWD={box.workdir}"])
        assert "RESENV-PGID" not in (tmp_path / "logs" / "a.stderr").read_text()
        missing = await box.exec(["no-such-command"], log_prefix=tmp_path / "logs" / "b")
        assert missing.returncode == 127
        fed = await box.exec(["cat"], stdin=b"x" * 300_000, log_prefix=tmp_path / "logs" / "c")
        assert fed.returncode == 0 and (tmp_path / "logs" / "c.stdout").read_bytes() == b"x" * 300_000
    finally:
        await box.close()


async def test_timeout_kills_the_whole_process_tree_and_pause_stops_the_clock(dockerd, tmp_path):
    box = sandbox(tmp_path)
    try:
        started = time.monotonic()
        result = await box.exec(["sh", "-c", "sleep 60 & sleep 60 & wait"], timeout=1.0, timeout_name="probe",
                                log_prefix=tmp_path / "logs" / "t")
        assert result.timed_out and result.timeout_name == "probe" and result.returncode == -15
        assert time.monotonic() - started < 10
        code, out = await box._exec_simple(["python3", "-c", LEFT_SLEEPERS])
        assert out.strip() == b"0", "no child of the timed-out command is left"

        task = asyncio.create_task(box.exec(["sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 0.25; done"],
                                            timeout=2.5, log_prefix=tmp_path / "logs" / "p"))
        await asyncio.sleep(0.4)
        box.pause()
        await asyncio.sleep(0.3)
        info = box.client.api.inspect_container(box.container_id)
        assert info["State"]["Paused"] is True
        frozen = (tmp_path / "logs" / "p.stdout").read_text()
        await asyncio.sleep(1.5)
        assert (tmp_path / "logs" / "p.stdout").read_text() == frozen, "nothing runs while paused"
        box.resume()
        result = await task
        assert result.returncode == 0 and not result.timed_out  # 1.5 s paused did not count
        assert result.duration_s - result.active_s > 1.5

        task = asyncio.create_task(box.exec(["sh", "-c", "sleep 100 & sleep 100"], log_prefix=tmp_path / "logs" / "k"))
        await asyncio.sleep(0.5)
        await box.kill()
        killed = await task
        assert killed.killed and killed.returncode == -9
    finally:
        await box.close()


async def test_container_limits_labels_network_and_no_host_mounts(dockerd, tmp_path):
    box = sandbox(tmp_path, cpus=0.5, memory_mib=128, pids=40, shm_mib=96, network="none")
    try:
        await box.exec(["true"], log_prefix=tmp_path / "logs" / "x")
        info = box.client.api.inspect_container(box.container_id)
        host_config = info["HostConfig"]
        assert host_config["Privileged"] is False and host_config["NetworkMode"] == "none"
        assert host_config["NanoCpus"] == 500_000_000 and host_config["Memory"] == 128 * 2**20
        assert host_config["MemorySwap"] == 128 * 2**20 and host_config["PidsLimit"] == 40
        assert host_config["ShmSize"] == 96 * 2**20 and host_config["Init"] is True
        assert {u["Name"] for u in host_config["Ulimits"]} == {"memlock"}
        assert "no-new-privileges" in host_config["SecurityOpt"]
        assert info["Mounts"] == [] and not host_config.get("Binds")
        assert host_config.get("DeviceRequests") in (None, [])  # no GPU leased, no GPU request
        labels = info["Config"]["Labels"]
        assert labels["resenv.run"] == "run-1" and labels["resenv.job"] == "repo/agent" and labels["resenv.attempt"] == "11"
        # the pids limit holds: a fork loop cannot exceed it
        bomb = await box.exec(["sh", "-c", "i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done; wait"],
                              timeout=20, log_prefix=tmp_path / "logs" / "bomb")
        assert "fork" in (tmp_path / "logs" / "bomb.stderr").read_text().lower() or bomb.returncode != 0
        # the memory limit holds: allocating past it gets the process OOM-killed
        hog = await box.exec(["python3", "-c", "b = bytearray(400 * 2**20); print('survived')"], timeout=30,
                             log_prefix=tmp_path / "logs" / "hog")
        assert hog.returncode != 0 and "survived" not in (tmp_path / "logs" / "hog.stdout").read_text()
        # no network in mode none
        net = await box.exec(["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 9), 1)"],
                             timeout=10, log_prefix=tmp_path / "logs" / "net")
        assert net.returncode != 0
    finally:
        await box.close()


async def test_files_go_in_and_out_as_tar_streams_and_escapes_are_refused(dockerd, tmp_path):
    box = sandbox(tmp_path)
    try:
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "f.txt").write_text("tree file")
        (tree / "link").symlink_to("sub/f.txt")
        await box.put("in/tree", tree)
        await box.put("in/bytes.bin", b"\x00\x01binary")
        assert await box.get("in/tree/sub/f.txt") == b"tree file"
        assert await box.get("in/bytes.bin") == b"\x00\x01binary"
        code, out = await box._exec_simple(["readlink", str(box.workdir / "in/tree/link")])
        assert out.strip() == b"sub/f.txt"  # links travel as links
        await box.exec(["sh", "-c", "ln -s /etc escape; ln -s /etc/passwd pw"], log_prefix=tmp_path / "logs" / "l")
        with pytest.raises(SandboxPathError):
            await box.get("pw")
        with pytest.raises(SandboxPathError):
            await box.put("escape/x", b"no")
        with pytest.raises(SandboxPathError):
            await box.get("../../etc/passwd")
        with pytest.raises(FileNotFoundError):
            await box.get("absent")
        # the engine's side never saw the files: nothing is mounted from the host
        assert not (box.workdir / "in").exists()
    finally:
        await box.close()


async def test_checkpoint_then_reopen_in_a_fresh_container_and_reap_prune_by_label_only(dockerd, tmp_path):
    client = dockerd.client()
    stranger = client.containers.create(TEST_IMAGE, ["sleep", "600"], network_mode="none")  # not ours
    box = sandbox(tmp_path, run_id="run-ck")
    await box.exec(["sh", "-c", "echo state > made-by-agent"], log_prefix=tmp_path / "logs" / "a")
    image = await box.checkpoint()
    first = box.container_id
    await box.close()
    host = docker_host()
    again = host.sandbox(box.workdir, attempt=FakeAttempt("run-ck"), reopen=True)
    try:
        result = await again.exec(["cat", "made-by-agent"], log_prefix=tmp_path / "logs" / "b")
        assert result.returncode == 0 and (tmp_path / "logs" / "b.stdout").read_text() == "state\n"
        assert again.container_id != first and again.image.startswith("resenv-ckpt:")
        orphan_id = again.container_id
    finally:
        again._closed = True  # leave the container behind, as a dead engine would
    assert client.containers.get(orphan_id).labels[LABEL_RUN] == "run-ck"
    assert reap(client, "run-other") == []
    assert reap(client, "run-ck") == [orphan_id]
    done = prune(client, "run-ck")
    assert image in done["images"]
    assert client.containers.get(stranger.id).id == stranger.id  # never touched what it did not label
    assert client.images.get(TEST_IMAGE)
    stranger.remove(force=True)


def test_gpu_request_only_when_leased_and_visible_devices_renumbered(tmp_path):
    host = docker_host()
    lease = type("Lease", (), {"gpus": (3, 5)})()
    box = host.sandbox(tmp_path / "w", lease=lease, attempt=FakeAttempt("r"))
    kwargs = box.create_kwargs()
    request = kwargs["device_requests"][0]
    assert request["DeviceIDs"] == ["3", "5"] and request["Capabilities"] == [["gpu"]]
    assert box.child_env({"CUDA_VISIBLE_DEVICES": "5"})["CUDA_VISIBLE_DEVICES"] == "1"
    assert box.child_env({"CUDA_VISIBLE_DEVICES": "3,5"})["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert box.visible_gpus("5") == "1", "a probe's {gpus} names what the container sees"
    assert "device_requests" not in host.sandbox(tmp_path / "w2", attempt=FakeAttempt("r")).create_kwargs()
    assert kwargs["privileged"] is False and kwargs["network_mode"] == "none"


def test_jobs_run_end_to_end_in_containers_through_the_engine(dockerd, tmp_path):
    hosts = (f"  box: {{kind: local, gpus: 0, slots: 2, sandbox: docker, image: {TEST_IMAGE},"
             f" docker: {{network: none, pids: 256, memory_mib: 512, memlock: {MEMLOCK}, keep_checkpoints: false}}}}\n")
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}, "two": {"main.py": MAIN}})
    env = dict(os.environ, RESENV_DB=str(tmp_path / "store.db"), RESENV_DATA_DIR=str(tmp_path / "data"),
               DOCKER_HOST=dockerd.socket)
    done = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--host", "box",
                           "--display", "plain", "--tiers", "C1,C5"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    jobs = rows(db, "SELECT key, state, host FROM jobs ORDER BY key")
    assert [(j["state"], j["host"]) for j in jobs] == [("done", "box")] * 2, jobs
    tiers = {(r["key"], r["tier"]): r["status"] for r in rows(
        db, "SELECT j.key, t.tier, t.status FROM tier_results t JOIN jobs j ON j.id = t.job_id")}
    assert set(tiers.values()) == {"pass"} and len(tiers) == 4, tiers
    agent_out = rows(db, "SELECT data FROM events WHERE kind = 'transcript' AND data LIKE '%agent on%'")
    assert agent_out, "the agent's output streamed into the store"
    hostname = json.loads(agent_out[0]["data"])["text"].split()[2]
    assert hostname != os.uname().nodename  # it ran in a container, whose hostname is its id
    work = Path(rows(db, "SELECT workdir FROM attempts LIMIT 1")[0]["workdir"])
    assert (work / "report.json").is_file() and not (work / "repo").exists()
    client = dockerd.client()
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    assert client.containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == []
    assert client.images.list(filters={"label": f"resenv.run={run_id}"}) == []  # pruned at the run's end


def test_c0_judges_the_container_and_a_tier_retry_after_the_run_ended_reopens_its_checkpoint(dockerd, tmp_path):
    hosts = (f"  box: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE},"
             f" docker: {{network: none, memlock: {MEMLOCK}}}}}\n")
    repo = {"main.py": "import json\nimport mypkg\nimport fakedep\nimport otherdep\n", "mypkg/__init__.py": ""}
    bench = bench_text(tmp_path, hosts, {"one": repo}, agent=C0_AGENT)
    env = dict(os.environ, RESENV_DB=str(tmp_path / "store.db"), RESENV_DATA_DIR=str(tmp_path / "data"),
               DOCKER_HOST=dockerd.socket)
    cli = [sys.executable, "-m", "resenv.engine.cli.main"]
    done = subprocess.run([*cli, "run", str(bench), "--host", "box", "--display", "plain", "--tiers", "C0"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    client = dockerd.client()
    assert client.containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == []
    assert len(client.images.list(filters={"label": f"resenv.run={run_id}"})) == 1, "checkpoint kept for retries"

    retry = subprocess.run([*cli, "control", "retry", run_id, "one/a", "--tier", "C0"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    resumed = subprocess.run([*cli, "run", "--resume", run_id, "--display", "plain"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = rows(db, "SELECT status, category, evidence_json FROM tier_results WHERE tier = 'C0' ORDER BY id")
    assert len(results) == 2, results
    for row in results:  # both judged in a container: the env exists only there
        evidence = json.loads(row["evidence_json"])
        assert (row["status"], row["category"], evidence["missing"]) == ("fail", "deps_missing", ["otherdep"]), (
            evidence["log_tail"])
    assert client.containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == []
    pruned = subprocess.run([*cli, "prune", run_id], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert pruned.returncode == 0 and "box: removed 1 image, 0 containers" in pruned.stdout, (
        pruned.stdout + pruned.stderr)
    assert client.images.list(filters={"label": f"resenv.run={run_id}"}) == []
    assert client.images.get(TEST_IMAGE), "only what the run made is removed"


def test_jobs_run_in_containers_on_an_ssh_host_through_the_forwarded_docker_socket(dockerd, tmp_path):
    from ..sshd_rig import make_sshd, sshd_available

    if not sshd_available():
        pytest.skip("needs openssh-server")
    server = make_sshd(tmp_path / "sshd")
    try:
        socket_path = dockerd.socket.removeprefix("unix://")
        hosts = server.host_yaml("far", gpus=0, slots=1, sandbox="docker", image=TEST_IMAGE,
                                 docker=f"{{network: none, memlock: {MEMLOCK}, socket: {socket_path}}}")
        bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
        env = dict(os.environ, RESENV_DB=str(tmp_path / "store.db"), RESENV_DATA_DIR=str(tmp_path / "data"))
        env.pop("DOCKER_HOST", None)  # the engine reaches this daemon only through the SSH host
        done = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--host", "far",
                               "--display", "plain", "--tiers", "C1,C5"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        db = tmp_path / "store.db"
        assert rows(db, "SELECT state, host FROM jobs") == [{"state": "done", "host": "far"}]
        tiers = {r["tier"]: r["status"] for r in rows(db, "SELECT tier, status FROM tier_results")}
        assert tiers == {"C1": "pass", "C5": "pass"}, tiers
        run_id = rows(db, "SELECT id FROM runs")[0]["id"]
        assert dockerd.client().containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == []
        # its checkpoint is kept for tier retries until `resenv prune`, which reaches the daemon over SSH
        assert len(dockerd.client().images.list(filters={"label": f"resenv.run={run_id}"})) == 1
        pruned = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "prune", run_id], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert pruned.returncode == 0 and "far: removed 1 image," in pruned.stdout, pruned.stdout + pruned.stderr
        assert dockerd.client().images.list(filters={"label": f"resenv.run={run_id}"}) == []
    finally:
        server.stop()


def test_a_rescore_judges_each_checkpoint_in_a_fresh_container_and_names_a_pruned_one_as_gone(dockerd, tmp_path):
    hosts = (f"  box: {{kind: local, gpus: 0, slots: 2, sandbox: docker, image: {TEST_IMAGE},"
             f" docker: {{network: none, memlock: {MEMLOCK}}}}}\n")
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}, "two": {"main.py": MAIN}})
    env = dict(os.environ, RESENV_DB=str(tmp_path / "store.db"), RESENV_DATA_DIR=str(tmp_path / "data"),
               DOCKER_HOST=dockerd.socket)
    cli = [sys.executable, "-m", "resenv.engine.cli.main"]
    done = subprocess.run([*cli, "run", str(bench), "--host", "box", "--display", "plain", "--tiers", "C1,C5"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    run_id = rows(db, "SELECT id FROM runs")[0]["id"]
    client = dockerd.client()
    assert len(client.images.list(filters={"label": f"resenv.run={run_id}"})) == 2, "checkpoints kept"
    # What older rules said about one/a's CPU run: the rescore must judge its container again to differ.
    conn = sqlite3.connect(db)
    conn.execute("UPDATE tier_results SET status = 'fail', category = 'deps_missing' WHERE tier = 'C1'"
                 " AND job_id = (SELECT id FROM jobs WHERE key = 'one/a')")
    conn.commit()
    conn.close()

    rescored = subprocess.run([*cli, "rescore", run_id, "--json"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=240)
    assert rescored.returncode == 0, rescored.stdout + rescored.stderr
    result = json.loads(rescored.stdout)
    assert [(job["job"], job["outcome"]) for job in result["jobs"]] == [("one/a", "rescored"), ("two/a", "rescored")]
    assert [(c["job"], c["tier"], c["old"]["status"], c["new"]["status"]) for c in result["changes"]] == [
        ("one/a", "C1", "fail", "pass")]  # the venv exists only in the checkpoint image: it was judged there
    attempts = rows(db, "SELECT host, state FROM attempts WHERE scope = 'rescore'")
    assert attempts == [{"host": "box", "state": "done"}] * 2
    assert client.containers.list(all=True, filters={"label": f"resenv.run={run_id}"}) == []
    assert len(client.images.list(filters={"label": f"resenv.run={run_id}"})) == 2, "a rescore adds no checkpoint"

    pruned = subprocess.run([*cli, "prune", run_id], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    again = subprocess.run([*cli, "rescore", run_id, "--json"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=240)
    assert again.returncode == 1, again.stdout + again.stderr  # it judged nothing
    gone = json.loads(again.stdout)
    assert gone["scoring"]["label"] == "rescore 2" and gone["scoring"]["state"] == "empty"
    assert [(job["job"], job["outcome"]) for job in gone["jobs"]] == [("one/a", "not_rescored"), ("two/a", "not_rescored")]
    assert all("checkpoint image resenv-ckpt:" in job["reason"] and "is gone" in job["reason"]
               for job in gone["jobs"]), gone["jobs"]
    assert gone["changes"] == []
    def report(*scoring: str) -> dict:
        return json.loads(subprocess.run([*cli, "report", run_id, "--format", "json", *scoring], env=env,
                                         cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout)

    assert report()["scoring"]["label"] == "rescore 1"  # an empty scoring never becomes the latest
    assert len(report("--scoring", "2")["scoring"]["not_rescored"]) == 2
