"""Slurm hosts against a real cluster: Debian's slurmctld + two slurmd "nodes" + munged,
private to the test (tests/slurm_rig.py), with two fake GPUs per node declared as GRES.

These drive the client, the poller and the sandbox directly; test_slurm_e2e.py runs the engine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from resenv.engine.hosts.slurm.client import LocalRunner, SlurmClient
from resenv.engine.hosts.slurm.host import build_slurm_host
from resenv.engine.spec import SlurmHost as SlurmSpec

from ..slurm_rig import make_cluster, slurm_available

pytestmark = [pytest.mark.skipif(not slurm_available(), reason="needs root and slurmctld, slurmd, slurm-client, munge"),
              pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    rig = make_cluster(tmp_path_factory.mktemp("slurm"), nodes=("n1", "n2"), gpus_per_node=2)
    yield rig
    rig.stop()


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, data: dict) -> None:
        self.events.append((kind, data))

    def slurm(self) -> list[dict]:
        return [data for kind, data in self.events if kind == "slurm"]


async def started_host(cluster, **fields):
    spec = SlurmSpec(kind="slurm", slurm_conf=str(cluster.conf), cpus=1, poll_s=0.3, **fields)
    host = build_slurm_host("cluster", spec)
    host.run_id = f"t{time.monotonic_ns() % 10**8}"
    assert await host.start(), host.facts
    return host


def sandbox_for(host, root: Path):
    attempt = SimpleNamespace(sink=Sink(), ctx=SimpleNamespace(run_id=host.run_id))
    return host.sandbox(root / "work", attempt=attempt), attempt.sink


def client(cluster) -> SlurmClient:
    return SlurmClient(LocalRunner(cluster.env()))


async def wait_until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


# -- the client against the real controller --------------------------------------------------------
async def test_submit_and_decode_exits_signals_and_states(cluster, tmp_path):
    slurm = client(cluster)
    cases = {"exit 7": ("FAILED", "exit 7"), "true": ("COMPLETED", "exit 0"), "kill -KILL $$": ("FAILED", "signal SIGKILL"),
             "kill -TERM $$": ("FAILED", "signal SIGTERM")}
    ids = {}
    for body, _ in cases.items():
        ids[body] = await slurm.submit(f"#!/bin/sh\n{body}\n", [f"--output={tmp_path}/%j.out", "--job-name=resenv-decode"])
    jobs = await wait_until(lambda: _all_finished(slurm, ids.values()))
    for body, (state, exit_text) in cases.items():
        info = jobs[ids[body]]
        assert (info.state, str(info.exit)) == (state, exit_text), (body, info)
        shown = await slurm.show_job(ids[body])  # scontrol's "code:signal" says the same
        assert str(shown.exit) == exit_text and shown.state == state
    # squeue --json (a raw wait status up to 22.05) decodes to the same
    json_jobs = await slurm.query_json()
    assert str(json_jobs[ids["kill -KILL $$"]].exit) == "signal SIGKILL"
    assert str(json_jobs[ids["exit 7"]].exit) == "exit 7"
    assert await slurm.show_job("999999") is None
    # the job-completion log (no accounting on this cluster: sacct has nothing) says the same
    assert await slurm.accounting(ids["exit 7"]) is None
    for body, (state, exit_text) in cases.items():
        logged = await wait_until(lambda job_id=ids[body]: slurm.completion_log(job_id))
        assert (logged.state, str(logged.exit)) == (state, exit_text), (body, logged)


async def _all_finished(slurm, ids):
    jobs = await slurm.query()
    if all(jobs.get(i) is not None and jobs[i].state in ("COMPLETED", "FAILED") for i in ids):
        return jobs
    return None


async def test_cluster_facts_read_partition_nodes_and_gpus(cluster):
    host = await started_host(cluster, gpus="auto")
    try:
        assert host.gpu_ids == [0, 1]
        assert host.facts["gpus_per_node"] == 2 and host.facts["nodes"] == 2 and host.facts["partition"] == "debug"
        assert host.facts["problems"] == []
    finally:
        await host.close()


# -- the sandbox -----------------------------------------------------------------------------------
async def test_exec_streams_output_passes_stdin_and_a_clean_env_and_gets_slurms_gpus(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, sink = sandbox_for(host, tmp_path)
    try:
        lines = []
        result = await sandbox.exec(
            ["sh", "-c", "echo out; echo err >&2; cat; echo CVD=$CUDA_VISIBLE_DEVICES; echo KEY=${SECRET_OF_ENGINE-unset};"
                         " echo NODE=$(cat /proc/sys/kernel/hostname); exit 3"],
            env={"CUDA_VISIBLE_DEVICES": "0"}, stdin=b"from stdin\n", timeout=60, log_prefix=tmp_path / "logs" / "a",
            on_line=lambda line: lines.append((line.stream, line.text)))
        assert result.returncode == 3 and not result.timed_out and not result.killed
        assert ("stdout", "out") in lines and ("stderr", "err") in lines and ("stdout", "from stdin") in lines
        cvd = next(text for stream, text in lines if text.startswith("CVD="))
        assert cvd in ("CVD=0", "CVD=1")  # the id Slurm granted on that node
        assert ("stdout", "KEY=unset") in lines
        assert (tmp_path / "logs" / "a.stdout").read_text().startswith("out\n")
        submitted = sink.slurm()[0]
        assert submitted["state"] == "SUBMITTED" and "--gres=gpu:1" in submitted["options"]
        # what the store keeps is what sbatch got: the job's comment, as the controller has it
        comment = next(o.partition("=")[2] for o in submitted["options"] if o.startswith("--comment="))
        info = await client(cluster).show_job(submitted["job_id"])
        assert info is not None and info.raw.get("Comment") == comment and comment.startswith("resenv:")
        # a command without GPUs asks for none and sees none
        lines.clear()
        result = await sandbox.exec(["sh", "-c", "echo CVD=${CUDA_VISIBLE_DEVICES-unset}"], env={"CUDA_VISIBLE_DEVICES": ""},
                                    timeout=60, log_prefix=tmp_path / "logs" / "b", on_line=lambda l: lines.append(l.text))
        assert result.ok and lines == ["CVD="]
        options = [event for event in sink.slurm() if event["state"] == "SUBMITTED"][-1]["options"]
        assert not any(option.startswith("--gres") for option in options)
    finally:
        await sandbox.close()
        await host.close()


async def test_resenv_timeout_runs_inside_the_job_in_seconds(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, _ = sandbox_for(host, tmp_path)
    try:
        started = time.monotonic()
        result = await sandbox.exec(["sh", "-c", "echo begin; sleep 60"], timeout=2, timeout_name="C1",
                                    log_prefix=tmp_path / "logs" / "t")
        assert result.timed_out and result.timeout_name == "C1" and result.returncode == -15
        assert time.monotonic() - started < 20
        assert 1.5 < result.active_s < 6
        assert (tmp_path / "logs" / "t.stdout").read_text() == "begin\n"
    finally:
        await sandbox.close()
        await host.close()


async def test_kill_cancels_the_job(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, sink = sandbox_for(host, tmp_path)
    slurm = client(cluster)
    try:
        task = asyncio.create_task(sandbox.exec(["sh", "-c", "echo up; sleep 120"], timeout=300,
                                                log_prefix=tmp_path / "logs" / "k"))
        await wait_until(lambda: (tmp_path / "logs" / "k.stdout").exists()
                         and (tmp_path / "logs" / "k.stdout").read_text() == "up\n")
        job_id = sink.slurm()[0]["job_id"]
        await sandbox.kill()
        result = await asyncio.wait_for(task, 30)
        assert result.killed and result.returncode is not None and result.returncode < 0
        await wait_until(lambda: _state(slurm, job_id, "CANCELLED"))  # after COMPLETING
    finally:
        await sandbox.close()
        await host.close()


async def test_pause_suspends_a_running_job_and_holds_a_pending_one(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, sink = sandbox_for(host, tmp_path)
    slurm = client(cluster)
    out = tmp_path / "logs" / "p.stdout"
    try:
        # long enough that a loaded machine cannot finish it before the suspend lands
        task = asyncio.create_task(sandbox.exec(
            ["sh", "-c", "i=0; while [ $i -lt 150 ]; do echo $i; i=$((i+1)); sleep 0.1; done"], timeout=300,
            log_prefix=tmp_path / "logs" / "p"))
        await wait_until(lambda: out.exists() and len(out.read_text().split()) >= 3)
        job_id = sink.slurm()[0]["job_id"]
        sandbox.pause()
        await wait_until(lambda: _state(slurm, job_id, "SUSPENDED"))
        # slurmd sends SIGTSTP, then SIGSTOP after its suspend grace time (2 s by default)
        frozen = await wait_until(lambda: _stable(out), 15)
        await asyncio.sleep(2.0)
        assert len(out.read_text().split()) == frozen  # nothing runs while suspended
        sandbox.resume()
        result = await asyncio.wait_for(task, 240)
        assert result.ok and out.read_text().split()[-1] == "149"
        assert result.active_s < result.duration_s - 2.0  # the suspended seconds are not active time
        assert any(event["state"] == "SUSPENDED" for event in sink.slurm())

        # a job still in the queue is held, then released
        blockers = [await slurm.submit("#!/bin/sh\nsleep 60\n", ["--gres=gpu:2", f"--output={tmp_path}/b%j.out"])
                    for _ in range(2)]
        task = asyncio.create_task(sandbox.exec(["echo", "ran"], env={"CUDA_VISIBLE_DEVICES": "0"}, timeout=60,
                                                log_prefix=tmp_path / "logs" / "q"))
        await wait_until(lambda: any(e["state"] == "PENDING" and e["reason"] for e in sink.slurm()))
        pending = [e for e in sink.slurm() if e["state"] == "PENDING" and e["reason"]][0]
        assert pending["reason"] in ("Resources", "Priority")  # what the dashboard shows
        sandbox.pause()
        await wait_until(lambda: _reason(slurm, pending["job_id"], "JobHeldUser"))
        await slurm.cancel(blockers)
        await asyncio.sleep(2.0)
        assert await _state(slurm, pending["job_id"], "PENDING")  # held: GPUs free, still not started
        sandbox.resume()
        result = await asyncio.wait_for(task, 60)
        assert result.ok and (tmp_path / "logs" / "q.stdout").read_text() == "ran\n"
        assert sandbox.queued_s() > 2.0
    finally:
        await sandbox.close()
        await host.close()


@pytest.mark.timeout(420)
async def test_a_pause_at_the_pending_to_running_transition_stops_the_job_every_time(cluster, tmp_path):
    """The poller's view of a job lags by a poll: a pause sent as the job starts must still stop it
    (held while queued, else suspended), and its acknowledgement must say which, as the controller
    confirms it. The trials pause at spread offsets after the GPUs the job waits for are freed."""
    host = await started_host(cluster)
    slurm = client(cluster)
    seen = []
    try:
        for trial in range(5):
            root = tmp_path / f"t{trial}"
            sandbox, sink = sandbox_for(host, root)
            out = root / "logs" / "c.stdout"
            blockers = [await slurm.submit("#!/bin/sh\nsleep 120\n", ["--gres=gpu:2", f"--output={root}/b%j.out"])
                        for _ in range(2)]
            try:
                await wait_until(lambda: _all_in(slurm, blockers, "RUNNING"))
                task = asyncio.create_task(sandbox.exec(
                    ["sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 0.1; done"],
                    env={"CUDA_VISIBLE_DEVICES": "0"}, timeout=300, log_prefix=root / "logs" / "c"))
                await wait_until(lambda: any(e["state"] == "PENDING" for e in sink.slurm()))
                job_id = sink.slurm()[0]["job_id"]
                await slurm.cancel(blockers)
                await asyncio.sleep(0.25 * trial)  # 0 to 1 s: before, at and after the job starts
                sandbox.pause()
                said = await sandbox.confirm_pause()
                info = await slurm.show_job(job_id)
                assert info is not None
                if info.state == "PENDING":
                    assert info.reason == "JobHeldUser" and f"slurm job {job_id} held" in said, (info, said)
                    await asyncio.sleep(2.0)  # GPUs free: a job that was not really held would start now
                    assert (await slurm.show_job(job_id)).state == "PENDING"
                    assert not out.exists() or out.read_text() == ""
                else:
                    assert info.state == "SUSPENDED" and f"slurm job {job_id} suspended (SUSPENDED)" in said, (info, said)
                    # Suspended before its command started, the batch script may still start it: resenv
                    # suspends it again then. Either the command is stopped, or it never started.
                    marker = root / "logs" / "c.slurm" / "started"
                    launched = await _within(lambda: marker.exists(), 4.0)
                    [frozen] = await wait_until(lambda: _stable_count(out, 2.0), 20)  # slurmd's grace time
                    await asyncio.sleep(2.0)
                    assert len(out.read_text().split()) == frozen
                    assert launched or not marker.exists()
                seen.append((info.state, said))
                await sandbox.kill()
                await asyncio.wait_for(task, 60)
            finally:
                await slurm.cancel(blockers)
                await sandbox.close()
        print("what each pause found and said:", *seen, sep="\n  ")
    finally:
        await host.close()


async def _all_in(slurm, job_ids, state):
    jobs = await slurm.query()
    return all(jobs.get(job_id) is not None and jobs[job_id].state == state for job_id in job_ids)


async def _stable_count(path: Path, window: float) -> list[int] | None:
    """[lines] when a file's line count did not change for `window` seconds (a list: 0 lines is an answer)."""
    before = len(path.read_text().split())
    await asyncio.sleep(window)
    return [before] if len(path.read_text().split()) == before else None


