"""The agent session through the real engine, with stand-in CLIs that replay recorded streams
(tests/fixtures/streams): usage and cost in the store and in `resenv show`, dollar budgets per job
and per run, a process that hangs after reporting completion, a stream without completion, lines
longer than the sandbox's 16 KiB line cap, non-UTF-8 bytes, unknown event types and secrets.

The real CLIs against the scripted model are in test_agents_e2e.py."""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from resenv.engine.money import usd

from ..conftest import resenv, write_benchmark
from ..unit.test_agent_streams import served_after
from .test_engine_run import assert_events_complete, db_rows

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
MAIN = "print('ok')\n"
PRICES = """\
  prices:
    claude-sonnet-4-5: {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0, date: 2025-09-29}
"""
# claude-setup.jsonl's result at these prices (tests/unit/test_agent_streams.py)
SETUP_COST = (1660 * 3.0 + 16000 * 0.3 + 2220 * 3.75 + 530 * 15.0) / 1e6
SECRET = "sk-test-session-secret-4f1c9e77aa"


def fake_cli(tmp_path: Path) -> Path:
    """A stand-in for a CLI: answers --version, reads the prompt, prints $REPLAY, sleeps $LINGER."""
    script = tmp_path / "fake-cli"
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "9.9.9 (fake)"; exit 0; fi
        cat > "$HOME/prompt.txt"
        head -n "${LINES_TO_PRINT:-100000}" "$REPLAY"
        sleep "${LINGER:-0}"
        exit "${EXIT_WITH:-0}"
    """))
    script.chmod(0o755)  # the sandbox runs it as an unprivileged uid
    return script


def claude_agent(name: str, cli: Path, fixture: str, **env: str) -> str:
    env_text = ", ".join(f"{k}: '{v}'" for k, v in {"REPLAY": str(STREAMS / f"{fixture}.jsonl"), **env}.items())
    return textwrap.dedent(f"""\
        {name}:
          kind: claude-code
          executable: {cli}
          model: claude-sonnet-4-5
          completion_grace_s: 1
          env: {{{env_text}}}
    """)


def run(tmp_path: Path, cli_env: dict, agents: str, *names: str, defaults: str = PRICES, jobs: int = 2,
        repos: int = 1) -> tuple[Path, str]:
    bench = write_benchmark(tmp_path, {f"r{i}": {"main.py": MAIN} for i in range(repos)},
                            "a: {kind: command, command: 'true'}\n" + agents, defaults=defaults)
    args = ["run", str(bench), "--tiers", "C1,C5", "--jobs", str(jobs)]
    for name in names:
        args += ["--agent", name]
    done = resenv(*args, env=cli_env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs ORDER BY created_at DESC LIMIT 1")[0]["id"]
    return db, run_id


def events(db: Path, run_id: str, kind: str, job_key: str | None = None) -> list[dict]:
    sql = "SELECT e.data FROM events e JOIN jobs j ON j.id = e.job_id WHERE e.run_id = ? AND e.kind = ?"
    params: list = [run_id, kind]
    if job_key:
        sql += " AND j.key = ?"
        params.append(job_key)
    return [json.loads(row["data"]) for row in db_rows(db, sql + " ORDER BY e.id", tuple(params))]


def test_replayed_claude_stream_gives_usage_cost_and_show_columns(tmp_path, cli_env) -> None:
    cli = fake_cli(tmp_path)
    db, run_id = run(tmp_path, cli_env, claude_agent("c", cli, "claude-setup"), "c")
    [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,))
    assert job["state"] == "done" and job["reason"] is None
    [usage] = db_rows(db, "SELECT * FROM usage WHERE run_id = ?", (run_id,))
    assert (usage["model"], usage["input_tokens"], usage["cached_input_tokens"], usage["cache_write_tokens"],
            usage["output_tokens"]) == ("claude-sonnet-4-5", 1660, 16000, 2220, 530)
    assert usage["cost_usd"] == pytest.approx(SETUP_COST)
    [version] = events(db, run_id, "agent_version")
    assert version["version"] == "9.9.9 (fake)" and version["kind"] == "claude-code"
    [prompt] = events(db, run_id, "agent_prompt")
    assert "report.json" in prompt["text"] and prompt["source"] == "default" and len(prompt["sha256"]) == 64
    workdir = Path(db_rows(db, "SELECT workdir FROM attempts WHERE run_id = ?", (run_id,))[0]["workdir"])
    assert (workdir / "home" / "prompt.txt").read_text() == prompt["text"]  # on stdin, then closed
    [finished] = events(db, run_id, "agent_finished")
    assert finished["completed"] is True and finished["completion_status"] == "success"
    assert finished["tokens"] == 1660 + 16000 + 2220 + 530 and finished["stop_reason"] is None
    kinds = [e["type"] for e in events(db, run_id, "transcript")]
    assert kinds.count("tool_call") == 6 and kinds[-1] == "completion" and "unknown" not in kinds
    live = events(db, run_id, "usage")
    assert live and live[-1]["tokens"] == finished["tokens"]
    assert_events_complete(db, run_id)
    shown = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert "tokens" in shown.stdout and "cost" in shown.stdout and "20.4k" in shown.stdout
    assert usd(SETUP_COST) in shown.stdout  # the one dollar formatter (engine/money.py)
    as_json = json.loads(resenv("show", run_id, "--json", env=cli_env, cwd=tmp_path).stdout)
    assert as_json["jobs"][0]["tokens"] == finished["tokens"]
    report = resenv("report", run_id, "--format", "json", env=cli_env, cwd=tmp_path)
    assert report.returncode == 0 and str(round(SETUP_COST, 4))[:5] in report.stdout


def test_a_cli_hanging_after_its_result_is_killed_after_the_grace(tmp_path, cli_env) -> None:
    cli = fake_cli(tmp_path)
    db, run_id = run(tmp_path, cli_env, claude_agent("c", cli, "claude-setup", LINGER="120"), "c")
    [hung] = events(db, run_id, "agent_hung")
    assert hung["grace_s"] == 1
    [finished] = events(db, run_id, "agent_finished")
    assert finished["completed"] is True and finished["killed_after_completion"] is True
    assert finished["seconds"] < 60
    assert db_rows(db, "SELECT COUNT(*) AS n FROM tier_results WHERE run_id = ?", (run_id,))[0]["n"] == 2


def test_a_stream_without_its_result_is_incomplete(tmp_path, cli_env) -> None:
    cli = fake_cli(tmp_path)
    # cut in the middle of the third message: two whole messages and the input of the third were served
    db, run_id = run(tmp_path, cli_env, claude_agent("c", cli, "claude-setup", LINES_TO_PRINT="40"), "c")
    errors = [e for e in events(db, run_id, "error") if e.get("category") == "incomplete"]
    assert len(errors) == 1
    [finished] = events(db, run_id, "agent_finished")
    assert finished["completed"] is False
    # exactly what the model served: each message once, its output from its message_delta
    [usage] = db_rows(db, "SELECT * FROM usage WHERE run_id = ?", (run_id,))
    served = served_after("claude-setup", 40)
    assert served.input == 1000 + 200 + 150 and served.output == 100 + 60 + 1
    assert (usage["input_tokens"], usage["cached_input_tokens"], usage["cache_write_tokens"], usage["output_tokens"]) == (
        served.input, served.cached_input, served.cache_write, served.output)


def test_dollar_budget_per_job_stops_the_agent_and_probes_still_run(tmp_path, cli_env) -> None:
    cli = fake_cli(tmp_path)
    defaults = PRICES + "  budgets: {wall_clock_s: 600, dollars: 0.01}\n"
    agent = claude_agent("c", cli, "claude-setup", LINGER="120")
    db, run_id = run(tmp_path, cli_env, agent, "c", defaults=defaults)
    [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,))
    assert job["state"] == "done" and job["reason"] == "budget:dollars"
    [budget] = events(db, run_id, "budget")
    assert budget["name"] == "budget:dollars" and budget["limit"] == 0.01 and budget["used"] > 0.01
    [finished] = events(db, run_id, "agent_finished")
    assert finished["stop_reason"] == "budget:dollars" and finished["seconds"] < 60
    tiers = db_rows(db, "SELECT tier, status FROM tier_results WHERE run_id = ?", (run_id,))
    assert {t["tier"] for t in tiers} == {"C1", "C5"}  # the probes ran on what it left
    shown = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert "budget:dollars" in shown.stdout


def test_a_finished_agent_is_never_stopped_or_relabelled_by_its_final_cost(tmp_path, cli_env) -> None:
    """A model no price knows: live cost is unknown until the CLI's `result` reports $0.026, over
    the $0.01 budget. The agent has finished by then: its result stands (no kill, no budget
    reason), and the budget event says the final cost crossed it without stopping anything."""
    stream = (STREAMS / "claude-setup.jsonl").read_text().replace("claude-sonnet-4-5", "claude-unlisted-model")
    (tmp_path / "unlisted.jsonl").write_text(stream)
    cli = fake_cli(tmp_path)
    agent = claude_agent("c", cli, "claude-setup", REPLAY=str(tmp_path / "unlisted.jsonl"))
    db, run_id = run(tmp_path, cli_env, agent, "c", defaults="  budgets: {wall_clock_s: 600, dollars: 0.01}\n")
    [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,))
    assert job["state"] == "done" and job["reason"] is None, job
    [budget] = events(db, run_id, "budget")
    assert (budget["name"], budget["stopped"], budget["when"]) == ("budget:dollars", False, "after completion")
    [finished] = events(db, run_id, "agent_finished")
    assert finished["completed"] is True and finished["stop_reason"] is None and finished["returncode"] == 0
    assert finished["budget_exceeded"] == "budget:dollars" and finished["cost_usd"] == pytest.approx(0.026055)
    [usage] = db_rows(db, "SELECT * FROM usage WHERE run_id = ?", (run_id,))
    assert usage["model"] == "claude-unlisted-model" and usage["cost_usd"] == pytest.approx(0.026055)


def test_run_dollar_budget_stops_the_run_s_agents(tmp_path, cli_env) -> None:
    cli = fake_cli(tmp_path)
    defaults = PRICES + "  budgets: {wall_clock_s: 600, run_dollars: 0.02}\n"
    db, run_id = run(tmp_path, cli_env, claude_agent("c", cli, "claude-setup", LINGER="3"), "c",
                     defaults=defaults, jobs=1, repos=3)
    jobs = db_rows(db, "SELECT * FROM jobs WHERE run_id = ? ORDER BY id", (run_id,))
    assert [j["state"] for j in jobs] == ["done"] * 3
    # job 1 spends ~$0.0264 (over $0.02) and is stopped at its result; later jobs never start
    assert all(j["reason"] == "budget:run_dollars" for j in jobs), [j["reason"] for j in jobs]
    budgets = events(db, run_id, "budget")
    assert [b.get("when") for b in budgets] == [None, "before start", "before start"]
    assert len(events(db, run_id, "agent_finished")) == 1


LONG_AGENT = r"""
import json, os, sys
key = os.environ["FROM_ENV"]
out = sys.stdout.buffer
def emit(obj): out.write(json.dumps(obj).encode() + b"\n")
emit({"type": "session", "model": "claude-sonnet-4-5"})
emit({"type": "message", "text": "x" * 200_000})                       # a 200 kB line
out.write(b"raw bytes \xff\xfe that are not UTF-8\n")                   # not JSON, not UTF-8
emit({"type": "frobnicate", "detail": "a type resenv never heard of"})  # unknown: kept
emit({"type": "usage", "input": 1000, "output": 100})                  # deltas add up
emit({"type": "usage", "input": 500, "output": 50, "cached_input": 2000})
out.flush()
print("the key is " + key + " and " + os.environ["FILE_SECRET"], flush=True)
print(key, file=sys.stderr)
open("report.json", "w").write(json.dumps({"python_path": sys.executable, "notes": key}))
os.makedirs("home/.tool", exist_ok=True)
open("home/.tool/credentials", "w").write(key)
emit({"type": "completion", "status": "success"})
"""


def test_command_agent_jsonl_long_lines_unknown_types_usage_and_secrets(tmp_path, cli_env) -> None:
    (tmp_path / "agent.py").write_text(LONG_AGENT)
    (tmp_path / "agent.env").write_text(f"FILE_SECRET='{SECRET}-from-file'\n")
    agents = textwrap.dedent(f"""\
        j:
          kind: command
          command: ["python3", "{tmp_path / 'agent.py'}"]
          output: jsonl
          env_from: [FROM_ENV]
          env_file: agent.env
    """)
    cli_env = {**cli_env, "FROM_ENV": SECRET}
    db, run_id = run(tmp_path, cli_env, agents, "j")
    transcript = events(db, run_id, "transcript")
    message = next(e for e in transcript if e["type"] == "message")
    assert message["text"] == "x" * 16384 and message["text_chars"] == 200_000  # whole line parsed
    assert any(e["type"] == "output" and "\ufffd" in e["text"] for e in transcript)
    [unknown] = [e for e in transcript if e["type"] == "unknown"]
    assert json.loads(unknown["raw"])["type"] == "frobnicate"
    [usage] = db_rows(db, "SELECT * FROM usage WHERE run_id = ?", (run_id,))
    assert (usage["input_tokens"], usage["cached_input_tokens"], usage["output_tokens"]) == (1500, 2000, 150)
    assert_events_complete(db, run_id)
    said = next(e for e in transcript if e["type"] == "output" and "the key is" in e["text"])
    assert said["text"] == "the key is [REDACTED:FROM_ENV] and [REDACTED:FILE_SECRET]"
    assert_secret_nowhere(SECRET, Path(cli_env["RESENV_DATA_DIR"]), db)
    workdir = Path(db_rows(db, "SELECT workdir FROM attempts WHERE run_id = ?", (run_id,))[0]["workdir"])
    assert "REDACTED" in (workdir / "report.json").read_text()
    assert (workdir / "home" / ".tool" / "credentials").read_text() == "REDACTED" + "*" * (len(SECRET) - 8)


def assert_secret_nowhere(secret: str, data_dir: Path, db: Path) -> None:
    """Grep every file under the data dir and the whole DB (and its WAL) for the secret."""
    needle = secret.encode()
    hits = []
    for root, _, files in os.walk(data_dir):
        for name in files:
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            if needle in path.read_bytes():
                hits.append(str(path))
    for path in (db, Path(f"{db}-wal")):
        if path.exists() and needle in path.read_bytes():
            hits.append(str(path))
    conn = sqlite3.connect(db)
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for row in conn.execute(f"SELECT * FROM {table}"):
                if any(isinstance(v, str) and secret in v for v in row):
                    hits.append(f"table {table}")
                    break
    finally:
        conn.close()
    assert not hits, f"secret found in: {hits}"
