"""GPU telemetry: NVML on the engine's machine, one `nvidia-smi -lms` stream per SSH host.

* **Local hosts** use NVML (nvidia-ml-py's ``pynvml``), initialised once, sampled at 1 Hz in a thread:
  utilisation, memory (the v2 API, which counts reserved memory correctly), temperature, power and
  the compute processes on each GPU. Host PIDs are mapped to jobs (:class:`ProcessMap`): a container's
  PID through ``/proc/<pid>/cgroup`` (the container id) and a process sandbox's through its process
  group or its working directory.
* **SSH hosts** run one long-lived ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms
  1000`` per host over the host's connection; :func:`parse_smi_line` reads its rows robustly:
  ``[N/A]``/``[Not Supported]`` become None, MIG rows and a header are skipped, and a stream cut
  mid-line loses only that line (an unterminated row is never parsed). The stream is restarted with
  backoff when it ends.
* **No driver is a state**: a host without NVML/``nvidia-smi`` or whose driver is not loaded reports
  ``no NVIDIA driver`` (shown to the user in ``hosts.inventory_json``), it never raises.
* Samples go to the store's ``gpu_samples`` in one multi-row insert per flush; rows older than
  ``retention_s`` are deleted. A host with no sample for ``stale_after_s`` is marked ``stale`` in
  ``hosts``, and ``up`` again when samples resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

QUERY_FIELDS = "index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
SMI_STREAM = f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits -lms 1000"
NO_DRIVER = "no NVIDIA driver"
_NOT_A_VALUE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|"
                          r"Requested functionality has been deprecated)\]?$", re.I)
_DRIVER_FAILED = re.compile(r"(NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|"
                            r"No devices were found|command not found|not found|No such file)", re.I)
_CONTAINER_ID = re.compile(r"(?:docker[-/]|/)([0-9a-f]{64})(?:\.scope)?\b")


@dataclass(frozen=True)
class GpuSample:
    host: str
    gpu: int
    ts: float
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    host: str
    gpu: int
    pid: int
    used_mib: float | None
    job_id: int | None = None


def _value(text: str) -> float | None:
    text = text.strip()
    if not text or _NOT_A_VALUE.match(text):
        return None
    text = text.split()[0]  # "78.81 W" when a caller forgot nounits
    try:
        return float(text)
    except ValueError:
        return None


def parse_smi_line(line: str, host: str, ts: float | None = None) -> GpuSample | None:
    """One row of the query stream, or None for a header, MIG row, error text or malformed row."""
    parts = [part.strip() for part in line.strip().split(",")]
    if len(parts) != 7:
        return None
    index, uuid = parts[0], parts[1]
    if not index.isdecimal() or uuid.upper().startswith("MIG-"):
        return None  # a header ("index"), a MIG instance row, or garbage
    if not uuid.startswith("GPU-") and not _NOT_A_VALUE.match(uuid):
        return None
    return GpuSample(
        host=host, gpu=int(index), ts=time.time() if ts is None else ts,
        util_pct=_value(parts[2]), mem_used_mib=_value(parts[3]), mem_total_mib=_value(parts[4]),
        temp_c=_value(parts[5]), power_w=_value(parts[6]), uuid=uuid if uuid.startswith("GPU-") else None,
    )


class SmiStreamParser:
    """Assembles chunks of the stream into rows; keeps only complete lines (a cut line is lost)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._buffer = b""
        self.errors: list[str] = []
        self.skipped = 0

    def feed(self, chunk: bytes, ts: float | None = None) -> list[GpuSample]:
        self._buffer += chunk
        if b"\n" not in self._buffer:
            if len(self._buffer) > 65536:  # no newline in 64 KiB: not our stream
                self._buffer = b""
            return []
        *lines, self._buffer = self._buffer.split(b"\n")
        samples = []
        for raw in lines:
            text = raw.decode(errors="replace").strip()
            if not text:
                continue
            sample = parse_smi_line(text, self.host, ts)
            if sample is None:
                self.skipped += 1
                if _DRIVER_FAILED.search(text):
                    self.errors.append(text[:300])
            else:
                samples.append(sample)
        return samples

    def cut(self) -> int:
        """End of stream: drop an unterminated last line; returns how many bytes were dropped."""
        dropped, self._buffer = len(self._buffer), b""
        return dropped


