"""Shared helpers of the perf scripts (not a test module: pytest never collects it).

Each script prints its figures and writes `tests/perf/results/<name>.json`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PERF_DIR = Path(__file__).resolve().parent
REPO_ROOT = PERF_DIR.parent.parent
RESULTS = PERF_DIR / "results"

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _use_source_tree() -> str | None:
    """RESENV_PERF_SRC=<dir>: import `resenv.*` from another checkout (e.g. `git archive HEAD`
    unpacked in /tmp) instead of the editable install, to measure a fixed engine while the working
    tree changes. The editable finder sits after PathFinder in sys.meta_path, so a shim package on
    sys.path wins."""
    src = os.environ.get("RESENV_PERF_SRC")
    if not src:
        return None
    import tempfile

    shim = Path(tempfile.mkdtemp(prefix="resenv-perf-shim-")) / "resenv"
    shim.mkdir()
    (shim / "__init__.py").write_text("")
    for part in ("engine", "probes", "tui"):
        if (Path(src) / part).is_dir():
            (shim / part).symlink_to(Path(src).resolve() / part)
    sys.path.insert(0, str(shim.parent))
    return src


SOURCE_TREE = _use_source_tree()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank-interpolated percentile, q in [0, 100]; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": round(statistics.median(values) * scale, digits),
        "p90": round(percentile(values, 90) * scale, digits),
        "p99": round(percentile(values, 99) * scale, digits),
        "min": round(min(values) * scale, digits),
        "max": round(max(values) * scale, digits),
        "mean": round(statistics.fmean(values) * scale, digits),
    }


def machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "engine"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "?", None
    import sqlite3
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "commit": commit,
        "engine_dirty": dirty,
        "engine_source": SOURCE_TREE or str(REPO_ROOT / "engine"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # Other work on the machine skews every figure: the 1/5/15-minute load at the end of the run.
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"name": name, "machine": machine(), **result}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nresult written to {path.relative_to(REPO_ROOT)}")
    return path


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size from /proc (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def hwm_bytes(pid: int | str = "self") -> int:
    """Peak RSS the kernel saw (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def clean_up(root: Path, keep: bool) -> None:
    """Remove a benchmark's scratch tree, or say where it is when asked to keep it."""
    if keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
