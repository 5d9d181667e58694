"""The REAL Claude Code and Codex CLIs, end to end through the real engine, against a scripted fake
of their hosted model APIs on loopback (tests/fakes/scripted_model.py).

The fake answers with real tool calls (create a venv, pip install --no-index, write report.json)
that the CLIs execute inside resenv's sandbox; then the probes (C0–C4) and the audit (C5) judge
what they left. One server serves every job of a run: each job's prompt names its own repo path,
which picks the job's script (tests/fakes/scripts.py).

The CLIs come from the npm registry into `.agents/` (see .ci/run):
    npm install --prefix .agents @anthropic-ai/claude-code@2.1.332 @openai/codex@0.169.0
Without them these tests skip, unless RESENV_REQUIRE_AGENT_CLIS=1 (CI), where they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT, resenv, write_benchmark
from ..fakes.scripted_model import Script, ScriptedModel
from ..fakes.scripts import PLANTED_KEY, REPO_FILES, SCENARIOS
from ..secret_watch import SecretWatch
from .test_agent_session import assert_secret_nowhere, events
from .test_engine_run import assert_events_complete, db_rows

AGENTS_DIR = Path(os.environ.get("RESENV_AGENT_CLIS", REPO_ROOT / ".agents"))
CLAUDE = AGENTS_DIR / "node_modules" / ".bin" / "claude"
CODEX = AGENTS_DIR / "node_modules" / ".bin" / "codex"
OPENAI_KEY = "sk-proj-PLANTED-OPENAI-TEST-KEY-9876543210zyx"

PRICES = """\
  prices:
    claude-sonnet-4-5: {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0, date: 2025-09-29}
    gpt-5-codex: {input: 1.25, cached_input: 0.125, cache_write: 0.0, output: 10.0, date: 2025-09-23}
