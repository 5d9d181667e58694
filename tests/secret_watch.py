"""A poller for tests that check a secret never lands on disk, not even for a moment while a run is live.

`SecretWatch` scans every regular file under some roots (the data dir), and the store with its WAL,
in a background thread as fast as it can (a file whose size and mtime did not change since it was
last read is not read again), and records each file in which one of the needles appeared and when.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class SecretWatch:
    def __init__(self, needles: list[str], roots: list[Path], files: list[Path] = (), interval: float = 0.02) -> None:
        self.needles = [needle.encode() for needle in needles]
        self.roots = [Path(root) for root in roots]
        self.files = [Path(path) for path in files]
        self.interval = interval
        self.hits: dict[str, float] = {}  # path -> first time (monotonic) a needle was seen in it
        self.scans = 0
        self.files_read = 0
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="secret-watch", daemon=True)

    def __enter__(self) -> SecretWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.scan()  # one last look, after the run

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.interval)

    def scan(self) -> None:
        self.scans += 1
        paths = list(self.files)
        for root in self.roots:
            for directory, _, names in os.walk(root):
                paths += [Path(directory) / name for name in names]
        for path in paths:
            self._check(path)

    def _check(self, path: Path) -> None:
        try:
            st = path.lstat()
        except OSError:
            return
        import stat

        if not stat.S_ISREG(st.st_mode):
            return
        key = str(path)
        signature = (st.st_size, st.st_mtime_ns)
        if self._seen.get(key) == signature:
            return
        try:
            data = path.read_bytes()
        except OSError:
            return
        self.files_read += 1
        self._seen[key] = signature
        if key not in self.hits and any(needle in data for needle in self.needles):
            self.hits[key] = time.monotonic()
