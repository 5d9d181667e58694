"""`resenv report` on a finished run of 10,000 jobs: target ≤ 2 s.

Builds a store with one run of 10,000 jobs (1,000 repos × 10 agents), each with six tier results
whose evidence has the shape real probes write (C0 census and missing lists, C5 hallucinations),
then times the real CLI (`resenv report`, markdown and JSON) end to end, process start included.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from statistics import median

from _perfutil import write_result

from resenv.engine.store.db import open_for_writing

JOBS_PER_AGENT, AGENTS = 1_000, 10
STATUSES = ["pass", "pass", "pass", "fail", "skip", "error"]


def build_store(path: Path) -> None:
    rng = random.Random(7)
    conn = open_for_writing(path)
    now = time.time()
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
        " created_at, started_at, finished_at) VALUES ('big', 'big', 'b', '.', 's', '{}', '{}', '/tmp', 'finished', ?, ?, ?)",
        (now, now, now + 3600))
    census = {"total": 40, "stdlib": 15, "repo": 5, "third_party": 20,
              "modules": [{"name": f"pkg{i}", "kind": "third_party"} for i in range(20)]}
    job_id = attempt_id = 0
    tiers = []
    for agent in range(AGENTS):
        for repo in range(JOBS_PER_AGENT):
            job_id += 1
            attempt_id += 1
            conn.execute("INSERT INTO jobs (id, run_id, key, suite, repo_id, agent, gpus_needed, state, attempts,"
                         " created_at, started_at, finished_at) VALUES (?, 'big', ?, 's', ?, ?, 1, 'done', 1, ?, ?, ?)",
                         (job_id, f"r{repo}/a{agent}", f"r{repo}", f"a{agent}", now, now, now + 60))
            conn.execute("INSERT INTO attempts (id, run_id, job_id, number, state, started_at, finished_at)"
                         " VALUES (?, 'big', ?, 1, 'done', ?, ?)", (attempt_id, job_id, now, now + 60))
            conn.execute("INSERT INTO phases (attempt_id, name, status, started_at, finished_at)"
                         " VALUES (?, 'agent', 'done', ?, ?)", (attempt_id, now, now + rng.uniform(10, 600)))
            missing = [f"pkg{i}" for i in range(rng.randint(0, 4))]
            for tier in ("C0", "C1", "C2", "C3", "C4", "C5"):
                status = rng.choice(STATUSES)
                evidence = {"exit_code": 1, "log_tail": "x" * 400}
                if tier == "C0":
                    evidence = {"census": census, "missing": missing, "missing_source": [], "log_tail": "y" * 400}
                if tier == "C5":
                    evidence = {"hallucinations": [{"kind": "version"}] if status == "fail" else [],
                                "environment": {"size_bytes": rng.randint(10, 900) << 20}}
                tiers.append(("big", job_id, attempt_id, tier, status, None if status == "pass" else "runtime",
                              json.dumps(evidence), now))
    conn.executemany("INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, category, evidence_json,"
                     " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", tiers)
    conn.execute("COMMIT")
    conn.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.db"
        started = time.perf_counter()
        build_store(db)
        print(f"store: {AGENTS * JOBS_PER_AGENT} jobs, {6 * AGENTS * JOBS_PER_AGENT} tier results "
              f"built in {time.perf_counter() - started:.1f} s")
        figures = {}
        for fmt in ("md", "json"):
            times = []
            for _ in range(5):
                begin = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "report", "big", "--db", str(db),
                                      "--format", fmt], capture_output=True, text=True)
                times.append(time.perf_counter() - begin)
                assert out.returncode == 0, out.stderr
            figures[fmt] = {"median_s": median(times), "runs_s": times}
            print(f"resenv report --format {fmt}: median {median(times):.2f} s (runs: "
                  f"{', '.join(f'{t:.2f}' for t in times)})")
        ok = all(value["median_s"] <= 2.0 for value in figures.values())
        print("PASS" if ok else "FAIL", "(target ≤ 2 s)")
        write_result("perf_report", {"jobs": AGENTS * JOBS_PER_AGENT, "figures": figures, "target_s": 2.0, "pass": ok})


if __name__ == "__main__":
    main()
