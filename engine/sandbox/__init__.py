"""Sandboxes: how one job is isolated on a host."""
