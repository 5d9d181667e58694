"""Hosts: where sandboxes run, what they have (CPUs, GPUs), and who holds their slots and GPUs.

The scheduler never hands a GPU to two jobs at once: `HostPool.lease` takes a slot and a set of GPU
ids atomically (the engine is single-threaded asyncio, so no lock is needed) and `release` returns them.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .gpuinfo import DriverInfo, local_driver
from ..sandbox.isolation import Isolation
from ..sandbox.process import ProcessSandbox

log = logging.getLogger(__name__)


def detect_local_gpus() -> list[int]:
    """GPU indices the local NVIDIA driver shows; none when there is no driver (a state, not an error)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [int(line) for line in out.split() if line.strip().isdecimal()]


@dataclass
class Host:
    """One host of the run: a name, its slots, its GPU ids and what is leased now."""

    name: str
    kind: str
    slots: int
    gpu_ids: list[int]
    busy_slots: int = 0
    leased_gpus: set[int] = field(default_factory=set)
    _driver: DriverInfo | None = field(default=None, repr=False)
    spec: Any = field(default=None, repr=False)  # the host's spec (sandbox kind, image, limits)

    broken: str | None = field(default=None, repr=False)  # why the host can never run a job as set up

    gpus_shared = False  # True where the host's own scheduler hands out the GPUs and a lease takes none

    def mark_broken(self, reason: str) -> None:
        """The host cannot work as it is set up (see `sandbox.base.HostSetupError`): it takes no more
        jobs, and when no host of the run can take any, the run's waiting jobs end with this reason."""
        self.broken = self.broken or reason

    @property
    def free_gpus(self) -> list[int]:
        return [gpu for gpu in self.gpu_ids if gpu not in self.leased_gpus]

    def inventory(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "hostname": platform.node(),
            "os": f"{platform.system()} {platform.release()}",
            "cpus": os.cpu_count(),
            "slots": self.slots,
            "gpus": self.gpu_ids,
        }

    def driver(self) -> DriverInfo | None:
        """The NVIDIA driver of this host (None without GPUs or driver), asked once."""
        if not self.gpu_ids:
            return None
        if self._driver is None:
            self._driver = local_driver() or DriverInfo(None, None)
        return self._driver

    def sandbox(self, workdir: Path, **job: Any) -> ProcessSandbox:
        # `job` (lease, attempt, reopen) lets container sandboxes label and size themselves.
        if getattr(self, "spec", None) is not None and getattr(self.spec, "sandbox", "process") == "docker":
            from ..sandbox.docker import DockerSandbox

            return DockerSandbox.for_job(self, workdir, **job)  # type: ignore[return-value]
        workdir.mkdir(parents=True, exist_ok=True)
        return ProcessSandbox(workdir, isolation=self.isolation())

    def isolation(self) -> Isolation | None:
        """The bubblewrap settings of this host's process sandboxes; None for `sandbox: unsafe-process`."""
        spec = getattr(self, "spec", None)
        if getattr(spec, "sandbox", "process") == "unsafe-process":
            if not getattr(self, "_warned_unsafe", False):
                log.warning("host %s: sandbox: unsafe-process: agents see this whole machine and can "
                            "outlive their jobs", self.name)
                self._warned_unsafe = True
            return None
        options = getattr(spec, "process", None)
        if options is None:
            return Isolation()
        return Isolation(network=options.network, uid=options.uid, expose=tuple(options.expose),
                         devices=tuple(options.devices))

    def available(self) -> bool:
        """Whether the scheduler may place work here now (an SSH host that is down may not, nor a
        broken one)."""
        return self.broken is None


@dataclass(frozen=True)
class Lease:
    host: Host
    gpus: tuple[int, ...]


class HostPool:
    """Places jobs on hosts: a free slot plus the GPUs the job needs.

    A job needing N GPUs goes only to hosts that have N GPUs in all, and waits until N are free.
    If no host of the run has N, it goes to the hosts with the most GPUs and leases all of them;
    the tiers that needed more are then skipped as `insufficient_hardware`, never failed. So a
    GPU-less host never takes GPU work while a GPU host is in the run.
    """

    def __init__(self, hosts: list[Host]) -> None:
        if not hosts:
            raise ValueError("a run needs at least one host")
        self.hosts = hosts

    def grantable(self, needed: int) -> int:
        """How many GPUs a job that wants `needed` will get, given the run's hosts."""
        return min(needed, max(len(host.gpu_ids) for host in self.hosts))

    def lease(self, needed: int, on: str | None = None) -> Lease | None:
        """A slot and GPUs for a job that wants `needed`; `on` pins it to the named host (where a kept
        post-agent state lives, or where the dispatch policy placed it), which then grants at most
        the GPUs it has."""
        want = self.grantable(needed)
        if on is not None:
            want = min([needed, *(len(host.gpu_ids) for host in self.hosts if host.name == on)])
        candidates = [host for host in self.hosts if self.fits(host, want) and (on is None or host.name == on)]
        if not candidates:
            return None
        host = min(candidates, key=lambda host: self.preference(bool(host.gpu_ids), host.busy_slots / host.slots, want))
        gpus = tuple(host.free_gpus[:want])
        host.busy_slots += 1
        host.leased_gpus.update(gpus)
        return Lease(host, gpus)

    @staticmethod
    def fits(host: Host, want: int) -> bool:
        """Whether `host` can take a job wanting `want` GPUs now (never a host that is down)."""
        return (len(host.gpu_ids) >= want and host.busy_slots < host.slots and len(host.free_gpus) >= want
                and host.available())

    @staticmethod
    def preference(has_gpus: bool, busy_fraction: float, want: int) -> tuple[float, ...]:
        """Lower is better: CPU-only work prefers hosts without GPUs, then the least busy host."""
        return (float(has_gpus), busy_fraction) if want == 0 else (busy_fraction,)

    def release(self, lease: Lease) -> None:
        lease.host.busy_slots -= 1
        lease.host.leased_gpus.difference_update(lease.gpus)