# ------------------------------------------------------------------------------------- process map
class ProcessMap:
    """Which job a host PID belongs to: by container id, process group, or working directory.

    Work dirs and container ids are unique across hosts (an SSH host's work dirs are the engine's
    run folder mapped under its own data dir, and the map holds both names), so one map serves the
    local host and every SSH host alike."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.containers: dict[str, int] = {}  # container id -> job id
        self.groups: dict[int, int] = {}  # pgid -> job id (local processes only)
        self.workdirs: dict[str, int] = {}  # work dir -> job id

    def job_of(self, pid: int) -> int | None:
        """A local PID, through this machine's /proc."""
        root = self.proc_root
        containers: list[str] = []
        with contextlib.suppress(OSError):
            containers = [m.group(1) for m in _CONTAINER_ID.finditer(Path(f"{root}/{pid}/cgroup").read_text())]
        pgid = None
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"{root}/{pid}/stat").read_bytes()
            pgid = int(stat[stat.rfind(b")") + 2 :].split()[2])
        cwd = None
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"{root}/{pid}/cwd")
        return self.match(containers, pgid, cwd)

    def match(self, containers: list[str], pgid: int | None, cwd: str | None) -> int | None:
        """The job of a process known by its container ids, process group and working directory."""
        for container in containers:
            if container in self.containers:
                return self.containers[container]
        if pgid is not None and pgid in self.groups:
            return self.groups[pgid]
        if cwd:
            for workdir, job_id in self.workdirs.items():
                if cwd == workdir or cwd.startswith(workdir.rstrip("/") + "/"):
                    return job_id
        return None


# One line per GPU process on a remote host: "<gpu uuid>|<pid>|<MiB>|<container id>|<cwd>". The
# facts ProcessMap needs are read from the host's /proc in the same round trip (cwd may be empty
# where /proc/<pid>/cwd is not readable; the container id is the first 64-hex id of its cgroup).
REMOTE_PROCESSES = (
    "nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2>/dev/null | "
    "while IFS=', ' read -r uuid pid mem rest; do "
    "ctr=$(grep -o -m1 '[0-9a-f]\\{64\\}' /proc/$pid/cgroup 2>/dev/null); "
    "cwd=$(readlink /proc/$pid/cwd 2>/dev/null); "
    'printf \'%s|%s|%s|%s|%s\\n\' "$uuid" "$pid" "$mem" "$ctr" "$cwd"; done'
)


def parse_remote_processes(text: str, host: str, gpu_of_uuid: dict[str, int],
                           processes: ProcessMap | None) -> list[GpuProcess]:
    """The rows of :data:`REMOTE_PROCESSES`; rows for GPUs not in `gpu_of_uuid` or with no PID are skipped."""
    found = []
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[1].strip().isdecimal() or parts[0].strip() not in gpu_of_uuid:
            continue
        uuid, pid, mem, container, cwd = (p.strip() for p in parts)
        job = processes.match([container] if container else [], None, cwd or None) if processes else None
        found.append(GpuProcess(host, gpu_of_uuid[uuid], int(pid), _value(mem), job))
    return found


# ----------------------------------------------------------------------------------------- sink
@dataclass
class HostTelemetry:
    state: str = "starting"  # starting | ok | no NVIDIA driver | stale | error: ...
    last_sample: float | None = None
    samples: int = 0
    processes: list[GpuProcess] = field(default_factory=list)


