"""Streaming statistics."""

from tinystats.welford import Welford

__all__ = ["Welford"]
__version__ = "0.1.0"
