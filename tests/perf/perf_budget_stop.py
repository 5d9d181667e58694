"""Budget-stop latency per agent CLI: how soon a breached token budget stops the real `claude` and
`codex` CLIs, and how many model requests they still make after the breach.

Each round is one `resenv run` (a child process: process start, checkout, sandbox and CLI start
included) of a one-repo benchmark with both CLIs, driven by the scripted model (tests/fakes) on
loopback, with `budgets.tokens: 1000` (the first response crosses it). Two tool speeds:

* ``instant``: scripts.SETUP — the first tool call (``ls && cat``) takes milliseconds, so the CLI
  is ready to send its next request almost at once: the worst case for a stop;
* ``1s``: scripts.SLOW_SETUP — each tool call takes a second, as a real one (pip, a build) does.

Figures per CLI and speed (medians over --rounds): **stop latency** = the agent process's end (the
sandbox's `exit` event of the agent command) − the breach (the `budget` event's time, when the
session saw the usage that crossed the budget); **requests after the breach** (the scripted model's
request log, by arrival time); and the tokens counted at the end. Target: no request after the
breach with 1 s tools, for both CLIs; the instant-tool figures are the documented worst case.

    .venv/bin/python tests/perf/perf_budget_stop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import _perfutil as pu

from tests.conftest import cli_environ, resenv, rows, write_benchmark
from tests.fakes.scripted_model import Script, ScriptedModel
from tests.fakes.scripts import PLANTED_KEY, REPO_FILES, SCENARIOS
from tests.integration.test_agents_e2e import CLAUDE, CODEX, OPENAI_KEY, agents_block

NAME = "perf_budget_stop"
SPEEDS = {"instant": "setup", "1s": "slow-setup"}


def one_round(root: Path, scenario: str) -> dict[str, dict[str, Any]]:
    routes = {f"/jobs/{scenario}--{agent}/": Script.from_dict(SCENARIOS[scenario]) for agent in ("claude", "codex")}
    with ScriptedModel(Script.from_dict(SCENARIOS["setup"]), routes=routes) as model:
        bench = write_benchmark(root, {scenario: dict(REPO_FILES)}, agents_block(model.url),
                                defaults="  budgets: {wall_clock_s: 600, tokens: 1000}\n")
        env = {**cli_environ(root), "ANTHROPIC_API_KEY": PLANTED_KEY, "OPENAI_API_KEY": OPENAI_KEY}
        done = resenv("run", str(bench), "--jobs", "2", "--tiers", "none", "--agent", "claude", "--agent", "codex",
                      env=env, cwd=root, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"resenv run failed: {done.stderr[-2000:]}")
        requests = list(model.requests)
    db = Path(env["RESENV_DB"])
    out = {}
    for agent in ("claude", "codex"):
        key = f"{scenario}/{agent}"
        events = rows(db, "SELECT e.kind, e.ts, e.data FROM events e JOIN jobs j ON j.id = e.job_id WHERE j.key = ?"
                          " AND e.kind IN ('budget', 'exit', 'agent_finished') ORDER BY e.id", (key,))
        budget = next(e for e in events if e["kind"] == "budget")
        ended = next(e["ts"] for e in events if e["kind"] == "exit" and json.loads(e["data"]).get("log") == "agent")
        finished = json.loads(next(e["data"] for e in events if e["kind"] == "agent_finished"))
        route = f"/jobs/{scenario}--{agent}/"
        loop = [r for r in requests if r.get("route") == route and r.get("agent_loop")]
        out[agent] = {"stop_latency_s": ended - budget["ts"], "requests_after": sum(r["ts"] > budget["ts"] for r in loop),
                      "requests": len(loop), "used_at_breach": json.loads(budget["data"])["used"],
                      "tokens_counted": finished["tokens"], "stop_reason": finished["stop_reason"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not (CLAUDE.exists() and CODEX.exists()):
        raise SystemExit(f"the agent CLIs are not installed ({CLAUDE.parent}): see .ci/run")
    results: dict[str, Any] = {}
    ok = True
    base = Path(tempfile.mkdtemp(prefix="resenv-perf-budget-"))
    try:
        for speed, scenario in SPEEDS.items():
            rounds = []
            for n in range(args.rounds):
                root = base / f"{speed}-{n}"
                root.mkdir()
                rounds.append(one_round(root, scenario))
            for agent in ("claude", "codex"):
                got = [r[agent] for r in rounds]
                figures = {
                    "stop_latency_s": pu.summary([g["stop_latency_s"] for g in got]),
                    "requests_after_breach": {"median": statistics.median(g["requests_after"] for g in got),
                                              "max": max(g["requests_after"] for g in got)},
                    "tokens_counted": pu.summary([float(g["tokens_counted"]) for g in got], digits=0),
                    "stop_reasons": sorted({str(g["stop_reason"]) for g in got}),
                    "rounds": got,
                }
                results[f"{agent}/{speed}"] = figures
                print(f"{agent:6} tools {speed:7}: stop latency median {figures['stop_latency_s']['median'] * 1000:.0f} ms"
                      f" (max {figures['stop_latency_s']['max'] * 1000:.0f} ms); requests after the breach: median"
                      f" {figures['requests_after_breach']['median']}, max {figures['requests_after_breach']['max']};"
                      f" stop {figures['stop_reasons']}")
                if speed == "1s":
                    ok = ok and figures["requests_after_breach"]["max"] == 0 and figures["stop_reasons"] == ["budget:tokens"]
    finally:
        pu.clean_up(base, args.keep)
    result = {"parameters": {"rounds": args.rounds, "budget_tokens": 1000}, "figures": results,
              "pass": ok, "machine": pu.machine()}
    path = pu.write_result(NAME, result)
    print(f"{pu.verdict(ok)}: no request after the breach with 1 s tools; results in {path}")


if __name__ == "__main__":
    os.umask(0o022)
    main()
