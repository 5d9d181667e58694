"""Fixtures of the dashboard tests: a deterministic store (snapshots) and REAL runs (a real engine
in a thread over a small benchmark with a quick `command` agent)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from resenv.engine.runs import RunPlan, create_run
from resenv.engine.spec import load_benchmark
from resenv.engine.store.db import StoreReader
from resenv.tui.live import EngineThread

from ..conftest import wait_for, write_benchmark
from . import fixture_db

MAIN = "print('ok')\n"


def agent_block(ticks: int = 5, sleep_s: float = 0.0, slow_repo: str = "slow") -> str:
    """A `command` agent: prints `ticks` lines, sleeps `sleep_s` s when its job is `slow_repo`'s, then
    writes a report naming this interpreter (so C1 and C5 have something to judge)."""
    sleep = f'case "{{job}}" in {slow_repo}/*) sleep {sleep_s};; esac;' if sleep_s else ""
    return f"""\
a:
  kind: command
  command: >-
    echo start {{job}}; i=0; while [ $i -lt {ticks} ]; do echo tick $i of {{job}}; i=$((i+1)); done; {sleep}
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""


@dataclass
class RealRun:
    db: Path
    run_id: str
    root: Path
    thread: EngineThread | None = None

    def reader(self) -> StoreReader:
        return StoreReader(self.db)

    def rows(self, sql: str, params: tuple = ()) -> list[dict]:
        reader = self.reader()
        try:
            return reader.rows(sql, params)
        finally:
            reader.close()

    def wait(self, predicate, timeout: float = 60.0, interval: float = 0.05):
        return wait_for(predicate, timeout, interval)


def make_run(root: Path, repos: list[str], agent: str) -> RealRun:
    bench_path = write_benchmark(root, {repo: {"main.py": MAIN} for repo in repos}, agent)
    bench = load_benchmark(bench_path)
    db = root / "store.db"
    run_id = create_run(bench, RunPlan(suite="s", agents=["a"], hosts=["local"], tiers=("C1", "C5")), db, root / "data")
    return RealRun(db, run_id, root)


def start_engine(run: RealRun) -> RealRun:
    run.thread = EngineThread(run.db, run.run_id)
    run.thread.start()
    return run


def stop_engine(run: RealRun) -> None:
    if run.thread is not None and run.thread.is_alive():
        run.thread.stop()
        run.thread.join(60)


@pytest.fixture
def finished_run(tmp_path: Path) -> RealRun:
    """Three jobs run to completion by a real engine."""
    run = start_engine(make_run(tmp_path, ["alpha", "beta", "gamma"], agent_block(ticks=5)))
    assert run.thread is not None
    run.thread.join(120)
    assert run.thread.state == "finished", run.thread.error
    return run


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[RealRun]:
    """A live engine: `fast` finishes at once, `slow` runs for a minute (until the test stops it)."""
    run = start_engine(make_run(tmp_path, ["fast", "slow"], agent_block(ticks=3, sleep_s=60)))
    try:
        run.wait(lambda: run.rows("SELECT 1 FROM jobs WHERE key = 'fast/a' AND state = 'done'") and
                 run.rows("SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'slow/a'"
                          " AND a.phase = 'agent'"))
        yield run
    finally:
        stop_engine(run)


@pytest.fixture(scope="session")
def fixture_store() -> Path:
    return fixture_db.build()


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> float:
    """Freeze the wall clock at the fixture's NOW (elapsed times, staleness, engine heartbeats)."""
    monkeypatch.setattr(time, "time", lambda: fixture_db.NOW)
    return fixture_db.NOW
