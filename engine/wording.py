"""Counts, durations and folded lines in prose: ``1 job``, ``2 jobs``, ``8m05s``. One function each, so no
message says "1 jobs", every line of a run's progress reads a time the same way, and every long line
folds to 80 columns the same way."""

from __future__ import annotations

import textwrap

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


def fold(text: str, width: int = 80, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` characters for an 80-column terminal: broken between
    words, later lines under `indent` plus two spaces; a word longer than the line (a path, a URL)
    is never split, so that it can still be copied whole."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


__all__ = ["counted", "duration", "fold"]
