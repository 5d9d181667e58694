"""Attacks on resenv itself: hostile agents and environments that try to exhaust or escape the engine."""
