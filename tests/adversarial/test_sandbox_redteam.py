"""A red team's attacks on the default ``sandbox: process``, each of which succeeded when written (the
test failed) and is stopped now. Style of test_sandbox_escape.py: shell-script agents through the real
``resenv run``.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import RESENV, resenv
from ..integration.test_pyramid import write_suite
from .test_sandbox_escape import wait_for

pytestmark = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode,
                                reason="bubblewrap is installed by .ci/run")

NOT_APPLICABLE = "{single_gpu: none, multi_gpu: none}"
PLAIN = {"files": {"main.py": "print('ran')\n"}, "entrypoints": 'cpu: {command: "{python} main.py"}',
         "not_applicable": NOT_APPLICABLE}


def host(mode: str = "process", slots: int = 2, extra: str = "") -> str:
    return f"h: {{kind: local, slots: {slots}, gpus: 0, sandbox: {mode}{extra}}}\n"


def test_a_colon_in_python_path_binds_no_host_path_into_the_probes(tmp_path, cli_env):
    """The probes put the reported interpreter's folder first on PATH, and the sandbox binds every
    absolute path of every ``:``-separated environment value read-only. An interpreter at
    ``<work>/x:<host path>/python`` (a folder named ``x:`` in the work dir) therefore makes its
    folder ``<work>/x:<host path>``, and PATH names ``<host path>`` on its own: the SQLite store and
    the run's pristine copies were bound into every probe command, where the agent's interpreter
    ran and copied them into the work dir. Now only a configured command's declared environment names
    paths to show, and never PATH."""
    db = Path(cli_env["RESENV_DB"])
    attacker = tmp_path / "attacker.sh"
    attacker.write_text(textwrap.dedent("""\
        WD=$1 REPORT=$2 DB=$3
        RUN=$(dirname "$(dirname "$(dirname "$(dirname "$WD")")")")
        T="$DB:$RUN/pristine"
        D="$WD/x:$T"
        mkdir -p "$D"
        cat > "$D/python" <<EOS
        #!/bin/sh
        cp "$DB" "$WD/stolen-store.db" 2>/dev/null
        ls "$RUN/pristine" > "$WD/stolen-pristine.txt" 2>/dev/null
        echo '{}'
        EOS
        chmod +x "$D/python"
        printf '{"python_path": "%s"}' "$D/python" > "$REPORT"
    """))
    bench = write_suite(tmp_path, {"r": PLAIN}, {"attacker": f"sh {attacker} {{workdir}} {{report}} {db}"}, host())
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    (work,) = (tmp_path / "data").glob("*/jobs/r--attacker/attempt-1/work")
    stolen = work / "stolen-store.db"
    listing = work / "stolen-pristine.txt"
    assert not (stolen.exists() and stolen.read_bytes().startswith(b"SQLite format 3")), \
        "a probe command read the engine's SQLite store (bound through PATH)"
    assert not (listing.exists() and listing.read_text().strip()), \
        "a probe command listed the run's pristine copies: " + (listing.read_text() if listing.exists() else "")

def _db_rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()

def test_a_process_that_keeps_forking_is_frozen_by_pause(tmp_path, cli_env):
    """Pause SIGSTOPs the command's process group, then the processes it finds in the namespace: one
    scan of /proc, then one signal each. A process that leaves the group (``setsid``), then forks and
    lets its parent exit over and over, has moved to a new PID by the time its signal is sent (300
    idle processes make the scan long enough): no generation was stopped, and the chain kept working
    (here: appending to a file in its work dir) while the job was paused and its timeout clock stood.
    Now pause is one ``kill(-1)`` from inside the namespace, which no fork outruns."""
    tools = tmp_path / "tools"
    tools.mkdir()
    hopper = tools / "hopper.py"
    hopper.write_text(textwrap.dedent("""\
        import os, sys
        out, stop = sys.argv[1], sys.argv[2]
        for chain in range(4):  # four independent chains: a pause must catch every one of them
            if os.fork() == 0:
                break
        else:
            os._exit(0)
        os.setsid()  # out of the command's process group: killpg() cannot stop the chain at once
        n = 0
        while not os.path.exists(stop):
            if os.fork():
                os._exit(0)
            n += 1
            if n % 20 == 0:
                with open(out, "a") as handle:
                    handle.write("x\\n")
    """))
    agent = tmp_path / "agent.sh"
    agent.write_text(textwrap.dedent(f"""\
        WD=$1
        # idle processes make the pause's one scan of /proc long: the hoppers move on meanwhile
        i=0; while [ $i -lt 300 ]; do sleep 600 & i=$((i+1)); done
        /usr/bin/python3 {hopper} "$WD/beat" "$WD/stop" &
        while [ ! -e "$WD/stop" ]; do sleep 0.05; done
    """))
    bench = write_suite(tmp_path, {"r": PLAIN}, {"hop": f"sh {agent} {{workdir}}"},
                        host(extra=f", process: {{expose: [{tools}]}}"))
    db = Path(cli_env["RESENV_DB"])
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "none", "--display", "none"], env=cli_env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work = None
    try:
        def beating() -> bool:
            nonlocal work
            found = list((tmp_path / "data").glob("*/jobs/r--hop/attempt-1/work"))
            work = found[0] if found else None
            return work is not None and (work / "beat").exists() and (work / "beat").stat().st_size > 100
        wait_for(beating, "the hopper to run", limit=60)
        run_id = _db_rows(db, "SELECT id FROM runs")[0][0]
        out = resenv("control", "pause", run_id, "r/hop", env=cli_env, cwd=tmp_path, timeout=60)
        assert out.returncode == 0 and "applied" in out.stdout, out.stdout + out.stderr
        # A stopped process writes nothing: a line or two in flight at the pause is all it may add.
        before = (work / "beat").stat().st_size
        deadline = time.monotonic() + 5.0
        grew = 0
        while time.monotonic() < deadline:
            grew = (work / "beat").stat().st_size - before
            if grew > 200:
                break
            time.sleep(0.05)
        resenv("control", "resume", run_id, "r/hop", env=cli_env, cwd=tmp_path, timeout=60)
        (work / "stop").write_text("")
        engine.communicate(timeout=120)
    finally:
        if work is not None:
            (work / "stop").write_text("")
        engine.kill()
    assert grew <= 200, f"a paused job's processes wrote {grew} more bytes while it was paused"


def _blocked_on_a_fifo(pid: int) -> list[int]:
    """Threads of `pid` waiting in open() for the other end of a named pipe."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "wchan").read_text().strip() == "wait_for_partner":
                out.append(int(task.name))
        except OSError:
            pass
    return out


