"""Proof that a GPU tier's entrypoint used the GPUs it was leased: the driver's process accounting,
sampled while the entrypoint runs.

Why: an exit code says nothing about where a program ran. A repo whose code picks
``device = "cuda" if torch.cuda.is_available() else "cpu"`` exits 0 on the CPU when the agent's
environment cannot reach the GPU, and C3 would pass on a broken environment. The driver knows which
processes hold a CUDA context on which GPU, so C3 and C4 ask it (the rule, in :meth:`GpuUse.verdict`):

* **C3** passes only if the leased GPU showed a process of the entrypoint in at least one sample;
  **C4** only if every GPU the tier leased did. Exit 0 without that is ``fail``/``no_gpu_use``.
* A host where GPU processes cannot be observed at all (no NVML or ``nvidia-smi``, a leased GPU the
  driver does not have, every query failing, a Slurm host today) cannot prove it either way: the
  tier is ``error``/``infra`` with a one-line reason, never a pass and never the agent's failure.
* An entrypoint that fails keeps its own category; the GPU evidence is recorded beside it.

Sources, chosen by the host (:func:`watch_for`):

* **local hosts**: NVML's ``nvmlDeviceGetComputeRunningProcesses`` in a thread of its own, every
  ``LOCAL_INTERVAL_S`` (0.15 s), so even a run of a few seconds is sampled many times and the
  asyncio loop is never blocked by a driver call.
* **SSH hosts**: the fleet's ``REMOTE_PROCESSES`` query (``nvidia-smi --query-compute-apps``) plus each
  process's parent chain read from the host's ``/proc``, one short round trip over the host's
  connection at most every ``REMOTE_INTERVAL_S`` (0.2 s).

Which processes are the probe's: in a container sandbox, those whose cgroup names the attempt's
container (one container per attempt, and tiers run one after another), as
:class:`~resenv.engine.hosts.telemetry.ProcessMap` maps them; otherwise those in the process group the
sandbox started the entrypoint in, or whose parent chain reaches its leader (torchrun starts its
workers in sessions of their own). Another process on the same GPU proves nothing and is listed
apart, as ``other_pids``. A process whose PID this machine (or the SSH host's /proc) cannot see at all
is listed as ``unseen_pids``: it may be the entrypoint's in another PID namespace (an engine that runs
in a container sees the driver's host PIDs), so a leased GPU that showed only such processes cannot
be judged either way (``error``/``infra``), never ``no_gpu_use``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .hosts.telemetry import NO_DRIVER, REMOTE_PROCESSES, GpuProcess, ProcessMap, load_pynvml, parse_remote_processes
from .wording import counted

LOCAL_INTERVAL_S = 0.15
REMOTE_INTERVAL_S = 0.2
REMOTE_QUERY_TIMEOUT_S = 10.0
LINEAGE_DEPTH = 64
MAX_ERRORS = 5
MAX_OTHER_PIDS = 10
_OURS = 0  # the "job id" the probe's own container or group gets in a ProcessMap
OURS, OTHER, UNSEEN = "ours", "other", "unseen"  # whose a GPU process is

UUID_QUERY = "nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>&1"

# REMOTE_PROCESSES' rows, then one "lineage|<pid>| <pid>:<pgid> <ppid>:<its pgid> ..." line per GPU
# process, read from the host's /proc ("pid (comm) state ppid pgrp ...": comm may hold spaces, so
# everything up to the last ") " is cut first).
REMOTE_PROBE_PROCESSES = (
    f"rows=$({REMOTE_PROCESSES}); printf '%s\\n' \"$rows\"; "
    "printf '%s\\n' \"$rows\" | while IFS='|' read -r uuid pid rest; do "
    "chain=''; p=$pid; n=0; "
    f"while [ -n \"$p\" ] && [ \"$p\" -gt 0 ] 2>/dev/null && [ $n -lt {LINEAGE_DEPTH} ]; do "
    "f=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null) || break; [ -n \"$f\" ] || break; "
    "set -- $f; chain=\"$chain $p:$3\"; p=$2; n=$((n+1)); done; "
    "printf 'lineage|%s|%s\\n' \"$pid\" \"$chain\"; done"
)


def _one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


@dataclass
class GpuSeen:
    """One leased GPU over the run: the probe's processes on it, and anyone else's."""

    pids: set[int] = field(default_factory=set)
    peak_mib: float | None = None  # the most the probe's processes held on it together, in one sample
    samples: int = 0  # samples in which a process of the probe was on it
    other_pids: set[int] = field(default_factory=set)
    unseen_pids: set[int] = field(default_factory=set)  # not in this machine's /proc: cannot tell whose


@dataclass(frozen=True)
class Verdict:
    status: str  # pass | fail | error
    category: str | None  # None | no_gpu_use | infra
    reason: str  # one line


@dataclass
class GpuUse:
    """What the driver showed of one entrypoint run on its leased GPUs."""

    source: str | None  # "nvml" | "nvidia-smi" | None (nothing could observe the host)
    host: str
    gpus: tuple[int, ...]
    interval_s: float | None = None
    samples: int = 0  # samples in which every leased GPU answered
    per_gpu: dict[int, GpuSeen] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    unobservable: str | None = None

    def __post_init__(self) -> None:
        if self.source is not None:
            self.per_gpu = {gpu: GpuSeen() for gpu in self.gpus}

    def add_sample(self, found: Sequence[tuple[int, int, float | None]], whose: Callable[[int], str]) -> None:
        """One complete sample: (gpu, pid, MiB) of every compute process on the leased GPUs, and whose
        each PID is (OURS, OTHER or UNSEEN)."""
        self.samples += 1
        held: dict[int, float | None] = {}  # GPU -> MiB the probe's processes hold on it now
        for gpu, pid, mib in found:
            seen = self.per_gpu.get(gpu)
            if seen is None:
                continue
            owner = whose(pid)
            if owner != OURS:
                apart = seen.unseen_pids if owner == UNSEEN else seen.other_pids
                if len(apart) < MAX_OTHER_PIDS:
                    apart.add(pid)
                continue
            seen.pids.add(pid)
            held[gpu] = held.get(gpu) if mib is None else (held.get(gpu) or 0.0) + mib
        for gpu, mib in held.items():
            seen = self.per_gpu[gpu]
            seen.samples += 1
            if mib is not None:
                seen.peak_mib = max(seen.peak_mib or 0.0, mib)

    def note_error(self, text: object) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(_one_line(text))

    def verdict(self) -> Verdict:
        """The rule for an entrypoint that exited 0 (see the module docstring)."""
        why = self.unobservable
        if why is None and self.samples == 0:
            why = f"every {self.source} process query failed: {self.errors[0] if self.errors else 'no sample taken'}"
        if why is not None:
            return Verdict("error", "infra", _one_line(f"GPU use cannot be proven on host {self.host}: {why}", 500))
        missing = [gpu for gpu in self.gpus if not self.per_gpu[gpu].pids]
        if unseen := [gpu for gpu in missing if self.per_gpu[gpu].unseen_pids]:
            pids = sorted(pid for gpu in unseen for pid in self.per_gpu[gpu].unseen_pids)
            return Verdict("error", "infra", _one_line(
                f"GPU use cannot be proven on host {self.host}: GPU {unseen[0]} showed process(es) "
                f"{', '.join(map(str, pids[:5]))} that the host's /proc does not show (another PID namespace?), "
                "so whose they are cannot be told", 500))
        if missing:
            names = ", ".join(f"GPU {gpu}" for gpu in missing)
            return Verdict("fail", "no_gpu_use", (
                f"exited 0, but no process of the entrypoint held a CUDA context on leased {names} in "
                f"{counted(self.samples, self.source + ' sample')}, one every {self.interval_s} s"))
        used = ", ".join(f"GPU {gpu}" for gpu in self.gpus)
        return Verdict("pass", None, f"processes of the entrypoint ran on {used}")

    def evidence(self) -> dict[str, Any]:
        return {
            "source": self.source, "host": self.host, "gpus": list(self.gpus), "interval_s": self.interval_s,
            "samples": self.samples,
            "per_gpu": [{"gpu": gpu, "pids": sorted(seen.pids), "peak_mib": seen.peak_mib, "samples": seen.samples,
                         "other_pids": sorted(seen.other_pids), "unseen_pids": sorted(seen.unseen_pids)}
                        for gpu, seen in self.per_gpu.items()],
            "errors": self.errors, "unobservable": self.unobservable,
        }


class GpuWatch(Protocol):
    """Started before the entrypoint, told its process group, stopped after it: the run's `GpuUse`."""

    async def start(self) -> None: ...

    def started(self, pgid: int) -> None: ...

    async def stop(self) -> GpuUse: ...


