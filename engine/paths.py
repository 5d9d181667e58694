"""Default locations: the DB and the runs' data under the user's data directory (XDG).

Every path the engine is given is made absolute once, where it comes in (a CLI option, an
environment variable): jobs run with other working directories, and a run's paths are stored and
read back by later processes (`run --resume`, the dashboard) started from anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_path


def absolute(path: Path | str) -> Path:
    """`path` with `~` expanded, made absolute against the current directory and normalised."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def default_home() -> Path:
    return absolute(os.environ.get("RESENV_HOME") or user_data_path("resenv"))


def default_db() -> Path:
    return absolute(os.environ.get("RESENV_DB") or default_home() / "resenv.db")


def default_data_dir() -> Path:
    return absolute(os.environ.get("RESENV_DATA_DIR") or default_home() / "runs")
