"""Values the agent's interpreter (or the host) answers with are typed before use: valid JSON of the
wrong type (`42`, `[]`, an object whose fields are numbers) fails the tier that reads it, with the
reason, and the job is scored on its first attempt. It never raises in the engine, which would
make the job `error`/`infra` (outside every denominator) and run it again, three times over.

The interpreter is a real venv whose `.pth` start-up hook makes `json.dumps` answer a chosen value
in chosen probe scripts. Real engine processes, a real loopback sshd for the remote case."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from ..conftest import RESENV, cli_environ, write_benchmark
from ..conftest import rows as db_rows
from ..sshd_rig import make_sshd, sshd_available

# Builds a venv and plants the hook; argv: ENV REPORT TARGET VALUE (TARGET: the end of the probe
# script's name whose JSON output is replaced; VALUE: the text it prints instead).
AGENT = textwrap.dedent('''\
    import json, subprocess, sys
    env, report, target, value = sys.argv[1:5]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True)
    site = subprocess.run([env + "/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    hook = ("import json, sys; _dumps = json.dumps; json.dumps = lambda *a, **k: %r "
            "if (sys.argv[0] if sys.argv else '').endswith(%r) else _dumps(*a, **k)" % (value, target))
    with open(site + "/zz_hostile.pth", "w") as handle:
        handle.write(hook + "\\n")
    with open(report, "w") as handle:
        handle.write(json.dumps({"python_path": env + "/bin/python"}))
    print("hook planted for", target)
''')


def agent_yaml(tmp_path: Path, target: str, value: str) -> str:
    (tmp_path / "agent.py").write_text(AGENT)
    def literal(text: str) -> str:  # the command is a template: braces are doubled
        return text.replace("{", "{{").replace("}", "}}")

    command = ["python3", str(tmp_path / "agent.py"), "{env}", "{report}", literal(target), literal(value)]
    return f"a:\n  kind: command\n  command: {json.dumps(command)}\n"


MAIN = "print('ok')\n"


def scored_once(db: Path) -> dict[str, tuple[str, str | None, dict]]:
    """The job ran once, finished, and every tier has a verdict that is not an engine error."""
    jobs = db_rows(db, "SELECT state, attempts, reason FROM jobs")
    assert [(j["state"], j["attempts"]) for j in jobs] == [("done", 1)], jobs
    [attempt] = db_rows(db, "SELECT state, category, reason FROM attempts")
    assert attempt["state"] == "done", attempt
    tiers = {row["tier"]: (row["status"], row["category"], json.loads(row["evidence_json"]))
             for row in db_rows(db, "SELECT tier, status, category, evidence_json FROM tier_results")}
    errors = {tier: (status, category, evidence.get("reason")) for tier, (status, category, evidence) in tiers.items()
              if status == "error"}
    assert not errors, errors
    return tiers


@pytest.mark.parametrize(("target", "value"), [
    ("interpreter.py", "42"),
    ("frameworks.py", "42"),
    ("frameworks.py", "[]"),
    ("frameworks.py", '{"frameworks": {"torch": 1, "jax": "x", "tensorflow": null}}'),
    (".py", '{"version": 3, "prefix": 1, "nonce": null}'),
])
def test_wrong_types_from_the_interpreter_fail_its_tiers_locally(tmp_path, target, value):
    bench = write_benchmark(tmp_path, {"one": {"main.py": MAIN}}, agent_yaml(tmp_path, target, value))
    done = subprocess.run([*RESENV, "run", str(bench), "--display", "none", "--tiers", "C1,C5"],
                          env=cli_environ(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    tiers = scored_once(tmp_path / "store.db")
    assert tiers["C1"][0] == "fail" and tiers["C5"][0] == "fail", tiers
    if target == "frameworks.py":  # the interpreter answered; what it said about frameworks did not parse
        assert "probe_errors" in json.dumps(tiers["C5"][2]) or tiers["C5"][1] == "runtime", tiers["C5"]


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
@pytest.mark.timeout(300)
def test_an_interpreter_answering_42_on_an_ssh_host_fails_its_tiers_once(tmp_path):
    """Every JSON the interpreter prints is `42`: the interpreter probe and the import map C0 judges
    on the engine's machine (probes/mirror.py)."""
    data = tmp_path / "data"
    data.mkdir()
    server = make_sshd(tmp_path / "sshd", hide=[data])
    try:
        bench = write_benchmark(tmp_path, {"one": {"main.py": MAIN}}, agent_yaml(tmp_path, ".py", "42"),
                                hosts=server.host_yaml("remote", gpus=0),
                                defaults="  retries: {infra: 2, backoff_s: 0.1}\n")
        text = bench.read_text().replace("  retries: {infra: 0, backoff_s: 0.1}\n", "", 1)
        bench.write_text(text)
        done = subprocess.run([*RESENV, "run", str(bench), "--host", "remote", "--display", "none",
                               "--tiers", "C0,C1,C5"], env=cli_environ(tmp_path), cwd=tmp_path, capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        tiers = scored_once(tmp_path / "store.db")
    finally:
        server.stop()
    assert {tier: status for tier, (status, _, _) in tiers.items()} == {"C0": "fail", "C1": "fail", "C5": "fail"}
    c0 = tiers["C0"][2]
    assert "import map" in c0["log_tail"] and "not a JSON object" in c0["log_tail"], c0["log_tail"]