async def _within(predicate, seconds: float) -> bool:
    """Whether `predicate` turns true within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.1)
    return bool(predicate())


async def _stable(path: Path) -> int | None:
    before = len(path.read_text().split())
    await asyncio.sleep(1.0)
    return before if len(path.read_text().split()) == before else None


async def _state(slurm, job_id, state):
    info = (await slurm.query()).get(job_id)
    return info is not None and info.state == state


async def _reason(slurm, job_id, reason):
    info = (await slurm.query()).get(job_id)
    return info is not None and info.reason == reason


async def test_gpu_jobs_spread_over_both_nodes(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, sink = sandbox_for(host, tmp_path)
    try:
        runs = [sandbox.exec(["sh", "-c", "sleep 2; echo $(cat /proc/sys/kernel/hostname) $CUDA_VISIBLE_DEVICES"],
                             env={"CUDA_VISIBLE_DEVICES": "0,1"}, timeout=60, log_prefix=tmp_path / "logs" / f"m{i}")
                for i in range(2)]
        results = await asyncio.gather(*runs)
        assert all(result.ok for result in results)
        nodes = {event["nodes"] for event in sink.slurm() if event["state"] == "RUNNING"}
        assert nodes == {"n1", "n2"}  # each job wanted a whole node's GPUs: they ran side by side
        for i in range(2):
            assert (tmp_path / "logs" / f"m{i}.stdout").read_text().split()[-1] == "0,1"
    finally:
        await sandbox.close()
        await host.close()


async def test_controller_restart_mid_run_loses_nothing(cluster, tmp_path):
    host = await started_host(cluster)
    sandbox, _ = sandbox_for(host, tmp_path)
    states = []
    host.monitor.on_state = lambda state, reason: states.append(state)
    try:
        task = asyncio.create_task(sandbox.exec(["sh", "-c", "echo a; sleep 4; echo b; exit 4"], timeout=60,
                                                log_prefix=tmp_path / "logs" / "r"))
        await wait_until(lambda: (tmp_path / "logs" / "r.stdout").exists()
                         and (tmp_path / "logs" / "r.stdout").read_text() == "a\n")
        await asyncio.to_thread(cluster.stop_process, "slurmctld")
        await wait_until(lambda: "unreachable" in states, 15)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.start_controller)
        result = await asyncio.wait_for(task, 60)
        assert result.returncode == 4 and (tmp_path / "logs" / "r.stdout").read_text() == "a\nb\n"
        await wait_until(lambda: states[-1] == "up", 15)
        # and the cluster takes new work again
        result = await sandbox.exec(["true"], timeout=30, log_prefix=tmp_path / "logs" / "r2")
        assert result.ok
    finally:
        await sandbox.close()
        await host.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_job_killed_by_slurms_time_limit_is_a_timeout(cluster, tmp_path):
    """Slurm's own limit (1 minute, checked about every 30 s) as the backstop: resenv's is longer here."""
    host = await started_host(cluster, time_limit_min=1)
    sandbox, sink = sandbox_for(host, tmp_path)
    try:
        result = await sandbox.exec(["sh", "-c", "echo start; sleep 400"], timeout=600, log_prefix=tmp_path / "logs" / "l")
        assert result.timed_out and result.timeout_name == "slurm_time_limit" and result.returncode < 0
        assert 55 < result.active_s < 150
        assert "ended TIMEOUT" in (tmp_path / "logs" / "l.stderr").read_text()
        assert sink.slurm()[-1]["state"] == "TIMEOUT"
    finally:
        await sandbox.close()
        await host.close()


async def test_a_node_that_fails_under_a_job_is_an_infrastructure_error(cluster, tmp_path):
    from resenv.engine.sandbox.base import SandboxError

    host = await started_host(cluster)
    sandbox, sink = sandbox_for(host, tmp_path)
    node = None
    try:
        task = asyncio.create_task(sandbox.exec(["sh", "-c", "echo up; sleep 120"], timeout=300,
                                                log_prefix=tmp_path / "logs" / "nf"))
        running = await wait_until(lambda: [e for e in sink.slurm() if e["state"] == "RUNNING"])
        node = running[0]["nodes"]
        cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=resenv-test")
        with pytest.raises(SandboxError, match="NODE_FAIL"):
            await asyncio.wait_for(task, 60)  # error/infra: the engine's retry policy runs it again
    finally:
        if node:
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
            await asyncio.to_thread(cluster.wait_nodes_idle)
        await sandbox.close()
        await host.close()
