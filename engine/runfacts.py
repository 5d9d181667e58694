"""What a run's stored row says about it: whether a live engine owns it, and which tiers it scores.

The scheduler, the controls, the run lock, the command line and the read side all ask. Kept apart
from the scheduler so that the read side depends on the store and these facts, never on the engine
that runs. (The dashboard keeps its own copy of `engine_alive` and `STALE_AFTER_S` in tui/data.py,
to start without importing the engine; tests/tui/test_data.py checks that both agree.)
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping
from typing import Any

STALE_AFTER_S = 15.0
"""A run whose engine has not written a heartbeat for this long is not owned by a live engine."""
TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")


def engine_alive(run: dict[str, Any]) -> bool:
    """A run is owned by a live engine if its heartbeat is fresh and (when local) its PID exists."""
    if run["heartbeat_at"] is None or time.time() - run["heartbeat_at"] > STALE_AFTER_S:
        return False
    if run["engine_host"] == platform.node() and run["engine_pid"]:
        try:
            os.kill(run["engine_pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return run["state"] in {"running", "paused"}


def run_tiers(run: Mapping[str, Any]) -> tuple[str, ...]:
    """The tiers a run scores (runs from before `--tiers` score them all)."""
    try:
        options = json.loads(run.get("options_json") or "{}")
    except ValueError:
        options = {}
    tiers = options.get("tiers", TIERS) if isinstance(options, dict) else TIERS
    return tuple(tier for tier in TIERS if isinstance(tiers, (list, tuple)) and tier in tiers)


def pid_exists(pid: int) -> bool:
    """Whether a process with this PID exists on this machine (one we may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
