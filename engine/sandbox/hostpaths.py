"""Where the engine's paths are on an SSH host: one rule, both ways.

The engine names every file of a run by its own path, under the run's folder in the engine's data dir
(``<data dir>/<run>``). On an SSH host the same files live under the host's own data dir
(``data_dir:`` of the host, by default the remote user's ``${XDG_DATA_HOME:-$HOME/.local/share}/resenv``)
at ``<host data dir>/runs/<run>``, at the same path relative to the run's folder. The remote sandbox
rewrites what it sends (arguments, environment, the cwd, engine input on stdin) with `PathMap.to_host`
and `PathMap.outbound`; what comes back naming the host's paths (the interpreter the report names, the
prefix the probes saw) is read through `PathMap.to_engine`, so the engine compares like with like.
A Slurm login node keeps the engine's paths (its jobs read them on the cluster's shared file system):
its map is the identity.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path


def _inside(path: str, root: str) -> str | None:
    """`path` relative to `root` ("" for the root itself), or None when it is not under it."""
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return None


@dataclass(frozen=True)
class PathMap:
    """The engine's run folder (`engine_root`) and where it is on the host (`host_root`)."""

    engine_root: str
    host_root: str

    @classmethod
    def identity(cls, root: Path | str) -> PathMap:
        return cls(str(root), str(root))

    @property
    def mirrored(self) -> bool:
        return self.engine_root == self.host_root

    def to_host(self, path: str | Path) -> str:
        """The host's path of an engine path (a path outside the run's folder is the same on both)."""
        text = str(path)
        rel = _inside(text, self.engine_root)
        return text if rel is None else (posixpath.join(self.host_root, rel) if rel else self.host_root)

    def to_engine(self, path: str | Path) -> str:
        """The engine's path of a host path the host named (outside the host's run folder: unchanged)."""
        text = str(path)
        rel = _inside(text, self.host_root)
        return text if rel is None else (posixpath.join(self.engine_root, rel) if rel else self.engine_root)

    def outbound(self, text: str) -> str:
        """`text` (an argument, a variable's value, a shell line) with each engine path in it that lies
        under the run's folder rewritten to the host's."""
        if self.mirrored:
            return text
        return self._pattern().sub(lambda _: self.host_root, text)

    def outbound_bytes(self, data: bytes) -> bytes:
        if self.mirrored:
            return data
        host = self.host_root.encode("utf-8", "surrogateescape")
        return re.compile(self._pattern().pattern.encode("utf-8", "surrogateescape")).sub(lambda _: host, data)

    def _pattern(self) -> re.Pattern[str]:
        # the root itself, where a path component ends after it (not a longer name that starts the same)
        return re.compile(re.escape(self.engine_root.rstrip("/")) + r"(?![^/\s'\"`:;,)}\]])")
