"""Slurm hosts without a cluster: the spec, exit decoding, state mapping, the batch script,
the client's parsers. The real cluster is in tests/integration/test_slurm*.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from resenv.engine.hosts.build import build_hosts
from resenv.engine.hosts.pool import HostPool
from resenv.engine.hosts.slurm.check import slurm_minutes
from resenv.engine.hosts.slurm.client import SEP, gres_count, parse_key_values, parse_squeue, parse_squeue_json
from resenv.engine.hosts.slurm.facts import expand_nodelist
from resenv.engine.hosts.slurm.script import JobFiles, Resources, batch_script, command_file, sbatch_options, time_limit_minutes
from resenv.engine.hosts.slurm.states import decode_exit, outcome_of, phase_of
from resenv.engine.spec import SlurmHost, SpecError

from .test_spec_hosts import load


def test_slurm_host_spec_defaults_and_login():
    host = load("  a: {kind: slurm, partition: gpu, account: lab, login: {address: login.example, user: me}}\n").host("a")
    assert isinstance(host, SlurmHost)
    assert (host.gpus, host.agent_gpus, host.cpus, host.slots, host.gres, host.poll_s) == ("auto", 0, 4, 16, "gpu", 1.0)
    assert host.login.address == "login.example" and host.login.strict_host_keys is True


def test_slurm_host_spec_errors_name_the_field():
    with pytest.raises(SpecError) as error:
        load("  a: {kind: slurm, gpus: [0, 1], sbatch_options: ['--time=5', '-x', '--constraint=h100'], paritition: p}\n")
    text = "\n".join(f"{issue.path}: {issue.message}" for issue in error.value.issues)
    assert "hosts.a.gpus: " in text and "GPU count" in text
    assert "hosts.a.sbatch_options[0]: --time is set by resenv" in text
    assert "hosts.a.sbatch_options[1]: expected one long option" in text
    assert "sbatch_options[2]" not in text
    assert "did you mean 'partition'" in text


def test_a_slurm_host_never_leases_its_gpus():
    bench = load("  a: {kind: slurm, gpus: 2}\n")
    hosts = build_hosts({"a": bench.host("a")})
    pool = HostPool(hosts)
    assert pool.lease(0) is None  # not read yet: nothing is placed on a cluster that has not answered
    hosts[0].facts_ready = True
    leases = [pool.lease(2) for _ in range(5)]
    assert all(lease is not None and lease.gpus == (0, 1) for lease in leases)  # Slurm decides, not resenv
    assert pool.lease(2) is not None


@pytest.mark.parametrize("value, text", [
    (0, "exit 0"), (256, "exit 1"), (1792, "exit 7"), (9, "signal SIGKILL"), (15, "signal SIGTERM"), (137 << 8, "exit 137"),
    ("0:0", "exit 0"), ("3:0", "exit 3"), ("0:9", "signal SIGKILL"), ("0:15", "signal SIGTERM"), ("256", "exit 1"),
    ({"status": ["EXITED"], "return_code": {"set": True, "infinite": False, "number": 4}, "signal": {"id": {"set": False}}},
     "exit 4"),
    ({"status": ["SIGNALED"], "return_code": {"set": False}, "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}},
     "signal SIGKILL"),
])
def test_exit_codes_decode_raw_wait_status_pairs_and_objects(value, text):
    assert str(decode_exit(value)) == text


def test_states_map_to_resenv_outcomes():
    assert phase_of("PENDING") == "pending" and phase_of("CANCELLED by 0") == "finished" and phase_of(["RUNNING"]) == "running"
    assert phase_of("SUSPENDED") == "suspended"
    assert outcome_of("TIMEOUT").kind == "timeout" and outcome_of("DEADLINE").kind == "timeout"
    for state in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL"):
        assert outcome_of(state).kind == "infra"
    assert outcome_of("OUT_OF_MEMORY").kind == "oom"
    assert outcome_of("CANCELLED", cancelled_by_us=True).kind == "cancelled"
    assert outcome_of("CANCELLED").kind == "infra"
    assert outcome_of("COMPLETED").kind == "result"


def test_parsers():
    line = SEP.join(["12", "PENDING", "Resources", "0", "", "resenv-r", "resenv:ab"]) + SEP
    jobs = parse_squeue(line + "\n" + SEP.join(["13", "FAILED", "NonZeroExitCode", "256", "n1", "x", "(null)"]) + SEP)
    assert jobs["12"].reason == "Resources" and jobs["12"].comment == "resenv:ab"
    assert str(jobs["13"].exit) == "exit 1" and jobs["13"].nodes == "n1"
    new = parse_squeue_json('{"jobs": [{"job_id": 5, "job_state": ["TIMEOUT"], "state_reason": "TimeLimit", '
                            '"exit_code": {"return_code": {"set": true, "number": 0}, "signal": {"id": {"set": true, "number": 15}}}}]}')
    assert new["5"].state == "TIMEOUT" and str(new["5"].exit) == "signal SIGTERM"
    values = parse_key_values("JobId=5 JobName=a b JobState=CANCELLED Reason=None ExitCode=0:15 Command=(null)")
    assert values["JobName"] == "a b" and values["ExitCode"] == "0:15"
    assert gres_count("gpu:2") == 2 and gres_count("gpu:a100:4(S:0-1)") == 4 and gres_count("gpu:a:2,gpu:b:2") == 4
    assert gres_count("(null)") == 0
    assert expand_nodelist("n[1-3,5],gpu07,g[08-09]") == ["n1", "n2", "n3", "n5", "gpu07", "g08", "g09"]
    assert slurm_minutes("UNLIMITED") is None and slurm_minutes("1-00:00:00") == 1440 and slurm_minutes("30") == 30
    assert slurm_minutes("02:00:00") == 120


def test_sbatch_options_size_each_job_and_the_time_limit_backs_up_resenvs_own():
    files = JobFiles.for_prefix(Path("/d/logs/C3-7"))
    options = sbatch_options(files, Resources(gpus=1, cpus=8, memory_mib=4096, partition="gpu", account="lab",
                                              extra=("--constraint=h100",)),
                             name="resenv-r1", comment="resenv:x", timeout_s=900)
    assert "--gres=gpu:1" in options and "--cpus-per-task=8" in options and "--mem=4096M" in options
    assert "--export=NONE" in options and "--no-requeue" in options and "--constraint=h100" in options
    assert "--time=17" in options  # 900 s + 5 s grace + a minute, rounded up to minutes
    assert not any(o.startswith("--gres") for o in sbatch_options(files, Resources(), name="n", comment="c", timeout_s=None))
    assert time_limit_minutes(900, 5, 10) == 10 and time_limit_minutes(None, 5, None) is None


def test_batch_script_runs_the_command_under_its_own_timeout(tmp_path):
    """The script itself, run by sh without Slurm: output, exit file, watchdog, Slurm's GPU ids."""
    files = JobFiles.for_prefix(tmp_path / "logs" / "x")
    files.spool.mkdir(parents=True)
    (files[ "cmd.sh"]).write_text(command_file(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $FOO; echo e >&2; exit 5"],
                                               {"FOO": "bar", "CUDA_VISIBLE_DEVICES": "0"}, str(tmp_path), gpus=1))
    script = batch_script(files, timeout_s=30)
    subprocess.run(["sh", "-c", script], check=True, env={"CUDA_VISIBLE_DEVICES": "3", "SLURM_JOB_ID": "9"})
    assert files.stdout.read_text() == "3 bar\n" and files.stderr.read_text() == "e\n"
    assert files["exit"].read_text().split()[0] == "5"
    assert files["started"].read_text().split()[1] == "9" and files["started"].read_text().split()[3] == "3"
    (files["cmd.sh"]).write_text(command_file(["sleep", "30"], {}, str(tmp_path), gpus=0))
    (files["exit"]).unlink()
    subprocess.run(["sh", "-c", batch_script(files, timeout_s=1, grace_s=1)], check=True, timeout=20)
    assert files["exit"].read_text().split()[0] == "143" and files["timed_out"].exists()


