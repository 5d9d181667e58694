"""What the host's NVIDIA driver supports: the driver version and the newest CUDA it runs.

C2 compares a framework's CUDA build with this; a host with no driver is a state (`None`), not an error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")
DRIVER_VERSION = re.compile(r"Driver Version\s*:\s*([0-9][0-9.]*)")


@dataclass(frozen=True)
class DriverInfo:
    driver_version: str | None
    cuda_version: str | None


def parse_smi_query(text: str) -> DriverInfo:
    """Parse `nvidia-smi -q` (or its banner), whose spacing differs between driver releases."""
    cuda = CUDA_VERSION.search(text)
    driver = DRIVER_VERSION.search(text)
    return DriverInfo(driver.group(1) if driver else None, cuda.group(1) if cuda else None)


def local_driver() -> DriverInfo | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    info = parse_smi_query(out)
    return info if info.driver_version or info.cuda_version else None


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    parts = re.findall(r"\d+", version)
    return tuple(int(part) for part in parts[:2]) if parts else None


def cuda_supported(framework_cuda: str | None, driver_cuda: str | None) -> bool | None:
    """Whether a framework built for `framework_cuda` can run on a driver for `driver_cuda`.

    Drivers run any CUDA up to their own major.minor (minor-version compatibility inside a major
    release is not assumed: a newer minor may need PTX JIT or fail). None when either is unknown.
    """
    built, driver = version_tuple(framework_cuda), version_tuple(driver_cuda)
    if built is None or driver is None:
        return None
    return built <= driver
