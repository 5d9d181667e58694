"""`resenv prune RUN`: remove what a run keeps on its docker hosts once nobody needs it.

Checkpoint images outlive a run so that any tier can be re-run later (`docker.keep_checkpoints`);
this removes them, with any container the run left, on every docker host of the run — by the run's
labels only, never anything resenv did not make. A run an engine is still running is refused. What was removed is stored as a `docker_prune` event per
host, so that a later tier retry on that state is refused up front with the reason (engine/controls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from .hosts import build_hosts
from .scheduler import engine_alive
from .spec import benchmark_from_snapshot


class PruneRefused(Exception):
    """The run is still being run: its checkpoints may be needed any moment."""


async def prune_run(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per docker host of the run: the containers and images removed, or the error that stopped it."""
    if engine_alive(run):
        raise PruneRefused(f"run {run['id']} is being run by engine PID {run['engine_pid']}; prune it once it ends")
    options = json.loads(run["options_json"])
    bench = benchmark_from_snapshot(json.loads(run["spec_json"]), Path(run["base_dir"]))
    hosts = [host for host in build_hosts({name: bench.host(name) for name in options["hosts"]})
             if getattr(host.spec, "sandbox", "process") == "docker"]
    from .sandbox import docker as docker_sandbox

    results: dict[str, dict[str, Any]] = {}
    for host in hosts:
        try:
            if hasattr(host, "connection") and not await host.start():
                results[host.name] = {"error": f"unreachable: {host.connection.reason}"}
                continue
            factory = await docker_sandbox.client_factory_for(host)
            # in a worker thread: a remote daemon's forwarded socket is served by this event loop
            results[host.name] = await asyncio.to_thread(lambda: docker_sandbox.prune(factory(), run["id"]))
        except Exception as error:  # one host's failure does not stop the others
            results[host.name] = {"error": f"{type(error).__name__}: {error}"}
        finally:
            if hasattr(host, "connection"):
                with contextlib.suppress(Exception):
                    await host.close()
    return results


def record_pruned(db: Path, run_id: str, results: dict[str, dict[str, Any]]) -> None:
    """Store what `resenv prune` removed from each host, as the run's end does (`docker_prune`)."""
    import time

    from .store import dumps, open_for_writing

    conn = open_for_writing(db)
    try:
        with conn:
            for host, done in results.items():
                if "error" not in done:
                    conn.execute("INSERT INTO events (run_id, ts, kind, data) VALUES (?, ?, 'docker_prune', ?)",
                                 (run_id, time.time(), dumps({"host": host, "removed": done, "by": "resenv prune"})))
    finally:
        conn.close()
