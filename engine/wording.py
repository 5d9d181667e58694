"""Counts in prose: ``1 job``, ``2 jobs``. One function, so no message says "1 jobs"."""

from __future__ import annotations

def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``plural`` when adding an ``s`` is wrong)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {plural or noun + 's'}"


__all__ = ["counted"]
