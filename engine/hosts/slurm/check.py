"""``resenv hosts check`` for a Slurm host: reachable, the partition, its nodes and GPUs, its limits.

The same questions a lab member asks before pointing a campaign at a cluster: can this machine (or the
login node) talk to the controller, does the partition exist and is it up, how many GPUs can one job
get on one node (C4 needs its entrypoint's count on one node), and do resenv's own timeouts fit under
the partition's ``MaxTime``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .client import SlurmError
from .facts import cluster_facts
from .host import build_slurm_host
from .script import TIME_MARGIN_S


def slurm_minutes(text: str | None) -> float | None:
    """Slurm's time format (``UNLIMITED``, ``MM``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) in minutes; None = no limit."""
    if not text or text in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[0], parts[1], parts[2]
    return days * 1440 + hours * 60 + minutes + seconds / 60


async def slurm_host_facts(name: str, spec: Any, data_dir: Path, longest_timeout_s: float | None = None) -> Any:
    """A `HostFacts` for a slurm host (engine/hosts/check.py prints it)."""
    from ..check import HostFacts

    facts = HostFacts(name=name, kind="slurm")
    host = build_slurm_host(name, spec, data_dir)
    try:
        if host.ssh is not None and not await host.ssh.connection.start():
            facts.problems.append(f"login node unreachable: {host.ssh.connection.reason}")
            return facts
        started = time.perf_counter()
        try:
            cluster = await cluster_facts(host.client, getattr(spec, "partition", None), getattr(spec, "gres", "gpu"))
        except SlurmError as error:
            facts.problems.append(f"slurm: {error}")
            return facts
        facts.round_trip_ms = round((time.perf_counter() - started) * 1000, 2)
        facts.reachable = True
        facts.slurm = cluster.to_dict() | {"where": host.client.runner.where}
        facts.cpus = max((node.cpus or 0 for node in cluster.nodes), default=None)
        facts.gpu_state = f"{cluster.gpus_per_node} per node (GRES {getattr(spec, 'gres', 'gpu')})"
        facts.problems += cluster.problems
        if isinstance(spec.gpus, int) and spec.gpus > cluster.gpus_per_node:
            facts.problems.append(f"gpus: {spec.gpus} asked, but the partition's nodes have at most "
                                  f"{cluster.gpus_per_node} GPU(s) (a job runs on one node)")
        if spec.agent_gpus > cluster.gpus_per_node:
            facts.problems.append(f"agent_gpus: {spec.agent_gpus} asked, nodes have at most {cluster.gpus_per_node}")
        if spec.cpus and facts.cpus and spec.cpus > facts.cpus:
            facts.problems.append(f"cpus: {spec.cpus} per job, nodes have at most {facts.cpus}")
        max_min = slurm_minutes(cluster.limits.get("max_time"))
        if max_min is not None and longest_timeout_s:
            need = (longest_timeout_s + TIME_MARGIN_S) / 60
            if need > max_min:
                facts.problems.append(f"the partition's MaxTime ({cluster.limits.get('max_time')}) is shorter than "
                                      f"resenv's longest timeout ({longest_timeout_s:g} s) plus a minute: "
                                      "lower defaults.timeouts or set time_limit_min")
        return facts
    finally:
        await host.close()


def format_slurm(facts: Any) -> list[str]:
    """Human lines for a slurm host."""
    if not facts.reachable:
        return [f"{facts.name} (slurm): UNREACHABLE", *[f"  problem: {p}" for p in facts.problems]]
    info = facts.slurm or {}
    limits = info.get("limits") or {}
    nodes = info.get("nodes") or []
    up = [n for n in nodes if not any(bad in n["state"] for bad in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"))]
    lines = [
        f"{facts.name} (slurm): reachable via {info.get('where')}, round trip {facts.round_trip_ms} ms",
        f"  slurm: {info.get('version')}, partition: {info.get('partition')} "
        f"({', '.join(p['name'] for p in info.get('partitions', []))} on the cluster)",
        f"  nodes: {len(nodes)} ({len(up)} usable): " + ", ".join(
            f"{n['name']} {n['state'].lower()} {n['cpus']} cpus {n['gpus']} gpus" for n in nodes[:8])
        + (" …" if len(nodes) > 8 else ""),
        f"  GPUs per node: {info.get('gpus_per_node', 0)}; cpus per node: {facts.cpus}",
        f"  limits: MaxTime {limits.get('max_time')}, DefaultTime {limits.get('default_time')}, "
        f"MaxNodes {limits.get('max_nodes')}",
    ]
    lines += [f"  problem: {problem}" for problem in facts.problems] or ["  problems: none"]
    return lines
