"""Event-loop stalls while the engine computes a big import census.

Target: no gap over 100 ms between wake-ups of a 10 ms heartbeat task in the engine's loop during
the probes phase (where the census is computed) of a real run.

Method: a repo of SMALL small modules and LARGE large generated modules (tests/big_repo.py: a parser
holds the interpreter's lock for the whole of each large file) is bundled into a benchmark. Then:

1. ``engine``: the real ``Engine`` runs in this process, two agents on that repo at once (each
   writes a report naming this interpreter), tiers ``C1`` only (securing the checkout reads the
   census); a task in the same loop sleeps 10 ms at a time and records every gap beyond it. Figures:
   the largest gap and the p99 during the probes phases (`phases` table) and during the census
   itself (the `census` event: when it ended and how long it took), the wake-ups counted, and how
   many attempts computed the census (the target: one).
2. ``thread`` and ``pool``, informational: the same census alone, from a loop with the same heartbeat,
   once in a thread (``asyncio.to_thread``, how the engine once ran it) and once through the run's
   ``CensusCache`` (a spawned process pool), to show what the process pool buys.

    .venv/bin/python tests/perf/perf_loop_stall.py
    .venv/bin/python tests/perf/perf_loop_stall.py --small 4000 --large 2 --large-bytes 1500000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _perfutil as pu

from resenv.engine.censuses import CensusCache, census_of
from resenv.engine.checkout import Pristine
from resenv.engine.cli.display import NoDisplay
from resenv.engine.runs import RunPlan, create_run
from resenv.engine.run.scheduler import Engine
from resenv.engine.spec import load_benchmark
from tests.big_repo import REPORTING_AGENTS, big_repo
from tests.conftest import write_benchmark

TICK_S = 0.01
TARGET_S = 0.100
AGENTS = REPORTING_AGENTS


class Heartbeat:
    """A task that sleeps TICK_S at a time and records (wake-up time, gap beyond the tick)."""

    def __init__(self) -> None:
        self.wakeups: list[tuple[float, float]] = []
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        last = time.monotonic()
        while not self._done.is_set():
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            self.wakeups.append((time.time(), now - last - TICK_S))
            last = now

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        self._done.set()
        assert self._task is not None
        await self._task

    def between(self, start: float, end: float) -> list[float]:
        """The gaps of every interval between wake-ups that overlaps [start, end]."""
        return [gap for woke, gap in self.wakeups if woke >= start and woke - gap - TICK_S <= end]


def gaps_summary(gaps: list[float]) -> dict[str, Any]:
    return {"wakeups": len(gaps), "max_ms": round(max(gaps, default=float("nan")) * 1000, 1),
            "p99_ms": round(pu.percentile(gaps, 99) * 1000, 1), "over_100ms": sum(gap > TARGET_S for gap in gaps)}


async def watched(work: Callable[[], Awaitable[Any]]) -> tuple[Any, Heartbeat]:
    beat = Heartbeat()
    beat.start()
    try:
        return await work(), beat
    finally:
        await beat.stop()


def engine_run(root: Path, files: dict[str, str]) -> dict[str, Any]:
    bench = load_benchmark(write_benchmark(root, {"big": files}, AGENTS))
    db = root / "store.db"
    run_id = create_run(bench, RunPlan(suite="s", agents=["a", "b"], hosts=["local"], jobs=2, tiers=("C1",)),
                        db, root / "data")
    engine = Engine(db, run_id, NoDisplay(), jobs_limit=2, install_signals=False)
    started = time.perf_counter()
    state, beat = asyncio.run(watched(engine.execute))
    wall = time.perf_counter() - started
    conn = sqlite3.connect(db)
    try:
        probes = conn.execute("SELECT started_at, finished_at FROM phases WHERE name = 'probes'").fetchall()
        censuses = [(ts, json.loads(data)) for ts, data in conn.execute("SELECT ts, data FROM events WHERE kind = 'census'")]
        tiers = conn.execute("SELECT tier, status FROM tier_results").fetchall()
    finally:
        conn.close()
    start, end = min(p[0] for p in probes), max(p[1] for p in probes)
    figures: dict[str, Any] = {
        "state": state, "engine_wall_s": round(wall, 3), "tiers": tiers,
        "probes_s": round(end - start, 3), "probes": gaps_summary(beat.between(start, end)),
        "census_computations": len(censuses), "whole_run": gaps_summary([gap for _, gap in beat.wakeups]),
    }
    if censuses:
        ts, data = censuses[0]
        figures["census"] = data | gaps_summary(beat.between(ts - data["seconds"], ts))
    return figures


def alone(root: Path, files: dict[str, str]) -> dict[str, Any]:
    """The census by itself, from a loop with a heartbeat: in a thread, then through the process pool."""
    work = root / "alone"
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    env = {"GIT_AUTHOR_NAME": "p", "GIT_AUTHOR_EMAIL": "p@p", "GIT_COMMITTER_NAME": "p", "GIT_COMMITTER_EMAIL": "p@p",
           "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "generated"]):
        subprocess.run(["git", *argv], cwd=work, env=env, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, env=env, check=True, capture_output=True,
                            text=True).stdout.strip()
    pristine = Pristine(work / ".git", commit)
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    _, beat = asyncio.run(watched(lambda: asyncio.to_thread(census_of, pristine)))
    figures["thread"] = {"seconds": round(time.perf_counter() - started, 3)} | gaps_summary([g for _, g in beat.wakeups])

    async def pooled() -> None:
        cache = CensusCache()
        try:
            await cache.census("big", pristine)
        finally:
            cache.close()

    started = time.perf_counter()
    _, beat = asyncio.run(watched(pooled))
    figures["pool"] = {"seconds": round(time.perf_counter() - started, 3)} | gaps_summary([g for _, g in beat.wakeups])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=3000, help="small modules")
    parser.add_argument("--large", type=int, default=2, help="large generated modules")
    parser.add_argument("--large-bytes", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    files = big_repo(args.small, args.large, args.large_bytes)
    size = sum(len(text) for text in files.values())
    print(f"repo: {len(files)} files, {size / 1e6:.1f} MB ({args.large} large of {args.large_bytes / 1e6:.1f} MB)")
    root = Path(tempfile.mkdtemp(prefix="resenv-perf-loop-"))
    try:
        engine = engine_run(root / "engine", files)
        census = engine.get("census", {})
        print(f"engine: {engine['state']} in {engine['engine_wall_s']} s; census computed "
              f"{engine['census_computations']}x ({census.get('seconds')} s, {census.get('files')} files)")
        for label, key in (("probes phase", "probes"), ("during the census", "census"), ("whole run", "whole_run")):
            part = engine.get(key, {})
            print(f"  {label:18s} max gap {part.get('max_ms')} ms, p99 {part.get('p99_ms')} ms, "
                  f"{part.get('wakeups')} wake-ups, {part.get('over_100ms')} over 100 ms")
        compared = alone(root, files)
        for label in ("thread", "pool"):
            part = compared[label]
            print(f"census alone in a {label:6s}: {part['seconds']} s, max gap {part['max_ms']} ms, "
                  f"p99 {part['p99_ms']} ms, {part['over_100ms']} over 100 ms")
    finally:
        pu.clean_up(root, args.keep)
    ok = (engine["state"] == "finished" and engine["census_computations"] == 1
          and engine["probes"]["max_ms"] <= TARGET_S * 1000)
    print(f"{pu.verdict(ok)}: largest loop gap in the probes phase {engine['probes']['max_ms']} ms "
          f"(target <= {TARGET_S * 1000:.0f} ms), census computed {engine['census_computations']}x (target 1)")
    pu.write_result("perf_loop_stall", {
        "params": {"small": args.small, "large": args.large, "large_bytes": args.large_bytes, "tick_s": TICK_S},
        "engine": engine, "alone": compared, "target_ms": TARGET_S * 1000, "pass": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