class TelemetrySink:
    """Buffers samples and writes them to the store; marks hosts stale; bounded retention."""

    def __init__(self, writer: Any, run_id: str, *, retention_s: float = 3600.0, stale_after_s: float = 5.0,
                 on_state: Callable[[str, str], None] | None = None) -> None:
        self.writer = writer
        self.run_id = run_id
        self.retention_s = retention_s
        self.stale_after_s = stale_after_s
        self.on_state = on_state
        self.hosts: dict[str, HostTelemetry] = {}
        self._buffer: list[GpuSample] = []
        self._lock = threading.Lock()  # NVML threads add samples too
        self._task: asyncio.Task[None] | None = None
        self._last_prune = 0.0
        self.written = 0
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._loop_thread = threading.get_ident()

    def host(self, name: str) -> HostTelemetry:
        return self.hosts.setdefault(name, HostTelemetry())

    def add(self, samples: list[GpuSample]) -> None:
        if not samples:
            return
        with self._lock:
            self._buffer.extend(samples)
            for sample in samples:
                info = self.host(sample.host)
                info.last_sample = sample.ts
                info.samples += 1

    def set_state(self, host: str, state: str) -> None:
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self.set_state, host, state)  # from an NVML thread
            return
        info = self.host(host)
        if info.state == state:
            return
        info.state = state
        if self.on_state is not None:
            self.on_state(host, state)

    def flush(self) -> int:
        with self._lock:
            batch, self._buffer = self._buffer, []
        for start in range(0, len(batch), 100):
            rows = batch[start : start + 100]
            marks = ", ".join("(?, ?, ?, ?, ?, ?, ?, ?)" for _ in rows)
            params: list[Any] = []
            for s in rows:
                params += [s.host, s.gpu, s.ts, s.util_pct, s.mem_used_mib, s.mem_total_mib, s.power_w, s.temp_c]
            self.writer.execute(
                "INSERT INTO gpu_samples (host, gpu, ts, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c)"
                f" VALUES {marks}", params)
        self.written += len(batch)
        now = time.time()
        if now - self._last_prune > 60:
            self._last_prune = now
            self.writer.execute("DELETE FROM gpu_samples WHERE ts < ?", (now - self.retention_s,))
        for name, info in self.hosts.items():
            if info.state in ("ok", "stale") and info.last_sample is not None:
                self.set_state(name, "stale" if now - info.last_sample > self.stale_after_s else "ok")
        return len(batch)

    async def run(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.flush()


# ------------------------------------------------------------------------------------- NVML (local)
FAKE_PYNVML_ENV = "RESENV_FAKE_PYNVML"
_fake_pynvml: dict[str, Any] = {}


def load_pynvml() -> Any:
    """nvidia-ml-py's ``pynvml`` (ImportError without it), or a fake driver module that a test names.

    Integration tests drive the real engine on machines without a GPU; they point
    ``RESENV_FAKE_PYNVML`` at a file that speaks pynvml's calls (tests/fakes/nvml_driver.py). Nothing
    but a test sets that variable.
    """
    fake = os.environ.get(FAKE_PYNVML_ENV)
    if not fake:
        import pynvml  # nvidia-ml-py

        return pynvml
    if fake not in _fake_pynvml:
        spec = importlib.util.spec_from_file_location("resenv_fake_pynvml", fake)
        if spec is None or spec.loader is None:
            raise ImportError(f"{FAKE_PYNVML_ENV}={fake}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _fake_pynvml[fake] = module
    return _fake_pynvml[fake]


class NvmlSampler:
    """Samples the local GPUs through NVML at `interval_s` in a daemon thread (see module docstring)."""

    def __init__(self, host: str, sink: TelemetrySink, *, gpus: list[int] | None = None, interval_s: float = 1.0,
                 processes: ProcessMap | None = None, nvml: Any = None) -> None:
        self.host = host
        self.sink = sink
        self.gpus = gpus
        self.interval_s = interval_s
        self.process_map = processes
        self._nvml = nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = "starting"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"nvml-{self.host}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _set_state(self, state: str) -> None:
        self.state = state
        loop_state = self.sink.set_state
        loop_state(self.host, state)

    def _load(self) -> Any:
        return self._nvml if self._nvml is not None else load_pynvml()

    def _main(self) -> None:
        try:
            nvml = self._load()
        except ImportError:
            self._set_state(f"{NO_DRIVER} (nvidia-ml-py is not installed)")
            return
        try:
            nvml.nvmlInit()
        except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self._set_state(f"{NO_DRIVER}: {error}")
            return
        try:
            count = nvml.nvmlDeviceGetCount()
            indices = [i for i in range(count) if self.gpus is None or i in self.gpus]
            handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
            self._set_state("ok")
            while not self._stop.is_set():
                started = time.monotonic()
                self.sample_once(nvml, handles)
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        except Exception as error:
            log.warning("NVML sampling on %s stopped: %s", self.host, error)
            self._set_state(f"error: {error}")
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()

    def sample_once(self, nvml: Any, handles: dict[int, Any]) -> list[GpuSample]:
        now = time.time()
        samples: list[GpuSample] = []
        processes: list[GpuProcess] = []
        for index, handle in handles.items():
            util = _nvml_call(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            memory = _nvml_call(lambda: _memory_v2(nvml, handle))
            temp = _nvml_call(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
            power_mw = _nvml_call(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
            samples.append(GpuSample(
                host=self.host, gpu=index, ts=now, util_pct=util,
                mem_used_mib=memory.used / 2**20 if memory is not None else None,
                mem_total_mib=memory.total / 2**20 if memory is not None else None,
                temp_c=temp, power_w=power_mw / 1000.0 if power_mw is not None else None,
            ))
            procs = _nvml_call(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                job = self.process_map.job_of(proc.pid) if self.process_map is not None else None
                processes.append(GpuProcess(self.host, index, proc.pid,
                                            used / 2**20 if isinstance(used, int) else None, job))
        self.sink.add(samples)
        self.sink.host(self.host).processes = processes
        return samples


def _memory_v2(nvml: Any, handle: Any) -> Any:
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    except TypeError:  # an old nvidia-ml-py without the version argument
        return nvml.nvmlDeviceGetMemoryInfo(handle)


def _nvml_call(fn: Callable[[], Any]) -> Any:
    """A value, or None where NVML says not supported / no permission / GPU lost."""
    try:
        return fn()
    except Exception:
        return None


# ------------------------------------------------------------------------------- nvidia-smi (SSH)
class SmiStreamSampler:
    """One long-lived `nvidia-smi -lms` stream over the host's SSH connection, restarted with backoff."""

    def __init__(self, host: str, connection: Any, sink: TelemetrySink, *, command: str = SMI_STREAM,
                 backoff_start_s: float = 1.0, backoff_max_s: float = 60.0, processes: ProcessMap | None = None,
                 process_interval_s: float = 2.0) -> None:
        self.host = host
        self.connection = connection
        self.sink = sink
        self.command = command
        self.backoff_start_s = backoff_start_s
        self.backoff_max_s = backoff_max_s
        self.process_map = processes
        self.process_interval_s = process_interval_s
        self.gpu_of_uuid: dict[str, int] = {}  # learnt from the stream's rows
        self._tasks: list[asyncio.Task[None]] = []
        self.restarts = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._main(), name=f"smi-{self.host}")]
        if self.process_map is not None:
            self._tasks.append(loop.create_task(self._processes_loop(), name=f"smi-procs-{self.host}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _processes_loop(self) -> None:
        """GPU processes every few seconds in one short round trip, mapped to jobs by their host facts."""
        from ..sandbox.remote import HostDown

        while True:
            await asyncio.sleep(self.process_interval_s)
            if not self.gpu_of_uuid or not self.connection.up:
                continue
            try:
                result = await self.connection.run(REMOTE_PROCESSES, timeout=10, control=True)
            except (HostDown, asyncio.TimeoutError):
                continue
            self.sink.host(self.host).processes = parse_remote_processes(
                result.stdout.decode(errors="replace"), self.host, self.gpu_of_uuid, self.process_map)

    async def _main(self) -> None:
        delay = self.backoff_start_s
        while True:
            got = await self._stream_once()
            self.restarts += 1
            delay = self.backoff_start_s if got else min(delay * 2, self.backoff_max_s)
            await asyncio.sleep(delay)

    async def _stream_once(self) -> bool:
        """Run the stream until it ends; True if it delivered samples."""
        import asyncssh

        from ..sandbox.remote import HostDown

        parser = SmiStreamParser(self.host)
        delivered = False
        try:
            if not self.connection.up:
                await self.connection.wait_up(timeout=None)
            async with self.connection.channel() as conn:
                proc = await conn.create_process(f"exec {self.command}", encoding=None, stderr=asyncssh.STDOUT)
                try:
                    proc.stdin.write_eof()
                    while True:
                        chunk = await proc.stdout.read(65536)
                        if not chunk:
                            break
                        samples = parser.feed(chunk)
                        if samples:
                            delivered = True
                            self.gpu_of_uuid.update((s.uuid, s.gpu) for s in samples if s.uuid)
                            self.sink.add(samples)
                            self.sink.set_state(self.host, "ok")
                    parser.cut()
                    await asyncio.wait_for(proc.wait_closed(), 5)
                    status = proc.exit_status
                finally:
                    proc.close()
        except (HostDown, asyncssh.Error, OSError, asyncio.TimeoutError) as error:
            if not delivered:
                self.sink.set_state(self.host, f"error: {error}")
            return delivered
        if not delivered:
            if status == 127 or parser.errors:
                self.sink.set_state(self.host, f"{NO_DRIVER}" + (f": {parser.errors[0]}" if parser.errors else ""))
            else:
                self.sink.set_state(self.host, f"error: nvidia-smi exited {status}")
        return delivered