def test_the_dashboard_shows_a_queued_command_with_its_slurm_reason():
    from resenv.engine.results.eventtext import format_event, queue_text
    from resenv.tui.widgets import queue_state_text

    pending = {"log": "C3-9", "job_id": "4711", "state": "PENDING", "reason": "Resources", "nodes": None, "gpus": 1}
    assert queue_text(pending) == "slurm PD Resources"
    assert queue_text(pending | {"state": "RUNNING", "reason": None, "nodes": "g07"}) is None
    assert queue_text(pending | {"state": "SUSPENDED"}) == "slurm S"
    # the jobs table's state column shows the reason (it has room for ~12 characters)
    assert [queue_state_text(q).plain for q in ("slurm PD Resources", "slurm PD", "slurm S")] == [
        "⧗ Resources", "⧗ in queue", "⧗ suspended"]
    assert format_event("slurm", pending | {"state": "RUNNING", "nodes": "g07", "reason": None}) == [
        "⧗ slurm job 4711 [C3-9] RUNNING on g07 · 1 GPU(s)"]


def test_the_job_completion_log_decodes_exit_codes_and_signals():
    """Real lines of slurmctld 22.05's jobcomp/filetxt log: the fallback where there is no accounting."""
    from resenv.engine.hosts.slurm.client import find_completion, parse_config

    text = (Path(__file__).parents[1] / "fixtures" / "slurm" / "jobcomp-filetxt.txt").read_text()
    exited, killed = find_completion(text, "1"), find_completion(text, "2")
    assert (exited.state, exited.exit.code, exited.exit.signal, exited.nodes) == ("FAILED", 3, None, "n1")
    assert (killed.state, killed.exit.code, killed.exit.signal) == ("FAILED", None, 9)
    assert find_completion(text, "12") is None  # no line of its own: the line of job 1 is not a match
    config = parse_config("JobCompLoc              = /var/log/slurm/jobcomp.txt\nJobCompType = jobcomp/filetxt\n"
                          "Configuration data as of 2026-11-29T15:07:42\n")
    assert config == {"JobCompLoc": "/var/log/slurm/jobcomp.txt", "JobCompType": "jobcomp/filetxt"}
