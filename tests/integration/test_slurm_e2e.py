"""The engine on a real Slurm cluster: the starter suite end to end through a `kind: slurm`
host, GPU tiers asking for exactly their `--gres`, the Slurm queue reason in the store and the
dashboard, and an operator's cancel reaching `scancel`. The cluster is tests/slurm_rig.py's."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from ..conftest import RESENV, bundle_repos, resenv, rows, wait_for
from ..slurm_rig import make_cluster, slurm_available
from .test_starter_e2e import TIERS, cpu_only_benchmark, expected

pytestmark = [pytest.mark.skipif(not slurm_available(), reason="needs root and slurmctld, slurmd, slurm-client, munge")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    rig = make_cluster(tmp_path_factory.mktemp("slurm-e2e"), nodes=("n1", "n2"), gpus_per_node=2)
    yield rig
    rig.stop()


def slurm_events(db: Path, job_id: int | None = None) -> list[dict]:
    sql = "SELECT job_id, data FROM events WHERE kind = 'slurm'" + (" AND job_id = ?" if job_id else "") + " ORDER BY id"
    return [json.loads(row["data"]) | {"job_id_resenv": row["job_id"]}
            for row in rows(db, sql, (job_id,) if job_id else ())]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_starter_suite_runs_through_the_slurm_host(cluster, tmp_path, cli_env):
    want = expected()
    bench = cpu_only_benchmark(tmp_path)
    data = yaml.safe_load(bench.read_text())
    data["hosts"]["cluster"] = {"kind": "slurm", "slurm_conf": str(cluster.conf), "gpus": 0, "cpus": 1,
                                "slots": 4, "poll_s": 0.5}
    data["defaults"]["host"] = "cluster"
    bench.write_text(yaml.safe_dump(data, sort_keys=False))
    done = resenv("run", str(bench), "--suite", "starter", "--agent", want["agent"], "--host", "cluster",
                  "--display", "plain", env=cli_env, cwd=tmp_path, timeout=1400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    db = Path(cli_env["RESENV_DB"])
    jobs = rows(db, "SELECT id, repo_id, state, host FROM jobs")
    assert sorted(job["repo_id"] for job in jobs) == sorted(want["repos"])
    mismatches = []
    for job in jobs:
        assert job["state"] == "done" and job["host"] == "cluster", job
        got = {row["tier"]: row["status"] + (f"/{row['category']}" if row["category"] else "")
               for row in rows(db, "SELECT tier, status, category FROM tier_results WHERE job_id = ? ORDER BY id",
                               (job["id"],))}
        for tier in TIERS:
            if got.get(tier) != want["repos"][job["repo_id"]][tier]:
                mismatches.append(f"{job['repo_id']} {tier}: expected {want['repos'][job['repo_id']][tier]}, got {got.get(tier)}")
        events = slurm_events(db, job["id"])
        submitted = [event for event in events if event["state"] == "SUBMITTED"]
        logs = {event["log"] for event in submitted}
        assert "agent" in logs and any(log.startswith("C1") for log in logs), logs  # the agent and C1 ran as jobs
        assert not any(log.startswith("checkout") for log in logs)  # git ran on the submit side
        assert all(not any(o.startswith("--gres") for o in event["options"]) for event in submitted)
        assert len({event["job_id"] for event in submitted}) == len(submitted)  # one Slurm job per command
    assert not mismatches, "\n".join(mismatches)
    # nothing of the run is left in the queue
    left = cluster.run("squeue", "--me", "--noheader", "--states=PENDING,RUNNING,SUSPENDED", "-o", "%j").stdout.split()
    assert not [name for name in left if name.startswith("resenv-")]


GPU_MAIN = "import os\nprint('visible', os.environ.get('CUDA_VISIBLE_DEVICES'))\n"
GPU_CHECK = ("import os, sys\nids = [i for i in os.environ['CUDA_VISIBLE_DEVICES'].split(',') if i]\n"
             "print('visible', ids)\nsys.exit(0 if len(ids) == int(sys.argv[1]) else 3)\n")
VENV_AGENT = """\
a:
  kind: command
  command: >-
    echo agent sees "[$CUDA_VISIBLE_DEVICES]";
    python3 -m venv --without-pip {env} &&
    printf '{{"python_path": "%s", "python_version": null}}' {env}/bin/python > {report}