"""

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _clis() -> None:
    if CLAUDE.exists() and CODEX.exists():
        return
    message = f"agent CLIs not installed in {AGENTS_DIR} (npm install --prefix .agents ..., see .ci/run)"
    if os.environ.get("RESENV_REQUIRE_AGENT_CLIS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def agents_block(url: str, claude_extra: str = "", codex_extra: str = "", claude_env: str = "") -> str:
    def extra(text: str) -> str:
        return "".join(f"  {line}\n" for line in text.splitlines() if line.strip())

    return (
        "a: {kind: command, command: 'true'}\n"
        "claude:\n"
        "  kind: claude-code\n"
        f"  executable: {CLAUDE}\n"
        "  model: claude-sonnet-4-5\n"
        f'  env: {{ANTHROPIC_BASE_URL: "{url}"{claude_env}}}\n'
        "  env_from: [ANTHROPIC_API_KEY]\n"
        "  completion_grace_s: 30\n"
        + extra(claude_extra) +
        "codex:\n"
        "  kind: codex\n"
        f"  executable: {CODEX}\n"
        "  model: gpt-5-codex\n"
        "  env_from: [OPENAI_API_KEY]\n"
        "  config:\n"
        "    model_provider: scripted\n"
        "    model_providers.scripted.name: scripted\n"
        f'    model_providers.scripted.base_url: "{url}/v1"\n'
        "    model_providers.scripted.env_key: OPENAI_API_KEY\n"
        "    model_providers.scripted.wire_api: responses\n"
        "    model_providers.scripted.request_max_retries: 2\n"
        "    model_providers.scripted.stream_max_retries: 2\n"
        + extra(codex_extra)
    )


def run_scenarios(tmp_path: Path, cli_env: dict, scenarios: list[str], *, claude_extra: str = "",
                  codex_extra: str = "", claude_env: str = "", defaults: str = PRICES, agents: tuple[str, ...] = ("claude", "codex"),
                  tiers: str = "all", retries: str = "{infra: 0, backoff_s: 0.1}",
                  watch: SecretWatch | None = None) -> tuple[Path, str, ScriptedModel]:
    """Run the scenarios through `resenv run`; `watch` (a `SecretWatch`) polls while the run is live."""
    # one route per job, so that each job gets its own scripted failures
    routes = {f"/jobs/{name}--{agent}/": Script.from_dict(SCENARIOS[name]) for name in scenarios for agent in agents}
    model = ScriptedModel(Script.from_dict(SCENARIOS["setup"]), routes=routes).start()
    try:
        bench = write_benchmark(tmp_path, {name: dict(REPO_FILES) for name in scenarios},
                                agents_block(model.url, claude_extra, codex_extra, claude_env),
                                defaults=defaults, retries=retries)
        env = {**cli_env, "ANTHROPIC_API_KEY": PLANTED_KEY, "OPENAI_API_KEY": OPENAI_KEY}
        args = ["run", str(bench), "--jobs", "4", "--tiers", tiers]
        for agent in agents:
            args += ["--agent", agent]
        with watch or contextlib.nullcontext():
            done = resenv(*args, env=env, cwd=tmp_path, timeout=540)
    finally:
        model.stop()
    db = Path(cli_env["RESENV_DB"])
    run_id = db_rows(db, "SELECT id FROM runs ORDER BY created_at DESC LIMIT 1")[0]["id"]
    errors = db_rows(db, "SELECT count(*) AS n FROM jobs WHERE run_id = ? AND state = 'error'", (run_id,))[0]["n"]
    assert done.returncode == (3 if errors else 0), done.stdout + done.stderr  # 3: some job ended in error
    return db, run_id, model


def tiers_of(db: Path, run_id: str, key: str) -> dict[str, tuple[str, str | None]]:
    rows = db_rows(db, "SELECT t.tier, t.status, t.category FROM tier_results t JOIN jobs j ON j.id = t.job_id"
                       " WHERE t.run_id = ? AND j.key = ? ORDER BY t.id", (run_id, key))
    return {row["tier"]: (row["status"], row["category"]) for row in rows}


def usage_of(db: Path, run_id: str, key: str) -> dict:
    [row] = db_rows(db, "SELECT u.* FROM usage u JOIN jobs j ON j.id = u.job_id WHERE u.run_id = ? AND j.key = ?",
                    (run_id, key))
    return row


def test_real_clis_build_an_env_that_the_probes_verify(tmp_path, cli_env) -> None:
    """setup (venv + pip --no-index + report), secret-leak (the planted keys everywhere), big-output
    (5 MB of tool output, non-UTF-8 bytes) and retry (529s / dropped streams), for both CLIs."""
    scenarios = ["setup", "secret-leak", "big-output", "retry"]
    db, run_id, model = run_scenarios(tmp_path, cli_env, scenarios)
    jobs = {j["key"]: j for j in db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,))}
    assert all(j["state"] == "done" for j in jobs.values()), {k: (j["state"], j["reason"]) for k, j in jobs.items()}

    for agent in ("claude", "codex"):
        key = f"setup/{agent}"
        tiers = tiers_of(db, run_id, key)
        # a stdlib-only repo in a real venv: C0 closure, C1 runs, C5 finds the report honest
        assert tiers["C0"][0] == "pass" and tiers["C1"][0] == "pass" and tiers["C5"][0] == "pass", tiers
        assert tiers["C2"][0] == "skip" and tiers["C3"][0] == "skip" and tiers["C4"][0] == "skip"
        [finished] = events(db, run_id, "agent_finished", key)
        assert finished["completed"] is True and finished["completion_status"] == "success", finished
        kinds = [e["type"] for e in events(db, run_id, "transcript", key)]
        # Every result the CLI printed is parsed. Under load Codex now and then never prints the
        # completion of a command it ran (its stream goes from `item.started` to the next item), so
        # the count is the raw stream's, and the failing command's result must be among them.
        printed = raw_tool_results(Path(cli_env["RESENV_DATA_DIR"]) / run_id / "jobs" / f"setup--{agent}"
                                   / "attempt-1" / "logs" / "agent.stdout", agent)
        assert kinds.count("tool_call") == 6 and kinds.count("tool_result") == printed >= 5 and "unknown" not in kinds
        results = [e for e in events(db, run_id, "transcript", key) if e["type"] == "tool_result"]
        assert sorted(r["exit_code"] for r in results)[-1] == 3 and set(r["exit_code"] for r in results) == {0, 3}

    [claude_version] = events(db, run_id, "agent_version", "setup/claude")
    [codex_version] = events(db, run_id, "agent_version", "setup/codex")
    assert claude_version["version"] == "2.1.332 (Claude Code)" and codex_version["version"] == "codex-cli 0.169.0"
    [prompt] = events(db, run_id, "agent_prompt", "setup/claude")
    assert "report.json" in prompt["text"] and "python_path" in prompt["text"]

    # tokens: the script's per-step usage, summed by the CLIs; priced from defaults.prices
    claude = usage_of(db, run_id, "setup/claude")
    assert (claude["model"], claude["input_tokens"], claude["cached_input_tokens"], claude["cache_write_tokens"],
            claude["output_tokens"]) == ("claude-sonnet-4-5", 1660, 16000, 2220, 530)
    assert claude["cost_usd"] == pytest.approx((1660 * 3.0 + 16000 * 0.3 + 2220 * 3.75 + 530 * 15.0) / 1e6)
    codex = usage_of(db, run_id, "setup/codex")
    assert (codex["model"], codex["input_tokens"], codex["cached_input_tokens"], codex["output_tokens"],
            codex["reasoning_tokens"]) == ("gpt-5-codex", 1660, 16000, 530, 40)
    assert codex["cost_usd"] == pytest.approx((1660 * 1.25 + 16000 * 0.125 + 530 * 10.0) / 1e6)

    # transient errors: recorded, retried by the CLIs, never fatal, the attempt is the agent's
    retry_errors = [e for e in events(db, run_id, "transcript", "retry/claude") if e["type"] == "error"]
    assert [(e["status"], e["api_kind"]) for e in retry_errors if e["category"] == "model_api"] == [
        (529, "server"), (529, "server"), (None, "connection")]  # a dropped stream retried once, as recorded
    assert not any(e["fatal"] for e in retry_errors)
    reconnects = [e for e in events(db, run_id, "transcript", "retry/codex") if e["type"] == "error"
                  and e["category"] == "model_api"]
    assert len(reconnects) == 2 and all(e["retry"] and not e["fatal"] for e in reconnects)
    assert tiers_of(db, run_id, "retry/codex")["C1"][0] == "pass"

    # 5 MB of output and bytes that are not UTF-8: every line accounted for, nothing unknown
    for agent in ("claude", "codex"):
        key = f"big-output/{agent}"
        transcript = events(db, run_id, "transcript", key)
        assert "unknown" not in [e["type"] for e in transcript]
        outputs = [e.get("output", "") for e in transcript if e["type"] == "tool_result"]
        assert any("\ufffd" in text for text in outputs)
        assert events(db, run_id, "agent_finished", key)[0]["completed"] is True
    codex_big = [e for e in events(db, run_id, "transcript", "big-output/codex") if e["type"] == "tool_result"][0]
    assert codex_big["output_chars"] > 16384  # a line far over the sandbox's cap, parsed whole

    # the planted keys: used by the CLIs (the fake got the requests), echoed by the agent, written
    # to files and to report.json, yet nowhere in the data dir or the store
    assert any(r.get("route") == "/jobs/secret-leak--claude/" for r in model.requests)
    assert any(r.get("route") == "/jobs/secret-leak--codex/" for r in model.requests)
    said = [e for e in events(db, run_id, "transcript", "secret-leak/claude") if e["type"] == "tool_result"][0]
    assert "[REDACTED:ANTHROPIC_API_KEY]" in said["output"]
    for secret in (PLANTED_KEY, OPENAI_KEY):
        assert_secret_nowhere(secret, Path(cli_env["RESENV_DATA_DIR"]), db)
    assert tiers_of(db, run_id, "secret-leak/claude")["C5"][0] == "pass"

    assert_events_complete(db, run_id)
    shown = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert "$0.0" in shown.stdout and "20.4k" in shown.stdout
    report = resenv("report", run_id, env=cli_env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr


def raw_tool_results(stdout: Path, agent: str) -> int:
    """How many tool results the CLI itself printed: Claude's `tool_result` blocks, Codex's completed
    command executions."""
    count = 0
    for line in stdout.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if agent == "claude" and record.get("type") == "user":
            content = (record.get("message") or {}).get("content") or []
            count += sum(1 for block in content if isinstance(block, dict) and block.get("type") == "tool_result")
        elif agent == "codex" and record.get("type") == "item.completed":
            count += (record.get("item") or {}).get("type") == "command_execution"
    return count


def model_api_jobs(db: Path, run_id: str, scenarios: list[str], attempts: int) -> None:
    """Each job of `scenarios` ended as error/model_api after `attempts` attempts, none judged."""
    for name in scenarios:
        for agent in ("claude", "codex"):
            key = f"{name}/{agent}"
            [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ? AND key = ?", (run_id, key))
            tries = db_rows(db, "SELECT state, category, reason FROM attempts WHERE job_id = ? ORDER BY number", (job["id"],))
            assert job["state"] == "error" and [a["category"] for a in tries] == ["model_api"] * attempts, (key, tries)
            assert tries[-1]["reason"].startswith("model API"), tries
            assert tiers_of(db, run_id, key) == {}, "an outage is never judged"


def test_model_api_outages_are_infrastructure_outside_the_denominators(tmp_path, cli_env) -> None:
    """401 and 500 on every request: each attempt ends as error/model_api, is retried as an
    infrastructure failure, and no tier result (no denominator) comes of it. A refused key stops
    Claude Code at its first retry notice, though it would retry for minutes by itself."""
    scenarios = ["auth-failure", "server-error"]
    db, run_id, model = run_scenarios(tmp_path, cli_env, scenarios, tiers="C1,C5", retries="{infra: 1, backoff_s: 0.1}",
                                      claude_env=', CLAUDE_CODE_MAX_RETRIES: "2"')
    model_api_jobs(db, run_id, scenarios, attempts=2)
    stopped = [e for e in events(db, run_id, "agent_stopped", "auth-failure/claude")]
    assert len(stopped) == 2 and all(e["status"] == 401 for e in stopped)
    # stopped at the first retry notice: one request per attempt, not 1 + max_retries
    requests = [r for r in model.requests if r.get("route") == "/jobs/auth-failure--claude/" and r.get("agent_loop")]
    assert len(requests) == 2, requests
    finished = events(db, run_id, "agent_finished", "server-error/codex")
    assert finished[-1]["model_api"]["api_kind"] == "server"

    report = resenv("report", run_id, "--format", "json", "--figure", str(tmp_path / "pyramid.svg"),
                    env=cli_env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    scores = json.loads(report.stdout)
    assert "model_api" in json.dumps(scores["errors"]), scores["errors"]
    assert "2 infra errors (2 model_api)" in (tmp_path / "pyramid.svg").read_text()
    shown = resenv("show", run_id, env=cli_env, cwd=tmp_path)
    assert "error/model_api" in shown.stdout and "2 infra errors (2 model_api), outside every denominator" in shown.stdout, \
        shown.stdout
    assert_events_complete(db, run_id)


def test_real_clis_never_leave_a_printed_key_in_a_file_while_live_or_after(tmp_path, cli_env) -> None:
    """A tool prints the key (and writes it nowhere), then sleeps: every file under the data dir (the
    raw logs, the CLI's HOME with its own session transcripts, shell snapshots, caches and temp files)
    and the store are polled while the CLIs run and after; none may ever hold the key. Codex's session
    log still feeds the live usage (tokens in the store before the turn's end is not asserted here:
    the usage rows must simply be right)."""
    data_dir = Path(cli_env["RESENV_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    db = Path(cli_env["RESENV_DB"])
    watch = SecretWatch([PLANTED_KEY, OPENAI_KEY], [data_dir], [db, Path(f"{db}-wal")])
    db, run_id, model = run_scenarios(tmp_path, cli_env, ["print-key"], tiers="C1", watch=watch)
    assert not watch.hits, f"the key was on disk in: {sorted(watch.hits)}"
    assert watch.scans > 20, watch.scans
    for agent in ("claude", "codex"):
        key = f"print-key/{agent}"
        [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ? AND key = ?", (run_id, key))
        assert job["state"] == "done", (key, job["reason"])
        said = [e for e in events(db, run_id, "transcript", key) if e["type"] == "tool_result"][0]
        assert "[REDACTED:" in said["output"] and "the key is" in said["output"], said
        assert tiers_of(db, run_id, key)["C1"][0] == "pass", tiers_of(db, run_id, key)
        assert usage_of(db, run_id, key)["input_tokens"] > 0
    assert any(r.get("route") == "/jobs/print-key--codex/" for r in model.requests)
    for secret in (PLANTED_KEY, OPENAI_KEY):
        assert_secret_nowhere(secret, data_dir, db)


def test_real_clis_failures_max_turns_permission_denial(tmp_path, cli_env) -> None:
    claude_extra = "max_turns: 2\npermission_mode: default\n"
    scenarios = ["max-turns", "permission-denied"]
    db, run_id, _ = run_scenarios(tmp_path, cli_env, scenarios, tiers="C1,C5", claude_extra=claude_extra)
    jobs = {j["key"]: j for j in db_rows(db, "SELECT * FROM jobs WHERE run_id = ?", (run_id,))}
    assert all(j["state"] == "done" for j in jobs.values())

    turns = events(db, run_id, "transcript", "max-turns/claude")
    assert turns[-1]["subtype"] == "error_max_turns"
    assert [e["command"] for e in turns if e["type"] == "tool_call"] == ["echo step 0", "echo step 1"]

    denied = events(db, run_id, "transcript", "permission-denied/claude")
    assert any(e["type"] == "error" and e["category"] == "permission_denied" for e in denied)
    assert denied[-1]["permission_denials"] == 1
    assert_events_complete(db, run_id)


def requests_after_breach(db: Path, run_id: str, key: str, model: ScriptedModel) -> list[dict]:
    """The model requests of job `key` that arrived after its budget event."""
    [row] = db_rows(db, "SELECT e.ts FROM events e JOIN jobs j ON j.id = e.job_id WHERE e.run_id = ? AND j.key = ?"
                        " AND e.kind = 'budget'", (run_id, key))
    name, agent = key.split("/")
    route = f"/jobs/{name}--{agent}/"
    return [r for r in model.requests if r.get("route") == route and r.get("agent_loop") and r["ts"] > row["ts"]]


def served(model: ScriptedModel, key: str, agent: str) -> tuple[int, int, int, int]:
    """(input, cached input, cache writes, output) the scripted model served to job `key`: Codex's
    wire format has no cache writes."""
    name, _ = key.split("/")
    answered = [r["usage"] for r in model.requests if r.get("route") == f"/jobs/{name}--{agent}/" and "usage" in r]
    return (sum(u["input"] for u in answered), sum(u["cache_read"] for u in answered),
            sum(u["cache_write"] for u in answered) if agent == "claude" else 0, sum(u["output"] for u in answered))


def test_real_clis_are_stopped_by_a_token_budget(tmp_path, cli_env) -> None:
    """The breach is seen as soon as the response that crosses it ends (Claude: its message_delta;
    Codex: the token_usage_record of its session log), before its tool runs: no request after it,
    and the tokens counted are exactly those the model served. The tool calls take a second, as real
    ones do (tests/perf/perf_budget_stop.py measures the worst case, tools that take none)."""
    defaults = PRICES + "  budgets: {wall_clock_s: 600, tokens: 3050}\n"
    db, run_id, model = run_scenarios(tmp_path, cli_env, ["slow-setup"], defaults=defaults, tiers="C1,C5")
    for agent in ("claude", "codex"):
        key = f"slow-setup/{agent}"
        [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ? AND key = ?", (run_id, key))
        assert job["state"] == "done" and job["reason"] == "budget:tokens", (key, job["reason"])
        [budget] = events(db, run_id, "budget", key)
        # Claude: the first response ends at 1000 input + 2000 cache writes + 100 output; Codex: its
        # second token_usage_record (the thread's 4200 input, 3000 of them cached, + 160 output)
        assert (budget["limit"], budget["used"]) == (3050, 3100 if agent == "claude" else 4360), (key, budget)
        [finished] = events(db, run_id, "agent_finished", key)
        assert finished["stop_reason"] == "budget:tokens" and finished["completed"] is False, (key, finished, budget)
        assert requests_after_breach(db, run_id, key, model) == []
        usage = usage_of(db, run_id, key)
        assert (usage["input_tokens"], usage["cached_input_tokens"], usage["cache_write_tokens"],
                usage["output_tokens"]) == served(model, key, agent)
        # stopped before it wrote a report; the probes still judged what it left
        assert tiers_of(db, run_id, key)["C1"] == ("fail", "missing_report")


def test_real_clis_are_stopped_by_a_dollar_budget_with_no_price_configured(tmp_path, cli_env) -> None:
    """No defaults.prices: the shipped price table prices each response live; the stop lands
    before the next request; usage counts what the model served."""
    defaults = "  budgets: {wall_clock_s: 600, dollars: 0.005}\n"
    db, run_id, model = run_scenarios(tmp_path, cli_env, ["slow-setup"], defaults=defaults, tiers="C1")
    for agent in ("claude", "codex"):
        key = f"slow-setup/{agent}"
        [job] = db_rows(db, "SELECT * FROM jobs WHERE run_id = ? AND key = ?", (run_id, key))
        assert job["reason"] == "budget:dollars", (key, job["reason"])
        [budget] = events(db, run_id, "budget", key)
        assert budget["used"] > 0.005
        assert requests_after_breach(db, run_id, key, model) == []
        usage = usage_of(db, run_id, key)
        assert usage["cost_usd"] >= budget["used"] and usage["model"] in ("claude-sonnet-4-5", "gpt-5-codex")
        assert not [e for e in events(db, run_id, "warning", key) if "no price" in e["message"]]
    # Codex crossed $0.005 with its fourth response (scripts.SETUP's usage at gpt-5-codex list prices)
    assert len([r for r in model.requests if r.get("route") == "/jobs/slow-setup--codex/" and r.get("agent_loop")]) == 4
