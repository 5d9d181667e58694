"""FAKES of the NVIDIA driver as nvidia-ml-py's ``pynvml`` shows it, for tests (this machine has no GPU).

* :func:`fake_pynvml`: an in-memory stand-in with pynvml's call names and shapes, handed to a sampler
  or watcher directly (``nvml=``). Its ``processes`` dict (GPU index -> PIDs) may be changed while it
  is in use, as processes come and go on a real GPU.
* :class:`FakeDriverDir`: the state directory of the file-backed fake driver ``nvml_driver.py``,
  which the real engine (a subprocess) loads in place of ``pynvml`` through ``engine_env()``. A test
  repo's entrypoint "holds a CUDA context" by running :meth:`FakeDriverDir.hold_context`'s code.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

DRIVER_MODULE = Path(__file__).resolve().with_name("nvml_driver.py")


class FakeNVMLError(Exception):
    pass


def fake_pynvml(*, init_error: Exception | None = None, gpus: int = 2, power_supported: bool = True,
                processes: dict[int, list[int]] | None = None, used_mib: float = 512,
                processes_error: Exception | None = None) -> SimpleNamespace:
    """A stand-in for nvidia-ml-py's `pynvml` (named a fake on purpose): same call names and shapes."""
    calls: dict[str, int] = {}
    running = processes if processes is not None else {}

    def count(name):
        calls[name] = calls.get(name, 0) + 1

    def init():
        count("init")
        if init_error:
            raise init_error

    def memory(handle, version=None):
        assert version == "v2", "the sampler must use the memory v2 API"
        return SimpleNamespace(total=80 * 2**30, used=(handle + 1) * 2**30, free=0, reserved=2**20)

    def power(handle):
        if not power_supported:
            raise FakeNVMLError("Not Supported")
        return 250_500 + handle

    def handle_by_index(index):
        if not 0 <= index < gpus:
            raise FakeNVMLError("Invalid Argument")
        return index

    def compute_processes(handle):
        count("processes")
        if processes_error:
            raise processes_error
        return [SimpleNamespace(pid=pid, usedGpuMemory=int(used_mib * 2**20)) for pid in running.get(handle, [])]

    return SimpleNamespace(
        calls=calls, nvmlInit=init, nvmlShutdown=lambda: count("shutdown"), nvmlDeviceGetCount=lambda: gpus,
        nvmlDeviceGetHandleByIndex=handle_by_index, nvmlMemory_v2="v2", NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=10 * (h + 1), memory=0),
        nvmlDeviceGetMemoryInfo=memory, nvmlDeviceGetTemperature=lambda h, sensor: 40 + h,
        nvmlDeviceGetPowerUsage=power, nvmlDeviceGetComputeRunningProcesses=compute_processes,
    )


class FakeDriverDir:
    """The state of the file-backed fake driver: how many GPUs, and which live PIDs hold contexts."""

    def __init__(self, root: Path, gpus: int | None = 2) -> None:
        self.root = Path(root)
        (self.root / "contexts").mkdir(parents=True, exist_ok=True)
        # Writable by every uid, as /dev/nvidia* are: a sandbox's unprivileged uid creates contexts too.
        (self.root / "contexts").chmod(0o1777)
        self.root.chmod(0o755)
        if gpus is not None:  # None: a "machine" whose driver is not loaded
            (self.root / "gpus").write_text(f"{gpus}\n")

    def engine_env(self) -> dict[str, str]:
        """Environment for an engine process that must see this fake driver instead of NVML."""
        return {"RESENV_FAKE_PYNVML": str(DRIVER_MODULE), "RESENV_FAKE_NVML_DIR": str(self.root)}

    def register(self, pid: int, gpu: int, mib: float = 512) -> None:
        """The process `pid` holds a context on `gpu` (for tests that start processes themselves)."""
        with (self.root / "contexts" / str(pid)).open("a") as handle:
            handle.write(f"{gpu} {mib}\n")

    def hold_context(self, mib: float = 512) -> str:
        """Python code for a test repo's entrypoint: hold a "CUDA context" on the GPU this process
        would use. As with real CUDA, that is the LOCAL_RANK-th of CUDA_VISIBLE_DEVICES, and a process
        that sees no GPU cannot create one."""
        return (
            "import os as _os\n"
            "_visible = [int(i) for i in _os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',') if i.strip()]\n"
            "if _visible:\n"
            # The pid as the real driver reports it is the engine's view of it: inside a sandbox's pid
            # namespace the process knows only its own number there, so it names the namespace too.
            "    _ns = _os.readlink('/proc/self/ns/pid').split('[')[-1].rstrip(']')\n"
            f"    with open({str(self.root / 'contexts')!r} + f'/ns-{{_ns}}-{{_os.getpid()}}', 'a') as _ctx:\n"
            f"        _ctx.write(f\"{{_visible[int(_os.environ.get('LOCAL_RANK', '0'))]}} {mib}\\n\")\n"
        )