@pytest.mark.parametrize("fifo", ["env/bin/python", "env/pyvenv.cfg", "env/lib/python3.11/site-packages/a.pth"])
def test_a_fifo_in_the_environment_does_not_hang_the_engine(tmp_path, cli_env, fifo):
    """The engine opened files of the agent's environment itself, as root, without checking that they
    were regular files, and opening a named pipe nobody writes to never returns:

    * ``python_path`` a pipe: after the probes fail to execute it, ``_interpreter_file`` reads its
      first bytes with ``open()`` on the event loop's own thread: the whole run stops, every other
      job, every timeout and every control with it;
    * ``pyvenv.cfg`` or a ``.pth`` file a pipe: the start-up hook scan (``hookscan.scan``, in a worker
      thread) hangs; the probes phase waits for it until its timeout (an hour by default), and the
      thread never ends (the engine cannot exit).

    Now the isolated sandbox's files are read by commands inside it, which open only regular files;
    a Python whose own pyvenv.cfg is a pipe hangs at start-up, and its probes end at their timeouts."""
    attacker = tmp_path / "attacker.sh"
    attacker.write_text(textwrap.dedent(f"""\
        WD=$1 REPORT=$2
        mkdir -p "$WD/env/bin" "$WD/env/lib/python3.11/site-packages"
        [ {fifo} = env/bin/python ] || ln -s /usr/bin/python3 "$WD/env/bin/python"
        mkfifo "$WD/{fifo}"
        printf '{{"python_path": "%s"}}' "$WD/env/bin/python" > "$REPORT"
    """))
    bench = write_suite(tmp_path, {"r": PLAIN}, {"attacker": f"sh {attacker} {{workdir}} {{report}}"}, host())
    # A Python whose pyvenv.cfg is a pipe hangs at start-up itself: its probes end at their timeouts.
    bench.write_text(bench.read_text().replace("  retries: {infra: 0, backoff_s: 0.1}\n",
                                               "  retries: {infra: 0, backoff_s: 0.1}\n"
                                               "  tier_timeouts: {C1: 20, C2: 20}\n"))
    engine = subprocess.Popen([*RESENV, "run", str(bench), "--tiers", "C1", "--display", "none"], env=cli_env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    blocked: list[int] = []
    try:
        def settled() -> bool:
            nonlocal blocked
            blocked = _blocked_on_a_fifo(engine.pid) if engine.poll() is None else []
            return engine.poll() is not None or bool(blocked)
        wait_for(settled, "the run to end or to hang", limit=120)
        if blocked:
            # Free it: a writer completes the open (the engine then reads EOF and goes on).
            (pipe,) = (tmp_path / "data").glob(f"*/jobs/r--attacker/attempt-1/work/{fifo}")
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        else:
            engine.communicate(timeout=120)
    finally:
        engine.kill()
    assert not blocked, (f"the engine's thread(s) {blocked} (the event loop's is {engine.pid}) hung opening the "
                         "agent's named pipe")
