"""What a Slurm cluster offers a host entry: its partition, nodes, GPUs per node and limits.

Read once when a run starts (``gpus: auto`` becomes the most GPUs one node of the partition has, since
each command's job runs on one node) and by ``resenv hosts check``, which prints it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import SlurmClient, gres_count


@dataclass
class NodeFacts:
    name: str
    state: str
    cpus: int | None
    memory_mib: int | None
    gpus: int
    gres: str


@dataclass
class ClusterFacts:
    version: str
    partition: str | None  # the one the host uses (its spec's, else the cluster's default)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[NodeFacts] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def gpus_per_node(self) -> int:
        return max((node.gpus for node in self.nodes), default=0)

    @property
    def limits(self) -> dict[str, Any]:
        part = next((p for p in self.partitions if p["name"] == self.partition), None)
        return {key: part.get(key) for key in ("max_time", "default_time", "max_nodes", "max_cpus_per_node")} \
            if part else {}

    def inventory(self) -> dict[str, Any]:
        usable = [node for node in self.nodes if _usable(node.state)]
        return {
            "slurm": self.version, "partition": self.partition, "nodes": len(self.nodes), "nodes_up": len(usable),
            "gpus_per_node": self.gpus_per_node, "gpus_total": sum(node.gpus for node in self.nodes),
            "cpus_per_node": max((node.cpus or 0 for node in self.nodes), default=0),
            "limits": self.limits, "problems": self.problems,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"gpus_per_node": self.gpus_per_node, "limits": self.limits}


def _usable(state: str) -> bool:
    bad = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "POWERED_DOWN", "UNKNOWN")
    return not any(word in state.upper() for word in bad)


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdecimal() else None


def expand_nodelist(text: str) -> list[str]:
    """``n[1-3,5],gpu01`` → ``n1 n2 n3 n5 gpu01`` (enough of Slurm's hostlist syntax for node names)."""
    names: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text or ""):
        if plain:
            names.append(plain)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if high:
                width = len(low)
                names += [f"{prefix}{str(i).zfill(width)}" for i in range(int(low), int(high) + 1)]
            else:
                names.append(f"{prefix}{low}")
    return names


async def cluster_facts(client: SlurmClient, partition: str | None, gres: str = "gpu") -> ClusterFacts:
    """Version, partitions and the chosen partition's nodes (raises SlurmError / ControllerUnavailable)."""
    version = await client.version()
    raw_parts = await client.partitions()
    partitions = [{
        "name": p.get("PartitionName"), "state": p.get("State"), "default": p.get("Default") == "YES",
        "max_time": p.get("MaxTime"), "default_time": p.get("DefaultTime"), "max_nodes": p.get("MaxNodes"),
        "max_cpus_per_node": p.get("MaxCPUsPerNode"), "nodes": p.get("Nodes"), "qos": p.get("QoS"),
    } for p in raw_parts]
    chosen = partition or next((p["name"] for p in partitions if p["default"]), None)
    facts = ClusterFacts(version=version, partition=chosen, partitions=partitions)
    part = next((p for p in partitions if p["name"] == chosen), None)
    if part is None:
        facts.problems.append(f"no partition {chosen!r}; the cluster has: "
                              f"{', '.join(str(p['name']) for p in partitions) or 'none'}")
        return facts
    if part["state"] != "UP":
        facts.problems.append(f"partition {chosen} is {part['state']}")
    members = set(expand_nodelist(part["nodes"] or ""))
    gres_name = gres.split(":")[0]
    for node in await client.nodes():
        if node.get("NodeName") not in members:
            continue
        facts.nodes.append(NodeFacts(
            name=node.get("NodeName", ""), state=node.get("State", ""), cpus=_int(node.get("CPUTot")),
            memory_mib=_int(node.get("RealMemory")), gpus=gres_count(node.get("Gres", ""), gres_name),
            gres=node.get("Gres", "")))
    if not any(_usable(node.state) for node in facts.nodes):
        facts.problems.append(f"no usable node in partition {chosen}")
    return facts
