"""An agent's API key after the engine dies mid-agent: resume refuses without the key, and a resume
with it scrubs the crashed attempt's raw logs and work files before anything reads them. The agent's
environment holds what the benchmark declares and nothing else of the engine's.

Real engine processes (SIGKILL), real sandboxed agents, real SQLite; waits are on conditions."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import textwrap
from pathlib import Path

from ..conftest import RESENV, resenv, wait_for, write_benchmark
from ..conftest import rows as db_rows
from ..integration.test_agent_session import assert_secret_nowhere

KEY_NAME = "RESENV_TEST_API_KEY"
KEY = "sk-adv-resume-0b7e5d3c9a41f2e8"
MARKER = f"[REDACTED:{KEY_NAME}]"

# Says the key everywhere an agent might (stdout, stderr, its report, files in its HOME and work dir,
# a binary file), then, in the first attempt only, waits: the engine is killed meanwhile.
AGENT = textwrap.dedent('''\
    import json, os, pathlib, sys, time
    key = os.environ["RESENV_TEST_API_KEY"]
    work = pathlib.Path.cwd()
    print("the key is " + key, flush=True)
    print("stderr key " + key, file=sys.stderr, flush=True)
    (work / "report.json").write_text(json.dumps({"python_path": sys.executable, "notes": "used " + key}))
    (work / "home" / ".tool").mkdir(parents=True, exist_ok=True)
    (work / "home" / ".tool" / "credentials").write_text(key)
    (work / "transcripts").mkdir(exist_ok=True)
    (work / "transcripts" / "session.jsonl").write_text(json.dumps({"auth": key}) + "\\n")
    (work / "blob.bin").write_bytes(b"\\0\\1" * 100 + key.encode() + b"\\0" * 100)
    print("ready", flush=True)
    if str(work).endswith("attempt-1/work"):
        while True:
            time.sleep(0.05)
''')


def bench(tmp_path: Path) -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    agents = textwrap.dedent(f"""\
        a:
          kind: command
          command: ["python3", "{tmp_path / 'agent.py'}"]
          env_from: [{KEY_NAME}]
    """)
    return write_benchmark(tmp_path, {"one": {"main.py": "print('ok')\n"}}, agents)


def killed_mid_agent(tmp_path: Path, env: dict[str, str]) -> tuple[Path, str, int, Path]:
    """Start a run, wait until the agent is mid-run, SIGKILL the engine. Returns the store, the run,
    the agent's (still running) process group and the attempt's dir.

    Then the crash window itself: raw bytes reach the log file before their event reaches the store,
    so a line the agent printed just before the kill can be in the file only. One such line is
    appended, as the dead engine would have written it."""
    db = Path(env["RESENV_DB"])
    engine = subprocess.Popen([*RESENV, "run", str(bench(tmp_path)), "--display", "none", "--tiers", "C1,C5"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: db_rows(db, "SELECT id FROM events WHERE kind = 'transcript'"
                                     " AND json_extract(data, '$.text') = 'ready'"), timeout=120)
        pgid = wait_for(lambda: db_rows(db, "SELECT json_extract(data, '$.pgid') AS pgid FROM events"
                                            " WHERE kind = 'process' AND json_extract(data, '$.log') = 'agent'"),
                        timeout=30)[0]["pgid"]
    finally:
        engine.send_signal(signal.SIGKILL)
        engine.communicate(timeout=30)
    run_id = db_rows(db, "SELECT id FROM runs")[0]["id"]
    workdir = Path(db_rows(db, "SELECT workdir FROM attempts WHERE state = 'running'")[0]["workdir"])
    with open(workdir.parent / "logs" / "agent.stdout", "ab") as raw:
        raw.write(f"late line {KEY}\n".encode())
    return db, run_id, pgid, workdir.parent


def kill_group(pgid: int) -> None:
    """The first attempt's agent outlives a SIGKILLed engine: end it (it is this test's)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def store_dump(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(table, *row) for table in tables for row in conn.execute(f"SELECT * FROM {table}")]
    finally:
        conn.close()


def files_digest(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file() and not path.is_symlink()}


