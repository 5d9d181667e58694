"""Default locations: the DB and the runs' data under the user's data directory (XDG).

Every path the engine is given is made absolute once, where it comes in (a CLI option, an
environment variable): jobs run with other working directories, and a run's paths are stored and
read back by later processes (`run --resume`, the dashboard) started from anywhere.
"""

from __future__ import annotations

import os
import tempfile
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


class UnusablePath(ValueError):
    """A path given for the engine's files cannot be used; the message is one line that says why."""


def blocking_file(path: Path) -> Path | None:
    """The nearest of `path` and its parents that exists and is not a directory, if any: what stops
    `path` from being made as a directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def writable_dir(path: Path | str, what: str) -> Path:
    """`path` made absolute, created where missing, and proven writable by writing a file there.

    Called before a run stores anything, so that a data dir under a regular file or on a read-only
    disk is one line at start, not a traceback after the run's row is written (a run stuck `queued`).
    A test write, not `os.access`, because root passes every permission check but a read-only mount's.
    """
    path = absolute(path)
    if (blocker := blocking_file(path)) is not None:
        raise UnusablePath(f"{what} {path}: {blocker} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UnusablePath(f"cannot create {what} {path}: {(error.strerror or str(error)).lower()}") from error
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UnusablePath(f"{what} {path} is not writable: {(error.strerror or str(error)).lower()}") from error
    return path


def writable_file(path: Path | str, what: str) -> Path:
    """`path` made absolute and proven writable as a file: its directory, created where missing,
    takes a test write.

    Called before a command prints or stores anything, so that an output file under a regular file,
    in a read-only directory, or naming a directory is one line up front rather than a traceback
    after the work was done.
    """
    path = absolute(path)
    if path.is_dir():
        raise UnusablePath(f"cannot write {what} {path}: {path} is a directory")
    if (blocker := blocking_file(path.parent)) is not None:
        raise UnusablePath(f"cannot write {what} {path}: {blocker} is a file, not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as error:
        raise UnusablePath(f"cannot write {what} {path}: {path.parent} is not writable "
                           f"({error.strerror or error})") from error
    return path
