"""GPU-only tests: they need an NVIDIA driver and a CUDA build of torch, so CI (no GPU) skips them.
Run them on a GPU machine with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _gpu_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
