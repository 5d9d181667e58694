"""How output the store left out is told (`resenv show`, the dashboard); no imports, so the dashboard
can use it without loading the engine."""

from __future__ import annotations


def human_bytes(count: int) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def omitted_text(lines: int, nbytes: int, where: str = "the raw log") -> str:
    """``… 12,345 lines (13.0 MB) only in the raw log``."""
    return f"… {lines:,} line{'s' if lines != 1 else ''} ({human_bytes(nbytes)}) only in {where}"
