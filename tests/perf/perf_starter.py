"""The starter suite end to end with the baseline agent: wall time and where it goes, by phase.

Target: the whole starter suite WITHOUT the torch repo (torch-ddp) finishes in <= 3 minutes with a
warm package cache, with the real CLI (`resenv run`), the benchmark's own hosts, concurrency and
timeouts, every tier (C0-C5).

Method: a benchmark.yaml is written to a temp dir: the repo's benchmark.yaml with the starter
suite's repos minus the excluded ones (their source paths made absolute), and nothing else changed.
Unless `--no-warmup`, one untimed run first warms the package caches (pip's HTTP and wheel caches
are shared between jobs: the baseline adapter points every sandbox at the user's cache). Then the
timed run: `resenv run` in a child process with a private RESENV_HOME; its wall time is the figure
checked against the target. The `phases` table of the timed run gives the per-phase breakdown
(sum, median and max over jobs of provision, checkout, agent, probes, audit, teardown) and each
job's own line; the agent transcript gives the agent's own steps (venv, installs, verification).

    .venv/bin/python tests/perf/perf_starter.py
    .venv/bin/python tests/perf/perf_starter.py --include-torch --no-warmup
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

from _perfutil import REPO_ROOT, clean_up, summary, verdict, write_result  # noqa: E402  (sets sys.path)

TARGET_S = 180.0
PHASES = ("provision", "checkout", "agent", "probes", "audit", "teardown")


def write_suite(root: Path, exclude: set[str], agent: str) -> Path:
    data = yaml.safe_load((REPO_ROOT / "benchmark.yaml").read_text())
    suite = data["suites"]["starter"]
    suite["repos"] = [repo for repo in suite["repos"] if repo["id"] not in exclude]
    for repo in suite["repos"]:
        repo["source"]["path"] = str((REPO_ROOT / repo["source"]["path"]).resolve())
    data["suites"] = {"starter": suite}
    data["defaults"]["suite"] = "starter"
    data["defaults"]["agent"] = agent
    path = root / "benchmark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_suite(bench: Path, home: Path, timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, RESENV_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("RESENV_DB", None)
    env.pop("RESENV_DATA_DIR", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--display", "plain"],
                          cwd=bench.parent, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - started, done


def rows(db: Path, sql: str) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def agent_steps(db: Path) -> dict[str, dict[str, float]]:
    """Seconds per baseline step (tool_result seconds summed by the step of its tool_call), per job."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: dict[tuple[int, str], str] = {}
    for row in rows(db, "SELECT e.attempt_id, j.repo_id, e.data FROM events e JOIN attempts a ON a.id = e.attempt_id "
                        "JOIN jobs j ON j.id = a.job_id WHERE e.kind = 'transcript' ORDER BY e.id"):
        event = json.loads(row["data"])
        if event.get("type") == "tool_call":
            calls[(row["attempt_id"], event["id"])] = event.get("step", "?").split(":")[0]
        elif event.get("type") == "tool_result":
            step = calls.get((row["attempt_id"], event.get("id")), "?")
            out[row["repo_id"]][step] += float(event.get("seconds") or 0)
    return {repo: dict(steps) for repo, steps in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--include-torch", action="store_true", help="keep torch-ddp (not part of the target)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed cache-warming run")
    parser.add_argument("--agent", default="baseline")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (DB and logs)")
    args = parser.parse_args()
    exclude = set() if args.include_torch else {"torch-ddp"}
    tmp = Path(tempfile.mkdtemp(prefix="resenv-perf-starter-"))
    bench = write_suite(tmp, exclude, args.agent)
    repos = [r["id"] for r in yaml.safe_load(bench.read_text())["suites"]["starter"]["repos"]]
    print(f"starter suite, agent {args.agent}, repos: {', '.join(repos)}")
    warm_s = None
    if not args.no_warmup:
        warm_s, done = run_suite(bench, tmp / "warmup", args.timeout)
        print(f"warm-up run: {warm_s:.1f} s (exit {done.returncode})")
    wall_s, done = run_suite(bench, tmp / "timed", args.timeout)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        print(f"resenv run exited {done.returncode}")
        return 1
    db = tmp / "timed" / "resenv.db"
    phase_rows = rows(db, "SELECT j.repo_id, p.name, p.started_at, p.finished_at FROM phases p "
                          "JOIN attempts a ON a.id = p.attempt_id JOIN jobs j ON j.id = a.job_id")
    per_phase: dict[str, list[float]] = defaultdict(list)
    per_job: dict[str, dict[str, float]] = defaultdict(dict)
    for row in phase_rows:
        seconds = (row["finished_at"] or row["started_at"]) - row["started_at"]
        per_phase[row["name"]].append(seconds)
        per_job[row["repo_id"]][row["name"]] = per_job[row["repo_id"]].get(row["name"], 0.0) + seconds
    attempts = rows(db, "SELECT j.repo_id, a.started_at, a.finished_at FROM attempts a JOIN jobs j ON j.id = a.job_id")
    job_wall = {r["repo_id"]: (r["finished_at"] or 0) - (r["started_at"] or 0) for r in attempts}
    tiers = rows(db, "SELECT j.repo_id, t.tier, t.status FROM tier_results t JOIN jobs j ON j.id = t.job_id")
    glyphs = {"pass": "✓", "fail": "✗", "skip": "–", "error": "!"}
    pyramid: dict[str, dict[str, str]] = defaultdict(dict)
    for row in tiers:
        pyramid[row["repo_id"]][row["tier"]] = row["status"]
    steps = agent_steps(db)

    print(f"\nwall time of `resenv run`: {wall_s:.1f} s (target <= {TARGET_S:.0f} s)")
    print("\nper phase over jobs (seconds):")
    print(f"  {'phase':<10} {'sum':>8} {'median':>8} {'max':>8}")
    phase_summary = {}
    for name in PHASES:
        values = per_phase.get(name, [])
        stats = summary(values, digits=2)
        phase_summary[name] = stats | {"sum": round(sum(values), 2)}
        if values:
            print(f"  {name:<10} {sum(values):8.1f} {stats['median']:8.2f} {stats['max']:8.2f}")
    print("\nper job (seconds; agent steps from the transcript):")
    header = "".join(f"{p[:8]:>9}" for p in PHASES[:4])
    print(f"  {'repo':<18}{'wall':>8}{header}   C0-C5   agent steps")
    for repo in repos:
        phases = per_job.get(repo, {})
        cells = "".join(f"{phases.get(p, 0.0):9.1f}" for p in PHASES[:4])
        glyph = "".join(glyphs.get(pyramid[repo].get(t, ""), "·") for t in ("C0", "C1", "C2", "C3", "C4", "C5"))
        step_text = ", ".join(f"{k} {v:.1f}" for k, v in sorted(steps.get(repo, {}).items(), key=lambda kv: -kv[1]))
        print(f"  {repo:<18}{job_wall.get(repo, 0.0):8.1f}{cells}   {glyph}  {step_text}")
    ok = wall_s <= TARGET_S if exclude else True
    if exclude:
        print(f"\n{verdict(wall_s <= TARGET_S)}: starter suite without {', '.join(sorted(exclude))} in {wall_s:.1f} s "
              f"(target <= {TARGET_S:.0f} s{', warm cache' if warm_s is not None else ', cache as found'})")
    else:
        print(f"\ninformational (torch included, no target): {wall_s:.1f} s")
    write_result("perf_starter", {
        "target_s": TARGET_S, "wall_s": round(wall_s, 2), "warmup_s": round(warm_s, 2) if warm_s else None,
        "excluded": sorted(exclude), "repos": repos, "agent": args.agent, "phases": phase_summary,
        "jobs": {repo: {"wall_s": round(job_wall.get(repo, 0.0), 2), **{k: round(v, 2) for k, v in per_job[repo].items()},
                        "agent_steps": {k: round(v, 2) for k, v in steps.get(repo, {}).items()},
                        "pyramid": pyramid[repo]} for repo in repos},
        "ok": ok,
    })
    clean_up(tmp, args.keep)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
