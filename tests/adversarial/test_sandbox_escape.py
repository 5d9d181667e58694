"""Agents that try to leave the process sandbox, against the real engine, bubblewrap and git.

Each attack runs twice where that proves something: in the default ``sandbox: process`` (the attack
must fail) and in ``sandbox: unsafe-process`` (the documented old mode, where the same script does
reach what it aims at), so a test whose attack could never have worked fails instead of passing.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import RESENV, resenv
from ..integration.test_pyramid import results, write_suite

pytestmark = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode,
                                reason="bubblewrap is installed by .ci/run")

NOT_APPLICABLE = "{single_gpu: none, multi_gpu: none}"
PLAIN = {"files": {"main.py": "print('ran')\n"}, "entrypoints": 'cpu: {command: "{python} main.py"}',
         "not_applicable": NOT_APPLICABLE}


def host(mode: str, slots: int = 2) -> str:
    return f"h: {{kind: local, slots: {slots}, gpus: 0, sandbox: {mode}}}\n"


def every_byte(root: Path, db: Path) -> bytes:
    """Everything the run left on disk: the store (its WAL too) and every file of the data dir."""
    out = [p.read_bytes() for p in db.parent.glob(db.name + "*") if p.is_file()]
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                out.append(path.read_bytes())
            except OSError:
                pass
    return b"\n".join(out)


def wait_for(condition, what: str, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def job_state(db: Path, agent: str) -> str | None:
    if not db.exists():
        return None
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT state FROM jobs WHERE agent = ?", (agent,)).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return row[0] if row else None


@pytest.mark.parametrize("mode", ["process", "unsafe-process"])
def test_an_agent_reads_no_environment_but_its_own(tmp_path, cli_env, mode):
    """The engine's own variables (``/proc/$PPID/environ``, bubblewrap's ``/proc/1/environ``) and a
    concurrently running agent's declared API key (``/proc/<pid>/environ``) stay out of reach; what
    the attacker prints is stored, so a leak would be on disk."""
    engine_token = "ENGINE-ONLY-" + secrets.token_hex(8)
    victim_key = "VICTIM-KEY-" + secrets.token_hex(8)
    cli_env = {**cli_env, "RESENV_TEST_ENGINE_ONLY": engine_token, "VICTIM_API_KEY": victim_key}
    victim = tmp_path / "victim.sh"
    victim.write_text(textwrap.dedent("""\
        WD=$1
        i=0
        while [ ! -e "$WD/stop" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
    """))
    attacker = tmp_path / "attacker.sh"
    attacker.write_text(textwrap.dedent("""\
        echo "scan of $(ls -d /proc/[0-9]* | wc -l) processes"
        for f in /proc/[0-9]*/environ /proc/$PPID/environ /proc/1/environ; do
          tr '\\0' '\\n' < "$f" 2>/dev/null
        done
        ps -eo pid,args 2>/dev/null
        env
    """))
    agents = {"victim": f"sh {victim} {{workdir}}", "attacker": f"sh {attacker}"}
    bench = write_suite(tmp_path, {"r": PLAIN}, agents, host(mode))
    text = bench.read_text().replace("  victim:\n    kind: command\n",
                                      "  victim:\n    kind: command\n    env_from: [VICTIM_API_KEY]\n")
    bench.write_text(text)
    db = Path(cli_env["RESENV_DB"])
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--agent", "victim", "--agent", "attacker",
                               "--tiers", "none", "--display", "none"], env=cli_env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The victim runs until the attacker's job has finished, so the scan saw it running.
        wait_for(lambda: job_state(db, "victim") == "running", "the victim to run")
        wait_for(lambda: job_state(db, "attacker") in ("done", "error"), "the attacker to finish")
        for stop in (tmp_path / "data").glob("*/jobs/r--victim/attempt-*/work"):
            (stop / "stop").write_text("")
        out, err = engine.communicate(timeout=300)
    finally:
        engine.kill()
    assert engine.returncode == 0, err
    stored = every_byte(tmp_path / "data", db)
    assert b"scan of" in stored  # the attacker ran and its output was stored
    leaked = engine_token.encode() in stored or victim_key.encode() in stored
    if mode == "process":
        assert not leaked, "an agent read the engine's or another agent's environment"
    else:
        assert leaked, "control: without isolation the same script reads them"


@pytest.mark.parametrize("mode", ["process", "unsafe-process"])
def test_an_agent_cannot_find_the_store_the_data_dir_or_the_pristine_copy(tmp_path, cli_env, mode):
    """Walking up from the work dir, or going straight to the paths (the attacker is told them), shows
    neither the SQLite store, nor another job, nor the pristine copy (the folders on the way to the
    work dir are empty stand-ins); nothing outside the work dir can be written."""
    db = Path(cli_env["RESENV_DB"])
    data = tmp_path / "data"
    probe = tmp_path / "probe.sh"
    probe.write_text(textwrap.dedent("""\
        DB=${1#db=} DATA=${2#data=} WD=$3 REPORT=$4
        seen() { if [ -e "$1" ]; then echo "SEEN $2"; fi; }
        seen "$DB" store
        ls -A "$DATA"/*/ 2>/dev/null | grep -qv '^jobs$' && echo "SEEN rundir"
        ls "$DATA"/*/pristine 2>/dev/null | grep -q . && echo "SEEN pristine"
        ls "$DATA"/*/jobs 2>/dev/null | grep -v "$(basename "$(dirname "$(dirname "$WD")")")" | grep -q . && echo "SEEN otherjob"
        d=$WD; while [ "$d" != / ]; do d=$(dirname "$d"); ls -a "$d" 2>/dev/null | grep -q 'store.db' && echo "SEEN walk"; done
        touch /usr/resenv-escape 2>/dev/null && echo "SEEN wrote-usr"
        touch "$DATA/resenv-escape" 2>/dev/null && echo "SEEN wrote-data"
        echo "uid=$(id -u)"
        echo probed > "$REPORT.txt"
    """))
    agents = {"probe": f"sh {probe} db={db} data={data} {{workdir}} {{report}}", "other": "true"}
    bench = write_suite(tmp_path, {"r": PLAIN}, agents, host(mode))
    done = resenv("run", str(bench), "--agent", "probe", "--agent", "other", "--tiers", "none",
                  "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (log,) = data.glob("*/jobs/r--probe/attempt-1/logs/agent.stdout")
    out = log.read_text()
    assert "probed" in next(data.glob("*/jobs/r--probe/attempt-1/work/report.json.txt")).read_text()
    if mode == "process":
        assert "SEEN" not in out, out
        assert "uid=0" not in out, out
        assert not (data / "resenv-escape").exists()
    else:
        assert "SEEN store" in out and "SEEN pristine" in out, "control: without isolation they are in reach"


def test_a_doctored_pristine_copy_is_never_judged_on(tmp_path, cli_env):
    """Without isolation an agent can reach the run's pristine copy. It commits the missing module
    into it and points every ref and the marker file at that commit; the next job (an honest agent
    whose environment lacks the module) and a tier re-run are still judged on the pinned commit."""
    target = {"files": {"main.py": "import resenv_absent_pkg\nprint('ran')\n"},
              "entrypoints": 'cpu: {command: "{python} main.py"}', "not_applicable": NOT_APPLICABLE}
    python = os.path.realpath(sys.executable)
    doctor = tmp_path / "doctor.sh"
    doctor.write_text(textwrap.dedent("""\
        set -e
        WD=$1
        P=$(cd "$WD/../../../../pristine" && pwd)/r.git
        chmod -R u+w "$P"
        T=$(mktemp -d)
        git clone -q "$P" "$T/c"
        cd "$T/c"
        echo 'x = 1' > resenv_absent_pkg.py
        git add -A && git -c user.name=a -c user.email=a@a commit -qm doctored
        C=$(git rev-parse HEAD)
        git push -q "$P" HEAD:refs/heads/doctored
        for ref in $(git -C "$P" for-each-ref --format='%(refname)'); do git -C "$P" update-ref "$ref" "$C"; done
        echo "$C" > "$P/resenv-complete"; echo "$C" > "$P/resenv-commit"
        echo doctored-to "$C"
    """))
    honest = (f"{python} -m venv --without-pip {{env}} && printf '{{{{\"python_path\": \"%s\"}}}}' "
              "{env}/bin/python > {report}")
    agents = {"doctor": f"sh {doctor} {{workdir}}", "honest": honest}
    bench = write_suite(tmp_path, {"r": target}, agents, host("unsafe-process", slots=1))
    done = resenv("run", str(bench), "--agent", "doctor", "--agent", "honest", "--tiers", "C0,C1",
                  "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (log,) = (tmp_path / "data").glob("*/jobs/r--doctor/attempt-1/logs/agent.stdout")
    assert "doctored-to" in log.read_text(), "control: the attacker reached the pristine copy"
    db = Path(cli_env["RESENV_DB"])
    got = results(db)
    assert got[("r", "honest")]["C1"][:2] == ("fail", "deps_missing")
    assert got[("r", "honest")]["C0"][0] == "fail"
    (checkout,) = (tmp_path / "data").glob("*/jobs/r--honest/attempt-1/work/repo")
    assert not (checkout / "resenv_absent_pkg.py").exists()
