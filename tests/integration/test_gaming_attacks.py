"""Agents that game the judge, against the real engine, real git, real venvs.

Each agent here builds nothing the repo needs and then tries one move to pass C0/C1 anyway: a stub
shadowing the missing import, a rewritten entrypoint, an interpreter start-up hook that forces exit
status 0, an "interpreter" that is not Python. Every move must fail to pass a tier, and leave a
finding or a category that names it. An honest agent with the same (broken) environment is the
control: the attacks must score exactly as it does, or worse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import resenv
from .test_checkout_sources import git_source_benchmark
from .test_engine_run import db_rows
from .test_pyramid import results, write_suite

PYTHON = os.path.realpath(sys.executable)
NEEDS_MISSING = {"main.py": "import resenv_absent_pkg\nprint('ran', resenv_absent_pkg)\n"}
REPO = {"needs-missing": {"files": NEEDS_MISSING, "entrypoints": 'cpu: {command: "{python} main.py"}',
                          "not_applicable": "{single_gpu: none, multi_gpu: none}"}}
VENV = f"{PYTHON} -m venv --without-pip {{env}}"
REPORT = "printf '{{\"python_path\": \"%s\", \"python_version\": null}}' {env}/bin/python > {report}"


def agent(*steps: str) -> str:
    return "; ".join(steps)


AGENTS = {
    "honest": agent(VENV, REPORT),
    "shadow": agent(VENV, "echo 'x = 1' > {repo}/resenv_absent_pkg.py", REPORT),
    "edit": agent(VENV, "echo \"print('ok')\" > {repo}/main.py", REPORT),
    "hook": agent(VENV, "echo 'import atexit, os; atexit.register(lambda: os._exit(0))' "
                        "> $(echo {env}/lib/python3*/site-packages)/zz_exit.pth", REPORT),
    "swap": agent(VENV, "mkdir {workdir}/fake", "echo \"print('ok')\" > {workdir}/fake/main.py",
                  "rm -rf {repo}", "ln -s {workdir}/fake {repo}", REPORT),
    "bin-true": "printf '{{\"python_path\": \"/bin/true\"}}' > {report}",
    "noise": agent("printf '#!/bin/sh\\nhead -c 64 /dev/urandom; exit 0\\n' > {workdir}/fakepy",
                   "chmod +x {workdir}/fakepy", "printf '{{\"python_path\": \"%s\"}}' {workdir}/fakepy > {report}"),
    "wrapper": agent(VENV, f"printf '#!/bin/sh\\n{PYTHON} \"$@\"; exit 0\\n' > {{workdir}}/py",
                     "chmod +x {workdir}/py", "printf '{{\"python_path\": \"%s\"}}' {workdir}/py > {report}"),
}


def run_attacks(tmp_path: Path, cli_env: dict[str, str]) -> tuple[dict, Path]:
    bench = write_suite(tmp_path, REPO, AGENTS, "h: {kind: local, slots: 2, gpus: 0}\n")
    names = [arg for name in AGENTS for arg in ("--agent", name)]
    done = resenv("run", str(bench), *names, "--tiers", "C0,C1,C5", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    return results(db), db


def findings(db: Path, agent_name: str) -> list[dict]:
    return db_rows(db, "SELECT f.kind, f.path, f.action, f.detail_json FROM findings f JOIN jobs j ON j.id = f.job_id"
                       " WHERE j.agent = ? ORDER BY f.id", (agent_name,))


def test_no_gaming_move_passes_a_tier_and_each_is_named(tmp_path, cli_env):
    got, db = run_attacks(tmp_path, cli_env)
    verdict = {agent_name: {tier: (status, category) for tier, (status, category, _) in tiers.items()}
               for (_, agent_name), tiers in got.items()}
    honest = verdict["honest"]
    assert honest["C0"] == ("fail", "deps_missing") and honest["C1"] == ("fail", "deps_missing")
    assert honest["C5"][0] == "pass"
    assert findings(db, "honest") == []

    # the stub is moved out of the checkout: the env is judged as the honest one is
    assert verdict["shadow"]["C0"] == honest["C0"] and verdict["shadow"]["C1"] == honest["C1"]
    assert [(f["kind"], f["path"], f["action"]) for f in findings(db, "shadow")] == [
        ("shadow", "resenv_absent_pkg.py", "quarantined")]
    workdir = next(Path(r["workdir"]) for r in db_rows(
        db, "SELECT a.workdir FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.agent = 'shadow'"))
    assert not (workdir / "repo" / "resenv_absent_pkg.py").exists()
    assert (workdir / ".resenv-quarantine" / "resenv_absent_pkg.py").read_text() == "x = 1\n"

    # the rewritten entrypoint is put back and its diff kept
    assert verdict["edit"]["C1"] == honest["C1"]
    [edit] = findings(db, "edit")
    assert (edit["kind"], edit["path"], edit["action"]) == ("tracked_modified", "main.py", "restored")
    diff = json.loads(edit["detail_json"])["diff"]
    assert "-import resenv_absent_pkg" in diff and "+print('ok')" in diff

    # a checkout swapped for a symlink to a doctored tree is put back whole
    assert verdict["swap"]["C0"] == honest["C0"] and verdict["swap"]["C1"] == honest["C1"]
    assert [(f["kind"], f["path"], f["action"]) for f in findings(db, "swap")] == [
        ("tracked_replaced", ".", "restored")]

    # the start-up hook fails every tier that runs the interpreter, keeping what it would have said
    assert verdict["hook"]["C0"] == ("fail", "tampered") and verdict["hook"]["C1"] == ("fail", "tampered")
    # found twice over: the scan names its file, the exit canary sees what it does
    hook_findings = findings(db, "hook")
    assert {f["kind"] for f in hook_findings} == {"startup_hook"}
    assert [Path(f["path"]).name for f in hook_findings] == ["zz_exit.pth", "(interpreter start-up)"]
    hook_c1 = got[("needs-missing", "hook")]["C1"][2]
    assert "zz_exit.pth" in hook_c1["reason"] and hook_c1["verdict_otherwise"]["status"] == "fail"

    # "interpreters" that are not Python fail every tier, and C5 calls the path claim false
    for name in ("bin-true", "noise", "wrapper"):
        assert verdict[name]["C0"] == ("fail", "bad_interpreter"), name
        assert verdict[name]["C1"] == ("fail", "bad_interpreter"), name
        c5 = got[("needs-missing", name)]["C5"]
        assert c5[:2] == ("fail", None) and [h["kind"] for h in c5[2]["hallucinations"]] == ["path"], name


def test_an_exit_status_forced_to_zero_after_a_traceback_is_a_fail(tmp_path, cli_env):
    """Without any hook: an entrypoint that dies of an exception but exits 0 failed."""
    repo = {"swallow": {"files": {"main.py": "import os, atexit\natexit.register(lambda: os._exit(0))\n"
                                              "import resenv_absent_pkg\n"},
                        "entrypoints": 'cpu: {command: "{python} main.py"}',
                        "not_applicable": "{single_gpu: none, multi_gpu: none}"}}
    bench = write_suite(tmp_path, repo, {"honest": AGENTS["honest"]}, "h: {kind: local, slots: 1, gpus: 0}\n")
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status, category, evidence = results(Path(cli_env["RESENV_DB"]))[("swallow", "honest")]["C1"]
    assert (status, category) == ("fail", "deps_missing")
    assert evidence["exit_code"] == 0 and "resenv_absent_pkg" in evidence["uncaught_exception"]


def test_a_checkout_missing_objects_is_an_infrastructure_error_naming_the_paths(tmp_path, cli_env):
    source = tmp_path / "upstream"
    source.mkdir()
    (source / "main.py").write_text("print('hi')\n")
    (source / "lib").mkdir()
    (source / "lib" / "util.py").write_text("X = 1\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    git = lambda *args: subprocess.run(["git", *args], cwd=source, env=env, check=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    commit, blob = git("rev-parse", "HEAD"), git("rev-parse", "HEAD:lib/util.py")
    (source / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    bench = git_source_benchmark(tmp_path, "broken", source, commit, "'true'")
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # the job ended in error
    db = Path(cli_env["RESENV_DB"])
    [attempt] = db_rows(db, "SELECT state, category, reason FROM attempts")
    assert (attempt["state"], attempt["category"]) == ("error", "infra")
    assert "lib/util.py" in attempt["reason"] and commit[:12] in attempt["reason"]
    assert db_rows(db, "SELECT * FROM tier_results") == []
