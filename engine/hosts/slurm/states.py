"""Slurm job states and exit codes, decoded into what resenv means by them.

Slurm reports a finished job's exit in three shapes, depending on the command and the version:
``squeue -O exit_code`` and ``squeue --json`` up to 22.05 give the raw wait status (``256`` is exit 1,
``9`` is SIGKILL); ``scontrol``/``sacct`` give ``"code:signal"``; ``squeue --json`` from 23.02 gives an
object with ``return_code`` and ``signal``. :func:`decode_exit` reads all three, so a signal is never
mistaken for an exit code (``9`` is SIGKILL, not ``exit 9``).

Outcomes (:func:`outcome_of`): a job that ran to its end (``COMPLETED``/``FAILED``) is the command's
own result; ``TIMEOUT``/``DEADLINE`` is the command's ``fail/timeout``; ``PREEMPTED``, ``NODE_FAIL``,
``BOOT_FAIL`` and ``REVOKED`` are the cluster's fault (``error/infra``, retried by the engine's infra
policy); ``OUT_OF_MEMORY`` is the command's ``oom``; ``CANCELLED`` is resenv's kill when resenv asked,
else infrastructure (an operator or an admin cancelled it).
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass
from typing import Any

PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                     "SPECIAL_EXIT"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"})
SUSPENDED = frozenset({"SUSPENDED", "STOPPED"})
FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})
INFRA = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "REVOKED"})
TIMEOUT = frozenset({"TIMEOUT", "DEADLINE"})


def base_state(state: str | list[str] | None) -> str:
    """``"CANCELLED by 0"`` → ``CANCELLED``; a 23.02+ JSON list (``["PENDING", "REQUEUED"]``) → its first."""
    if isinstance(state, list):
        state = state[0] if state else ""
    return (state or "").split()[0].rstrip("+").upper() if state else ""


def phase_of(state: str) -> str:
    """``pending`` | ``running`` | ``suspended`` | ``finished`` | ``unknown``."""
    state = base_state(state)
    if state in PENDING:
        return "pending"
    if state in RUNNING:
        return "running"
    if state in SUSPENDED:
        return "suspended"
    if state in FINISHED:
        return "finished"
    return "unknown"


@dataclass(frozen=True)
class Exit:
    """A decoded exit: ``code`` when the process exited, ``signal`` when a signal ended it."""

    code: int | None
    signal: int | None

    @property
    def returncode(self) -> int | None:
        """The sandbox convention: the exit code, or -N for signal N."""
        if self.signal:
            return -self.signal
        return self.code

    def __str__(self) -> str:
        if self.signal:
            try:
                return f"signal {_signal.Signals(self.signal).name}"
            except ValueError:
                return f"signal {self.signal}"
        return f"exit {self.code}"


def decode_wait_status(status: int) -> Exit:
    """A raw wait(2) status as ``squeue`` gives it: low 7 bits a signal, else the exit code in bits 8–15."""
    sig = status & 0x7F
    if sig:
        return Exit(None, sig)
    return Exit((status >> 8) & 0xFF, None)


def decode_exit(value: Any) -> Exit | None:
    """Any of Slurm's exit shapes (see the module docstring); None when there is none to decode."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return decode_wait_status(value)
    if isinstance(value, str):
        text = value.strip()
        if ":" in text:  # scontrol/sacct "code:signal"
            code, _, sig = text.partition(":")
            try:
                code_n, sig_n = int(code), int(sig)
            except ValueError:
                return None
            return Exit(None, sig_n) if sig_n else Exit(code_n, None)
        try:
            return decode_wait_status(int(text))
        except ValueError:
            return None
    if isinstance(value, dict):  # 23.02+: {"status": [...], "return_code": {"number": N, "set": true}, "signal": {...}}
        sig = _number(value.get("signal", {}).get("id") if isinstance(value.get("signal"), dict) else value.get("signal"))
        if sig:
            return Exit(None, sig)
        code = _number(value.get("return_code"))
        return Exit(code, None) if code is not None else None
    return None


def _number(value: Any) -> int | None:
    if isinstance(value, dict):  # {"set": true, "infinite": false, "number": 3}
        if not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Outcome:
    """What a finished Slurm job means to resenv when the command's own exit status file is missing."""

    kind: str  # result | timeout | infra | oom | cancelled
    reason: str


def outcome_of(state: str, cancelled_by_us: bool = False) -> Outcome:
    """Map a finished job's state (see the module docstring)."""
    state = base_state(state)
    if state in TIMEOUT:
        return Outcome("timeout", f"slurm {state}: the job's time limit")
    if state in INFRA:
        return Outcome("infra", f"slurm {state}")
    if state == "OUT_OF_MEMORY":
        return Outcome("oom", "slurm OUT_OF_MEMORY: the job's memory limit")
    if state == "CANCELLED":
        return Outcome("cancelled" if cancelled_by_us else "infra",
                       "slurm CANCELLED" + ("" if cancelled_by_us else " (not by resenv)"))
    if state in ("COMPLETED", "FAILED"):
        return Outcome("result", f"slurm {state}")
    return Outcome("infra", f"slurm {state or 'UNKNOWN'}")
