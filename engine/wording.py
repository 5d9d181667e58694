"""Counts and durations in prose: ``1 job``, ``2 jobs``, ``8m05s``. One function each, so no message
says "1 jobs" and every line of a run's progress reads a time the same way."""

from __future__ import annotations

def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``plural`` when adding an ``s`` is wrong)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {plural or noun + 's'}"


def duration(seconds: float) -> str:
    """A length of time as a person reads it: ``42s``, ``8m05s``, ``2h03m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


__all__ = ["counted", "duration"]
