"""Default locations: the DB and the runs' data under the user's data directory (XDG)."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_path


def default_home() -> Path:
    return Path(os.environ.get("RESENV_HOME") or user_data_path("resenv"))


def default_db() -> Path:
    return Path(os.environ.get("RESENV_DB") or default_home() / "resenv.db")


def default_data_dir() -> Path:
    return Path(os.environ.get("RESENV_DATA_DIR") or default_home() / "runs")
