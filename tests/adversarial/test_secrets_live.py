"""An agent's API key never reaches a file, not even while the agent runs: the real engine (`resenv run`,
process sandbox) with a `command` agent that prints its key slowly, in pieces (one byte at a time, a
few bytes at a time across stdout and stderr, its JSON-escaped and URL-quoted spellings, and at the
very end without a newline), sleeping in between, while a poller reads every file under the data
dir and the store (and its WAL) the whole time. The dashboard's Raw log tab reads the raw files, so
the file poll covers it too."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.parse
import subprocess
from pathlib import Path

from ..conftest import RESENV, wait_for, write_benchmark
from ..conftest import rows as db_rows
from ..integration.test_agent_session import assert_secret_nowhere
from ..secret_watch import SecretWatch

KEY_NAME = "RESENV_TEST_API_KEY"
KEY = 'sk-live-poll-4f0c/9e2b+71d8="a3"-key'  # a slash, a plus, an equals sign and quotes: its spellings differ
SPELLINGS = [KEY, json.dumps(KEY)[1:-1], urllib.parse.quote(KEY, safe=""), urllib.parse.quote_plus(KEY, safe="")]
MARKER = f"[REDACTED:{KEY_NAME}]"

AGENT = textwrap.dedent('''\
    import json, os, sys, time, urllib.parse
    key = os.environ["RESENV_TEST_API_KEY"]

    def slowly(stream, data, step, pause):
        for i in range(0, len(data), step):
            stream.write(data[i:i + step])
            stream.flush()
            time.sleep(pause)

    print("starting", flush=True)
    slowly(sys.stdout, "one byte at a time: " + key + "\\n", 1, 0.02)
    slowly(sys.stderr, "three at a time on stderr: " + key + "\\n", 3, 0.05)
    slowly(sys.stdout, "json: " + json.dumps({"k": key}) + " url: " + urllib.parse.quote(key, safe="") + "\\n", 5, 0.05)
    print("printed", flush=True)
    time.sleep(3)  # a poller looks at every file now
    with open("report.json", "w") as report:
        json.dump({"python_path": sys.executable, "notes": "printed only"}, report)
    slowly(sys.stdout, "last, without a newline: " + key, 4, 0.05)
    time.sleep(1)
''')


def test_a_key_printed_in_pieces_is_never_on_disk_while_the_run_is_live(tmp_path, cli_env) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    agents = textwrap.dedent(f"""\
        a:
          kind: command
          command: ["python3", "{tmp_path / 'agent.py'}"]
          env_from: [{KEY_NAME}]
    """)
    bench = write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, agents)
    env = {**cli_env, KEY_NAME: KEY}
    db = Path(env["RESENV_DB"])
    data_dir = Path(env["RESENV_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    watch = SecretWatch(SPELLINGS, [data_dir], [db, Path(f"{db}-wal")])
    with watch:
        engine = subprocess.Popen([*RESENV, "run", str(bench), "--display", "none", "--tiers", "C1"],
                                  env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # while the agent sleeps after printing: the raw file already shows the marker, not held back
            raw = wait_for(lambda: next(iter(data_dir.rglob("logs/agent.stdout")), None), timeout=120)
            wait_for(lambda: b"printed\n" in raw.read_bytes(), timeout=120, interval=0.05)
            live = raw.read_bytes()
            assert live.count(MARKER.encode()) == 3, live
            assert MARKER.encode() in raw.with_suffix(".stderr").read_bytes()
            scans_while_live = watch.scans
            out, err = engine.communicate(timeout=240)
        finally:
            if engine.poll() is None:
                engine.kill()
                engine.communicate()
        assert engine.returncode == 0, out.decode() + err.decode()
        time.sleep(0.1)
    assert not watch.hits, f"the key was on disk in: {sorted(watch.hits)}"
    assert watch.scans > scans_while_live > 10  # it really looked, during and after the run
    text = raw.read_text()
    assert text.endswith(f"last, without a newline: {MARKER}"), text[-200:]
    assert text.count(MARKER) == 4
    lines = [row["text"] for row in db_rows(db, "SELECT json_extract(data, '$.text') AS text FROM events"
                                                 " WHERE kind = 'transcript' ORDER BY id")]
    assert f"one byte at a time: {MARKER}" in lines and f"last, without a newline: {MARKER}" in lines
    assert_secret_nowhere(KEY, data_dir, db)


async def test_a_folder_kept_in_memory_is_never_on_disk_and_the_engine_reads_it_live(tmp_path) -> None:
    """`ProcessSandbox.keep_in_memory`: what the command writes there is on a tmpfs of its namespace,
    never in the work dir on disk; the engine reads it while the command runs through `live_path`
    (``/proc/<pid>/root``); the next command (and the disk) find the folder empty."""
    import asyncio
    import shutil

    import pytest

    from resenv.engine.sandbox.isolation import Isolation
    from resenv.engine.sandbox.process import ProcessSandbox

    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    sandbox = ProcessSandbox(tmp_path / "work", isolation=Isolation())
    state = sandbox.home / ".cli"
    assert sandbox.keep_in_memory([state]) == [state]
    assert sandbox.live_path(state / "log") == state / "log"  # nothing runs: the path itself
    value = "sk-in-memory-only-0123456789"
    script = f'mkdir -p "$HOME/.cli/sessions" && echo {value} > "$HOME/.cli/sessions/log" && sleep 3; ls -A "$HOME/.cli"'
    run = asyncio.create_task(sandbox.exec(["sh", "-c", script], log_prefix=tmp_path / "logs" / "cli", timeout=60))
    live = state / "sessions" / "log"

    def seen() -> bool:
        path = sandbox.live_path(live)
        return path != live and path.is_file() and path.read_text().strip() == value

    for _ in range(200):
        if seen():
            break
        await asyncio.sleep(0.02)
    assert seen(), "the engine could not read the folder through the sandbox"
    assert not any(state.rglob("*")), "the folder kept in memory reached the disk"
    result = await run
    assert result.returncode == 0, (tmp_path / "logs" / "cli.stderr").read_text()
    assert (tmp_path / "logs" / "cli.stdout").read_text() == "sessions\n"
    assert state.is_dir() and not any(state.iterdir())
    sandbox.keep_in_memory([])
    again = await sandbox.exec(["sh", "-c", 'ls -A "$HOME/.cli"'], log_prefix=tmp_path / "logs" / "again", timeout=60)
    assert again.returncode == 0 and (tmp_path / "logs" / "again.stdout").read_text() == ""
    with pytest.raises(Exception):
        sandbox.keep_in_memory([tmp_path / "elsewhere"])
    await sandbox.close()