def watch_for(host: Any, sandbox: Any, gpus: Sequence[int]) -> GpuWatch:
    """The watcher a host allows: NVML here, ``nvidia-smi`` over SSH, none on a Slurm host."""
    container = getattr(sandbox, "container_id", None)
    kind = getattr(host, "kind", "local")
    if kind == "slurm":
        return Unobservable(host.name, gpus, "a Slurm host's GPU processes run on compute nodes resenv has no NVML "
                                             "or nvidia-smi access to")
    if kind == "ssh":
        return SmiWatch(host.name, host.connection, gpus, container_id=container)
    return NvmlWatch(host.name, gpus, container_id=container)


def ancestors(pid: int, proc_root: str = "/proc") -> list[int]:
    """`pid` and its parent chain, read from /proc (as far as it can be read)."""
    chain: list[int] = []
    current = pid
    while current > 0 and len(chain) < LINEAGE_DEPTH:
        chain.append(current)
        try:
            stat = Path(f"{proc_root}/{current}/stat").read_bytes()
            current = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


class Unobservable:
    """A host where nothing can see GPU processes: the run is judged on its exit code only, and an
    exit 0 becomes `error`/`infra` with this reason."""

    def __init__(self, host: str, gpus: Sequence[int], reason: str) -> None:
        self.use = GpuUse(None, host, tuple(gpus), unobservable=reason)

    async def start(self) -> None:
        pass

    def started(self, pgid: int) -> None:
        pass

    async def stop(self) -> GpuUse:
        return self.use


