"""A FAKE NVIDIA driver behind nvidia-ml-py's ``pynvml`` API, for tests on machines without a GPU.

The engine loads this file in place of ``pynvml`` only when ``RESENV_FAKE_PYNVML`` names it (see
``resenv.engine.hosts.telemetry.load_pynvml``); nothing else ever selects it. Its state is a directory,
``RESENV_FAKE_NVML_DIR``:

* ``gpus`` holds the number of GPUs; without it ``nvmlInit`` fails as NVML does without a driver.
* ``contexts/<pid>``: the process ``pid`` "holds a CUDA context", one line ``<gpu index> <MiB>`` per
  GPU. A test's entrypoint writes its own file (see :meth:`tests.fakes.nvml.FakeDriverDir.hold_context`),
  as a real CUDA program creates a context; one that runs on the CPU writes nothing. A process in a pid
  namespace (a sandbox) names its file ``ns-<namespace inode>-<pid there>``, and is listed by its pid
  in this process's view, as the real driver lists it.

As the real driver does, only processes that are alive are listed (a context dies with its process),
and ``nvmlDeviceGetComputeRunningProcesses`` returns objects with ``pid`` and ``usedGpuMemory`` in
bytes. Only the standard library is used: the engine imports this file by path.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

DIR_ENV = "RESENV_FAKE_NVML_DIR"
NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = "v2"
_NOT_AVAILABLE = 0xFFFFFFFF  # what the real struct holds for "no GPU/compute instance" (not MIG)


class NVMLError(Exception):
    """Stands for pynvml's NVMLError family (the real ones print the driver's message, as here)."""


def _root() -> Path:
    return Path(os.environ.get(DIR_ENV, "/nonexistent-fake-nvml"))


def _count() -> int:
    try:
        return int((_root() / "gpus").read_text().strip())
    except (OSError, ValueError):
        raise NVMLError("Driver Not Loaded") from None


def alive(pid: int) -> bool:
    """Alive and not a zombie: the driver drops a context when its process exits, before it is reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def _host_pid(namespace: str, inner: int) -> int | None:
    """The pid, as this process sees it, of the process numbered `inner` in pid namespace `namespace`."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != f"pid:[{namespace}]":
                continue
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:") and line.split()[-1] == str(inner):
                return int(name)
    return None


def live_contexts(root: Path) -> list[tuple[int, int, float]]:
    """(pid, gpu, MiB) of every registered context whose process is alive."""
    found = []
    for entry in sorted((root / "contexts").glob("*")):
        pid: int | None = int(entry.name) if entry.name.isdigit() else None
        if entry.name.startswith("ns-") and len(parts := entry.name.split("-")) == 3 and parts[2].isdigit():
            pid = _host_pid(parts[1], int(parts[2]))
        if pid is None or not alive(pid):
            continue
        try:
            text = entry.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                found.append((pid, int(parts[0]), float(parts[1])))
    return found


def nvmlInit() -> None:
    _count()


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return _count()


def nvmlDeviceGetHandleByIndex(index: int) -> SimpleNamespace:
    if not 0 <= index < _count():
        raise NVMLError("Invalid Argument")
    return SimpleNamespace(index=index)


def nvmlDeviceGetUUID(handle: SimpleNamespace) -> str:
    return f"GPU-fa4e0000-0000-0000-0000-{handle.index:012x}"


def nvmlDeviceGetComputeRunningProcesses(handle: SimpleNamespace) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=pid, usedGpuMemory=int(mib * 2**20), gpuInstanceId=_NOT_AVAILABLE,
                            computeInstanceId=_NOT_AVAILABLE)
            for pid, gpu, mib in live_contexts(_root()) if gpu == handle.index]


def nvmlDeviceGetUtilizationRates(handle: SimpleNamespace) -> SimpleNamespace:
    busy = any(gpu == handle.index for _, gpu, _ in live_contexts(_root()))
    return SimpleNamespace(gpu=100 if busy else 0, memory=0)


def nvmlDeviceGetMemoryInfo(handle: SimpleNamespace, version: object = None) -> SimpleNamespace:
    used = sum(mib for _, gpu, mib in live_contexts(_root()) if gpu == handle.index)
    return SimpleNamespace(total=80 * 2**30, used=int(used * 2**20), free=int((80 * 1024 - used) * 2**20),
                           reserved=0)


def nvmlDeviceGetTemperature(handle: SimpleNamespace, sensor: int) -> int:
    return 40


def nvmlDeviceGetPowerUsage(handle: SimpleNamespace) -> int:
    return 100_000  # milliwatts
