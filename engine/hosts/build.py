"""The hosts of a run, one per `hosts:` entry of the spec, each of its kind.

Every kind of host builds on `pool.Host`; this module is the one place that knows them all, so
`pool` itself stays free of SSH and Slurm and the kinds depend on it, never the other way. A kind's
module is imported only when the spec names that kind: SSH hosts bring asyncssh and its
cryptography, which a local run never needs.
"""

from __future__ import annotations

from typing import Any

from .pool import Host, detect_local_gpus


def build_hosts(host_specs: dict[str, Any]) -> list[Host]:
    """Hosts from the spec's `hosts:` entries; `gpus: auto` asks the local driver."""
    hosts: list[Host] = []
    for name, spec in host_specs.items():
        if spec.kind == "ssh":
            from .ssh import build_ssh_host

            hosts.append(build_ssh_host(name, spec))
            continue
        if spec.kind == "slurm":  # the cluster's scheduler owns the GPUs
            from .slurm.host import build_slurm_host

            hosts.append(build_slurm_host(name, spec))
            continue
        if spec.gpus == "auto":
            gpu_ids = detect_local_gpus()
        elif isinstance(spec.gpus, int):
            gpu_ids = list(range(spec.gpus))
        else:
            gpu_ids = list(spec.gpus)
        hosts.append(Host(name=name, kind=spec.kind, slots=spec.slots, gpu_ids=gpu_ids, spec=spec))
    return hosts