def assert_key_not_in_store(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for row in conn.execute(f"SELECT * FROM {table}"):
                assert not any(isinstance(v, str) and KEY in v for v in row), f"key in table {table}: {row}"
    finally:
        conn.close()


def test_resume_without_the_declared_key_is_refused_and_changes_nothing(tmp_path, cli_env):
    env = {**cli_env, KEY_NAME: KEY}
    db, run_id, pgid, attempt_dir = killed_mid_agent(tmp_path, env)
    try:
        before, files_before = store_dump(db), files_digest(attempt_dir)
        without = {k: v for k, v in env.items() if k != KEY_NAME}
        out = resenv("run", "--resume", run_id, "--display", "none", env=without, cwd=tmp_path, timeout=120)
        assert out.returncode != 0, out.stdout + out.stderr
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and KEY_NAME in lines[0] and "resume" in lines[0], out.stderr
        assert store_dump(db) == before, "a refused resume must not change the store"
        assert files_digest(attempt_dir) == files_before, "a refused resume must not touch the raw logs"
        assert_key_not_in_store(db)
        assert db_rows(db, "SELECT COUNT(*) AS n FROM attempts")[0]["n"] == 1
    finally:
        kill_group(pgid)


def test_resume_scrubs_the_crashed_attempts_logs_and_work_files_before_replaying(tmp_path, cli_env):
    env = {**cli_env, KEY_NAME: KEY}
    db, run_id, pgid, attempt_dir = killed_mid_agent(tmp_path, env)
    try:
        raw = attempt_dir / "logs" / "agent.stdout"
        assert KEY.encode() in raw.read_bytes() and KEY.encode() in (attempt_dir / "work" / "report.json").read_bytes()
        out = resenv("run", "--resume", run_id, "--display", "none", env=env, cwd=tmp_path, timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        kill_group(pgid)
    attempts = db_rows(db, "SELECT number, state, category FROM attempts ORDER BY number")
    assert [(a["number"], a["state"]) for a in attempts] == [(1, "error"), (2, "done")], attempts
    # the line that was only in the raw file reached the store, redacted
    late = db_rows(db, "SELECT json_extract(data, '$.text') AS text FROM events WHERE kind = 'transcript'"
                       " AND json_extract(data, '$.replayed') = 1")
    assert [row["text"] for row in late] == [f"late line {MARKER}"], late
    # raw logs keep their lines (the marker in place of the key), work files keep their size
    text = raw.read_text()
    assert f"the key is {MARKER}" in text and text.count("\n") == 3
    work = attempt_dir / "work"
    assert json.loads((work / "report.json").read_text())["python_path"]
    assert (work / "home" / ".tool" / "credentials").read_text() == "REDACTED" + "*" * (len(KEY) - 8)
    assert len((work / "blob.bin").read_bytes()) == 300 + len(KEY)
    assert_secret_nowhere(KEY, Path(env["RESENV_DATA_DIR"]), db)


ENV_DUMP = textwrap.dedent('''\
    import json, os, sys
    print(json.dumps({"names": sorted(os.environ), "canary": os.environ.get("RESENV_TEST_CANARY")}), flush=True)
    with open("report.json", "w") as report:
        json.dump({"python_path": sys.executable}, report)
''')
# What the engine's environment holds besides the declared key: none of it may reach the agent.
ENGINE_ONLY = {"RESENV_TEST_CANARY": "canary-7d1f0e2b93a4c6", "RESENV_TEST_UNDECLARED_KEY": "sk-undeclared-5a8e1c",
               "AWS_SECRET_ACCESS_KEY": "aws-undeclared-91c2f7d0", "PYTHONSTARTUP": "/nonexistent/canary.py"}
# What every sandboxed command gets (a clean PATH, a private HOME and TMPDIR, a locale, unbuffered
# Python) and what a shell or the sandbox may add about the process itself.
SANDBOX_NAMES = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONUNBUFFERED", "PWD", "SHLVL", "_"}


def test_the_agent_environment_holds_only_what_is_declared(tmp_path, cli_env):
    (tmp_path / "agent.py").write_text(ENV_DUMP)
    main = "import json, os\nprint('PROBE_ENV ' + json.dumps(sorted(os.environ)))\n"
    agents = textwrap.dedent(f"""\
        a:
          kind: command
          command: ["python3", "{tmp_path / 'agent.py'}"]
          env_from: [{KEY_NAME}]
          env: {{DECLARED_SETTING: "on"}}
    """)
    bench_path = write_benchmark(tmp_path, {"one": {"main.py": main}}, agents)
    env = {**cli_env, KEY_NAME: KEY, **ENGINE_ONLY}
    done = resenv("run", str(bench_path), "--display", "none", "--tiers", "C1", env=env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(env["RESENV_DB"])
    texts = [row["text"] for row in db_rows(db, "SELECT json_extract(data, '$.text') AS text FROM events"
                                                " WHERE kind IN ('transcript', 'output') ORDER BY id")]
    dumped = json.loads(next(text for text in texts if text and text.startswith('{"names"')))
    names = set(dumped["names"])
    declared = {KEY_NAME, "DECLARED_SETTING", "RESENV_PROMPT", "CUDA_VISIBLE_DEVICES"}
    assert dumped["canary"] is None
    assert {KEY_NAME, "DECLARED_SETTING"} <= names
    assert names <= declared | SANDBOX_NAMES, f"from outside the declaration: {sorted(names - declared - SANDBOX_NAMES)}"
    # the probes get neither the agent's key nor the engine's environment
    probe = json.loads(next(text for text in texts if text and text.startswith("PROBE_ENV "))[len("PROBE_ENV "):])
    assert not set(probe) & ({KEY_NAME, "DECLARED_SETTING"} | set(ENGINE_ONLY)), probe
    [c1] = db_rows(db, "SELECT status FROM tier_results WHERE tier = 'C1'")
    assert c1["status"] == "pass"
    for value in ENGINE_ONLY.values():
        assert_secret_nowhere(value, Path(env["RESENV_DATA_DIR"]), db)
