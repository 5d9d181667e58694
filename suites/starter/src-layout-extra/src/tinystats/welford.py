"""Welford's online mean and variance."""

from __future__ import annotations

import math


class Welford:
    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0

    def push(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (value - self.mean)

    @property
    def variance(self) -> float:
        """The sample variance (n - 1 in the denominator)."""
        return self._m2 / (self.count - 1) if self.count > 1 else math.nan