"""


def gpu_bench(root: Path, cluster, agent: str = VENV_AGENT, probes_timeout: float | None = None) -> Path:
    repos = bundle_repos(root, {"gpu-repo": {"main.py": GPU_MAIN, "check.py": GPU_CHECK}})
    repos = repos.replace(
        "      not_applicable: {single_gpu: no GPU code, multi_gpu: no GPU code}\n",
        '        single_gpu: {command: "{python} check.py 1"}\n        multi_gpu: {command: "{python} check.py 2", gpus: 2}\n')
    text = "version: 1\n"
    text += "defaults:\n  suite: s\n  agent: a\n  host: cluster\n  retries: {infra: 0, backoff_s: 0.1}\n"
    text += "  timeouts: {teardown: 30" + (f", probes: {probes_timeout}" if probes_timeout else "") + "}\n"
    text += "hosts:\n" + cluster.host_yaml("cluster", gpus="auto", cpus=1, poll_s=0.3)
    text += "agents:\n" + textwrap.indent(agent, "  ")
    text += repos
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


@pytest.mark.timeout(300)
def test_gpu_tiers_ask_slurm_for_their_gpus_and_queued_jobs_show_the_reason(cluster, tmp_path, cli_env):
    # probes: 10 s for the whole phase, while its GPU jobs wait longer than that in the queue
    bench = gpu_bench(tmp_path, cluster, probes_timeout=10)
    # Every GPU of the cluster is taken: the job's GPU probes wait in Slurm's queue, with a reason.
    blockers = [cluster.run("sbatch", "--parsable", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
                for _ in range(2)]
    proc = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none"], env=cli_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = Path(cli_env["RESENV_DB"])
    try:
        pending = wait_for(lambda: [e for e in slurm_events(db)
                                    if e["state"] == "PENDING" and e["reason"] and e["gpus"] >= 1], 90)
        assert pending[0]["reason"] in ("Resources", "Priority")
        # the dashboard's feed shows it on the job
        from resenv.tui.data import RunFeed

        run_id = rows(db, "SELECT id FROM runs")[0]["id"]
        feed = RunFeed(db, run_id)
        feed.load()
        feed.poll()
        job = next(iter(feed.jobs.values()))
        assert job.queue in ("slurm PD Resources", "slurm PD Priority"), job
        time.sleep(12)  # longer than the probes phase's timeout: queue time must not count
        cluster.run("scancel", *blockers)
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.run("scancel", *blockers, check=False)
    assert proc.returncode == 0, out[-3000:]
    tiers = {row["tier"]: (row["status"], row["category"]) for row in rows(db, "SELECT tier, status, category FROM tier_results")}
    # The entrypoints ran and exited 0, but nothing shows a compute node's GPU processes to resenv:
    # GPU use cannot be proven either way, so C3/C4 are the infrastructure's error, never a pass.
    assert tiers["C1"] == ("pass", None) and tiers["C3"] == tiers["C4"] == ("error", "infra"), tiers
    reasons = {row["tier"]: json.loads(row["evidence_json"])["reason"]
               for row in rows(db, "SELECT tier, evidence_json FROM tier_results WHERE tier IN ('C3', 'C4')")}
    assert all("GPU use cannot be proven on host cluster" in reason and "Slurm" in reason
               for reason in reasons.values()), reasons
    submitted = {e["log"]: e["options"] for e in slurm_events(db) if e["state"] == "SUBMITTED"}
    gres = {log: [o for o in options if o.startswith("--gres")] for log, options in submitted.items()}
    assert gres["agent"] == []  # no GPU idles through the agent's phase
    assert next(v for k, v in gres.items() if k.startswith("C3")) == ["--gres=gpu:1"]
    assert next(v for k, v in gres.items() if k.startswith("C4")) == ["--gres=gpu:2"]
    agent_out = next(Path(r["path"]) for r in rows(db, "SELECT path FROM logs WHERE name = 'agent' AND stream = 'stdout'"))
    assert "agent sees []" in agent_out.read_text()
    # the C4 log shows the two GPUs Slurm granted
    c4 = next(Path(r["path"]) for r in rows(db, "SELECT name, path FROM logs WHERE stream = 'stdout'") if r["name"].startswith("C4"))
    assert "visible ['0', '1']" in c4.read_text()
    # and the queue time counted against no timeout: the attempt's phases all finished
    assert {row["status"] for row in rows(db, "SELECT status FROM phases")} == {"done"}


@pytest.mark.timeout(300)
def test_cancel_control_cancels_the_slurm_job(cluster, tmp_path, cli_env):
    agent = "a:\n  kind: command\n  command: \"echo working; sleep 300\"\n"
    bench = gpu_bench(tmp_path, cluster, agent=agent)
    proc = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none"], env=cli_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = Path(cli_env["RESENV_DB"])
    try:
        running = wait_for(lambda: [e for e in slurm_events(db) if e["state"] == "RUNNING" and e["log"] == "agent"], 90)
        job_id = running[0]["job_id"]
        done = resenv("control", "cancel", "latest", env=cli_env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rows(db, "SELECT state FROM jobs")[0]["state"] == "cancelled"
    state = wait_for(lambda: cluster.run("scontrol", "show", "job", "-o", job_id, check=False).stdout, 30)
    assert "JobState=CANCELLED" in state, state


def test_hosts_check_explains_the_slurm_host(cluster, tmp_path, cli_env):
    bench = gpu_bench(tmp_path, cluster)
    text = bench.read_text().replace("hosts:\n", "hosts:\n" + cluster.host_yaml("big", gpus=4)
                                     + cluster.host_yaml("nowhere", partition="gpu-h100"), 1)
    bench.write_text(text)
    done = resenv("hosts", "check", str(bench), "--host", "cluster", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster (slurm): reachable via local" in done.stdout
    assert "partition: debug" in done.stdout and "GPUs per node: 2" in done.stdout
    assert "n1 idle" in done.stdout or "n1 mixed" in done.stdout
    as_json = json.loads(resenv("hosts", "check", str(bench), "--host", "cluster", "--json", env=cli_env,
                                cwd=tmp_path).stdout)[0]
    assert as_json["slurm"]["gpus_per_node"] == 2 and as_json["slurm"]["limits"]["max_time"] == "UNLIMITED"
    done = resenv("hosts", "check", str(bench), "--host", "big", "--host", "nowhere", env=cli_env, cwd=tmp_path)
    assert done.returncode == 1
    assert "gpus: 4 asked, but the partition's nodes have at most 2" in done.stdout
    assert "no partition 'gpu-h100'" in done.stdout


@pytest.mark.timeout(300)
def test_a_cluster_behind_an_ssh_login_node_shares_nothing_with_the_engine(tmp_path, cli_env):
    """The login node (a loopback sshd whose mount namespace hides the engine's data dir behind a
    tmpfs) and the cluster's daemons (started in that namespace) share files; the engine sees none of
    them: the repo, the agent, the spool files and the logs all travel over SSH and SFTP."""
    from ..sshd_rig import make_sshd, sshd_available

    if not sshd_available():
        pytest.skip("needs openssh-server")
    data_dir = Path(cli_env["RESENV_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    sshd = make_sshd(tmp_path / "sshd", hide=[data_dir])
    rig = None
    try:
        rig = make_cluster(tmp_path / "cluster", nodes=("n1",), gpus_per_node=2, mount_ns_pid=sshd.proc.pid)
        bench = gpu_bench(tmp_path, rig)
        login = (f"login: {{address: 127.0.0.1, port: {sshd.port}, user: root, key: {sshd.client_key}, "
                 f"known_hosts: {sshd.known_hosts}}}")
        bench.write_text(bench.read_text().replace("poll_s: 0.3}", f"poll_s: 0.3, {login}}}", 1))
        done = resenv("run", str(bench), "--display", "plain", env=cli_env, cwd=tmp_path, timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        db = Path(cli_env["RESENV_DB"])
        tiers = {row["tier"]: row["status"] for row in rows(db, "SELECT tier, status FROM tier_results")}
        # the GPU entrypoints ran on the cluster, but a Slurm host cannot prove GPU use: error, not pass
        assert tiers["C1"] == "pass" and tiers["C3"] == "error" and tiers["C4"] == "error", tiers
        assert all(json.loads(r["evidence_json"])["exit_code"] == 0 for r in rows(
            db, "SELECT evidence_json FROM tier_results WHERE tier IN ('C3', 'C4')"))
        # the engine's copies of the logs came over SFTP; the work dir exists only behind the login node
        c3 = next(Path(r["path"]) for r in rows(db, "SELECT name, path FROM logs WHERE stream = 'stdout'")
                  if r["name"].startswith("C3"))
        assert c3.read_text().startswith("visible [")
        workdir = Path(rows(db, "SELECT workdir FROM attempts")[0]["workdir"])
        assert not (workdir / "env").exists()  # the agent's venv is on the cluster's side only
        transcript = [json.loads(r["data"]) for r in rows(db, "SELECT data FROM events WHERE kind = 'transcript'")]
        assert any("agent sees []" in (event.get("text") or "") for event in transcript)
    finally:
        if rig is not None:
            rig.stop()
        sshd.stop()


@pytest.mark.timeout(300)
def test_resume_cancels_a_dead_engines_jobs_and_ctrl_c_cancels_its_own(cluster, tmp_path, cli_env):
    import os
    import signal

    agent = "a:\n  kind: command\n  command: \"echo working; sleep 300\"\n"
    bench = gpu_bench(tmp_path, cluster, agent=agent)
    db = Path(cli_env["RESENV_DB"])

    def running_agent(after: set[str]) -> list[str]:
        return [e["job_id"] for e in slurm_events(db) if e["state"] == "RUNNING" and e["log"] == "agent"
                and e["job_id"] not in after]

    def slurm_state(job_id: str) -> str:
        text = cluster.run("scontrol", "show", "job", "-o", job_id, check=False).stdout
        return text.split("JobState=")[1].split()[0] if "JobState=" in text else ""

    first = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none"], env=cli_env, cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        old = wait_for(lambda: running_agent(set()), 90)[0]
        os.kill(first.pid, signal.SIGKILL)  # the engine dies; its Slurm job does not
        first.wait(10)
        assert slurm_state(old) == "RUNNING"
        run_id = rows(db, "SELECT id FROM runs")[0]["id"]
        second = subprocess.Popen([*RESENV, "run", "--resume", run_id, "--display", "none"], env=cli_env, cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: slurm_state(old) == "CANCELLED", 60)  # the leftover is cancelled on resume
            new = wait_for(lambda: running_agent({old}), 90)[0]
            second.send_signal(signal.SIGINT)  # Ctrl-C: the engine stops and takes its jobs with it
            out, _ = second.communicate(timeout=90)
            assert second.returncode == 130, out[-2000:]
            wait_for(lambda: slurm_state(new) == "CANCELLED", 60)
        finally:
            if second.poll() is None:
                second.kill()
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.timeout(300)
def test_a_controller_down_at_the_start_holds_the_run_until_it_answers(cluster, tmp_path, cli_env):
    bench = gpu_bench(tmp_path, cluster)
    cluster.stop_process("slurmctld")
    proc = None
    try:
        proc = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none"], env=cli_env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        db = Path(cli_env["RESENV_DB"])
        wait_for(lambda: [r for r in rows(db, "SELECT state FROM hosts WHERE name = 'cluster'") if r["state"] == "down"], 60)
        time.sleep(2)
        assert not slurm_events(db)  # nothing was submitted (nor any GPU tier planned without GPUs)
    finally:
        cluster.start_controller()
    out, _ = proc.communicate(timeout=200)
    assert proc.returncode == 0, out[-3000:]
    tiers = {row["tier"]: row["status"] for row in rows(db, "SELECT tier, status FROM tier_results")}
    # `gpus: auto` was read once it answered: the GPU tiers ran (exit 0), unprovable GPU use on Slurm
    assert tiers["C3"] == "error" and tiers["C4"] == "error", tiers
    assert all(json.loads(r["evidence_json"])["exit_code"] == 0 for r in rows(
        db, "SELECT evidence_json FROM tier_results WHERE tier IN ('C3', 'C4')"))


@pytest.mark.timeout(300)
def test_pause_and_resume_controls_suspend_and_resume_the_slurm_job(cluster, tmp_path, cli_env):
    agent = "a:\n  kind: command\n  command: \"echo working; sleep 300\"\n"
    bench = gpu_bench(tmp_path, cluster, agent=agent)
    proc = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none"], env=cli_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = Path(cli_env["RESENV_DB"])

    def state_of(job_id: str) -> str:
        text = cluster.run("scontrol", "show", "job", "-o", job_id, check=False).stdout
        return text.split("JobState=")[1].split()[0] if "JobState=" in text else ""

    try:
        job_id = wait_for(lambda: [e["job_id"] for e in slurm_events(db) if e["state"] == "RUNNING"
                                   and e["log"] == "agent"], 90)[0]
        paused = resenv("control", "pause", "latest", "gpu-repo/a", "--wait", "60", env=cli_env, cwd=tmp_path)
        # acknowledged once the controller confirmed it, saying what was done
        assert paused.returncode == 0 and f"slurm job {job_id} suspended (SUSPENDED)" in paused.stdout, paused.stdout
        assert state_of(job_id) == "SUSPENDED"
        wait_for(lambda: any(e["state"] == "SUSPENDED" for e in slurm_events(db)), 30)  # the store saw it too
        assert resenv("control", "resume", "latest", "gpu-repo/a", env=cli_env, cwd=tmp_path).returncode == 0
        wait_for(lambda: state_of(job_id) == "RUNNING", 30)
        assert resenv("control", "cancel", "latest", env=cli_env, cwd=tmp_path).returncode == 0
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rows(db, "SELECT state FROM jobs")[0]["state"] == "cancelled"


@pytest.mark.timeout(400)
def test_agent_time_leaves_out_the_queue_and_the_queue_time_is_reported_apart(cluster, tmp_path, cli_env):
    """The same agent measured on an idle cluster and behind jobs that hold every node: its agent time
    is the same (the queue, holds and pauses are not its work), and the wait is reported as queue time."""
    agent = "a:\n  kind: command\n  command: \"echo working; sleep 3\"\n"

    def run_once(root: Path, blocked: bool) -> tuple[dict, dict]:
        root.mkdir()
        bench = gpu_bench(root, cluster, agent=agent)
        blockers = [cluster.run("sbatch", "--parsable", "--exclusive", "-N1", "-o", "/dev/null", "--wrap",
                                "sleep 300").stdout.strip() for _ in range(2)] if blocked else []
        db = root / "store.db"
        env = {**cli_env, "RESENV_DB": str(db)}
        proc = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "none", "--display", "none"], env=env,
                                cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            if blocked:
                wait_for(lambda: [e for e in slurm_events(db) if e["log"] == "agent" and e["state"] == "PENDING"], 90)
                time.sleep(8)  # the agent's job waits in the queue
                cluster.run("scancel", *blockers)
            out, _ = proc.communicate(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
            if blockers:
                cluster.run("scancel", *blockers, check=False)
        assert proc.returncode == 0, out[-3000:]
        [job] = json.loads(resenv("show", "latest", "--json", env=env, cwd=root).stdout)["jobs"]
        report = json.loads(resenv("report", "latest", "--format", "json", env=env, cwd=root).stdout)
        return job, report["agents"]["a"]

    idle_job, idle_agent = run_once(tmp_path / "idle", blocked=False)
    busy_job, busy_agent = run_once(tmp_path / "busy", blocked=True)
    assert 3.0 <= idle_job["agent_seconds"] < 8.0, idle_job
    assert abs(busy_job["agent_seconds"] - idle_job["agent_seconds"]) < 2.5, (idle_job, busy_job)
    assert busy_job["queue_seconds"] >= 7.0, busy_job  # the 8 s behind the blockers, seen by the poller
    assert busy_agent["queue_seconds"] >= 7.0 and abs(busy_agent["agent_seconds"] - busy_job["agent_seconds"]) < 0.01
    assert (idle_job["queue_seconds"] or 0.0) < 3.0
