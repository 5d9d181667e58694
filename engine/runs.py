"""Creating a run: the job plan (repo tasks × agents) and a snapshot of the spec it runs under.

The snapshot makes a run self-contained: resuming it later uses the spec as it was, even if
benchmark.yaml has changed since. The run's original scoring records the rules version it is
judged by, so a later rules change can be told apart (`resenv rescore`).
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..probes import rules
from .paths import absolute
from .spec import Benchmark
from .store.db import dumps, open_for_writing, rollback_quietly, store_failure
from .tiers import ALL_TIERS


@dataclass(frozen=True)
class RunPlan:
    suite: str
    agents: list[str]
    hosts: list[str]
    jobs: int | None = None
    name: str | None = None
    tiers: tuple[str, ...] = ALL_TIERS
    repos: tuple[str, ...] = ()  # a subset of the suite's repo ids; empty = all


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def create_run(bench: Benchmark, plan: RunPlan, db_path: Path, data_root: Path) -> str:
    """Insert the run and its queued jobs in one transaction; returns the run id. The run's data dir
    is stored absolute: every later process (jobs, `run --resume`) reads it from any directory."""
    data_root = absolute(data_root)
    suite = bench.suite(plan.suite)
    repos = [suite.repo(repo_id) for repo_id in plan.repos] if plan.repos else list(suite.repos)
    for agent in plan.agents:
        bench.agent(agent)
    for host in plan.hosts:
        bench.host(host)
    run_id = new_run_id()
    now = time.time()
    conn = open_for_writing(db_path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
            (run_id, plan.name or f"{plan.suite} × {', '.join(plan.agents)}", str(bench.source_path),
             str(bench.base_dir), plan.suite, dumps(bench.snapshot()),
             dumps({"agents": plan.agents, "hosts": plan.hosts, "jobs": plan.jobs, "tiers": list(plan.tiers)}),
             str(data_root / run_id), now),
        )
        conn.executemany(
            "INSERT INTO jobs (run_id, key, suite, repo_id, agent, gpus_needed, state, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
            [(run_id, f"{repo.id}/{agent}", plan.suite, repo.id, agent, repo.gpus_needed(plan.tiers), now)
             for repo in repos for agent in plan.agents],
        )
        conn.execute(
            "INSERT INTO scorings (run_id, number, label, rules_version, state, created_at)"
            " VALUES (?, 0, 'original', ?, 'done', ?)", (run_id, rules.RULES_VERSION, now))
        conn.execute("COMMIT")
    except sqlite3.Error as error:
        rollback_quietly(conn)
        failure = store_failure(error, db_path)
        if failure is None:
            raise
        raise failure from error
    except BaseException:
        rollback_quietly(conn)
        raise
    finally:
        conn.close()
    (data_root / run_id).mkdir(parents=True, exist_ok=True)
    return run_id