class NvmlWatch:
    """NVML on this machine, sampled in a thread of its own (driver calls block)."""

    def __init__(self, host: str, gpus: Sequence[int], *, nvml: Any = None, interval_s: float = LOCAL_INTERVAL_S,
                 container_id: str | None = None, proc_root: str = "/proc") -> None:
        self.use = GpuUse("nvml", host, tuple(gpus), interval_s)
        self.interval_s = interval_s
        self.proc_root = proc_root
        self._nvml = nvml
        self._container = container_id
        self._map = ProcessMap(proc_root)
        if container_id:
            self._map.containers[container_id] = _OURS
        self._root: int | None = None
        self._known: set[int] = set()
        self._handles: dict[int, Any] = {}
        self._initialised = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Open NVML before the entrypoint starts, so that its first moments are sampled too."""
        await asyncio.to_thread(self._open)
        if self.use.unobservable is None:
            self._thread = threading.Thread(target=self._loop, name=f"gpuwatch-{self.use.host}", daemon=True)
            self._thread.start()

    def started(self, pgid: int) -> None:
        # A container's exec announces its group in the container's PID namespace: not a host PID.
        if not self._container:
            self._root = pgid
            self._map.groups[pgid] = _OURS

    async def stop(self) -> GpuUse:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._initialised:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._nvml.nvmlShutdown)
        return self.use

    def _open(self) -> None:
        try:
            nvml = self._nvml if self._nvml is not None else load_pynvml()
        except ImportError:
            self.use.unobservable = f"{NO_DRIVER} (nvidia-ml-py is not installed)"
            return
        try:
            nvml.nvmlInit()
        except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.use.unobservable = f"{NO_DRIVER}: {_one_line(error)}"
            return
        self._nvml, self._initialised = nvml, True
        for gpu in self.use.gpus:
            try:
                self._handles[gpu] = nvml.nvmlDeviceGetHandleByIndex(gpu)
            except Exception as error:
                self.use.unobservable = f"the driver has no GPU {gpu}: {_one_line(error)}"
                return

    def _loop(self) -> None:
        while True:
            began = time.monotonic()
            self._sample()
            if self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began))):
                return

    def _sample(self) -> None:
        found: list[tuple[int, int, float | None]] = []
        for gpu, handle in self._handles.items():
            try:
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception as error:  # a sample counts only when every leased GPU answered
                self.use.note_error(f"GPU {gpu}: {error}")
                return
            for process in processes:
                used = getattr(process, "usedGpuMemory", None)
                found.append((gpu, process.pid, used / 2**20 if isinstance(used, int) else None))
        self.use.add_sample(found, self._whose)

    def _whose(self, pid: int) -> str:
        if pid in self._known:
            return OURS  # kept: a worker whose parent exited is re-parented and loses its chain
        if self._container:
            mine = self._map.job_of(pid) == _OURS
        else:
            mine = self._root is not None and (self._map.job_of(pid) == _OURS
                                               or self._root in ancestors(pid, self.proc_root))
        if mine:
            self._known.add(pid)
            return OURS
        return OTHER if Path(f"{self.proc_root}/{pid}").exists() else UNSEEN


def parse_probe_processes(text: str, host: str, gpu_of_uuid: dict[str, int], *, root: int | None,
                          container_id: str | None) -> dict[str, list[GpuProcess]]:
    """The GPU processes of :data:`REMOTE_PROBE_PROCESSES` output by whose they are: OURS (the
    probe's), OTHER, or UNSEEN (the host's /proc has no such PID, so its chain is empty)."""
    processes = ProcessMap()
    if container_id:
        processes.containers[container_id] = _OURS
    rows = parse_remote_processes(text, host, gpu_of_uuid, processes)
    lineage: dict[int, list[tuple[int, int]]] = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[0] == "lineage" and parts[1].strip().isdecimal():
            chain = [item.split(":") for item in parts[2].split()]
            lineage[int(parts[1])] = [(int(a), int(b)) for a, b, *_ in chain if a.isdecimal() and b.isdecimal()]
    found: dict[str, list[GpuProcess]] = {OURS: [], OTHER: [], UNSEEN: []}
    for row in rows:
        chain = lineage.get(row.pid, [])
        if container_id:
            mine = row.job_id == _OURS
        else:
            mine = root is not None and any(root in pair for pair in chain)
        found[OURS if mine else OTHER if chain else UNSEEN].append(row)
    return found


class SmiWatch:
    """``nvidia-smi`` on an SSH host, over its connection, from the event loop (never blocking it)."""

    def __init__(self, host: str, connection: Any, gpus: Sequence[int], *, container_id: str | None = None,
                 interval_s: float = REMOTE_INTERVAL_S) -> None:
        self.use = GpuUse("nvidia-smi", host, tuple(gpus), interval_s)
        self.connection = connection
        self.interval_s = interval_s
        self._container = container_id
        self._root: int | None = None
        self._known: set[int] = set()
        self._uuids: dict[str, int] = {}
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Learn the leased GPUs' UUIDs (the process query names GPUs by UUID), then start sampling."""
        from .sandbox.remote import HostDown

        try:
            result = await self.connection.run(UUID_QUERY, timeout=REMOTE_QUERY_TIMEOUT_S, control=True)
        except (HostDown, asyncio.TimeoutError) as error:
            self.use.unobservable = f"nvidia-smi could not be asked: {_one_line(error) or 'timed out'}"
            return
        text = result.stdout.decode(errors="replace")
        by_index = {}
        for line in text.splitlines():
            index, _, uuid = (part.strip() for part in line.partition(","))
            if index.isdecimal() and uuid.startswith("GPU-"):
                by_index[int(index)] = uuid
        if result.returncode != 0 or not by_index:
            first = next((line for line in text.splitlines() if line.strip()), f"exit {result.returncode}")
            self.use.unobservable = f"{NO_DRIVER}: nvidia-smi: {_one_line(first)}"
            return
        missing = [gpu for gpu in self.use.gpus if gpu not in by_index]
        if missing:
            self.use.unobservable = f"nvidia-smi shows no GPU {missing[0]} (it has {sorted(by_index)})"
            return
        self._uuids = {by_index[gpu]: gpu for gpu in self.use.gpus}
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"gpuwatch-{self.use.host}")

    def started(self, pgid: int) -> None:
        if not self._container:
            self._root = pgid

    async def stop(self) -> GpuUse:
        """Let the sample in flight finish (a run shorter than one round trip still gets one)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        return self.use

    async def _loop(self) -> None:
        from .sandbox.remote import HostDown

        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                result = await self.connection.run(REMOTE_PROBE_PROCESSES, timeout=REMOTE_QUERY_TIMEOUT_S, control=True)
                if result.returncode != 0:
                    self.use.note_error(f"exit {result.returncode}: {result.stderr.decode(errors='replace')}")
                else:
                    self._record(result.stdout.decode(errors="replace"))
            except (HostDown, asyncio.TimeoutError) as error:
                self.use.note_error(str(error) or "the process query timed out")
            if self._stopping.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), max(0.0, self.interval_s - (loop.time() - began)))
            if self._stopping.is_set():
                return

    def _record(self, text: str) -> None:
        found = parse_probe_processes(text, self.use.host, self._uuids, root=self._root,
                                      container_id=self._container)
        self._known.update(process.pid for process in found[OURS])
        whose = {p.pid: owner for owner, processes in found.items() for p in processes}
        rows = [(p.gpu, p.pid, p.used_mib) for processes in found.values() for p in processes]
        self.use.add_sample(rows, lambda pid: OURS if pid in self._known else whose[pid])
