"""Experiment configuration files (needs the `yaml` extra)."""

from __future__ import annotations

from pathlib import Path

import yaml


def load(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    if not isinstance(data, dict) or "samples" not in data:
        raise ValueError(f"{path}: expected a mapping with `samples`")
    return data
