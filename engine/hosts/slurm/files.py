"""The cluster's shared file system as the engine sees it: directly, or through the login node's SFTP.

A Slurm job writes its output, start marker and exit status to files under the run's data dir, whose
path is the same on the engine's machine and on the cluster (as for SSH hosts). When the engine runs
on a login node the files are simply there (:class:`LocalFiles`); when it reaches the cluster through
an SSH login node they are read and written over that connection's one SFTP channel
(:class:`SftpFiles`), so a hundred running jobs cost no extra SSH sessions.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Protocol


class SharedFiles(Protocol):
    remote: bool  # the engine keeps its own copy of the logs (True) or reads the job's (False)

    async def write(self, path: Path, data: bytes, mode: int = 0o600) -> None: ...

    async def read(self, path: Path, offset: int = 0, size: int = 1 << 20) -> bytes | None:
        """Bytes from ``offset`` (at most ``size``); None when the file does not exist."""
        ...

    async def makedirs(self, path: Path) -> None: ...


class LocalFiles:
    remote = False

    async def write(self, path: Path, data: bytes, mode: int = 0o600) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.chmod(path, mode)

    async def read(self, path: Path, offset: int = 0, size: int = 1 << 20) -> bytes | None:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(size)
        except FileNotFoundError:
            return None

    async def makedirs(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)


class SftpFiles:
    remote = True

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def write(self, path: Path, data: bytes, mode: int = 0o600) -> None:
        import asyncssh

        sftp = await self.connection.sftp()
        async with sftp.open(str(path), "wb", attrs=asyncssh.SFTPAttrs(permissions=mode)) as handle:
            await handle.write(data)
        await sftp.chmod(str(path), mode)

    async def read(self, path: Path, offset: int = 0, size: int = 1 << 20) -> bytes | None:
        import asyncssh

        sftp = await self.connection.sftp()
        try:
            async with sftp.open(str(path), "rb") as handle:
                await handle.seek(offset)
                return await handle.read(size)
        except asyncssh.SFTPNoSuchFile:
            return None

    async def makedirs(self, path: Path) -> None:
        sftp = await self.connection.sftp()
        await sftp.makedirs(str(path), exist_ok=True)


async def read_all(files: SharedFiles, path: Path, limit: int = 1 << 16) -> bytes | None:
    """A small file whole (markers, exit status)."""
    return await files.read(path, 0, limit)


async def gather_reads(files: SharedFiles, paths: list[Path]) -> list[bytes | None]:
    return list(await asyncio.gather(*(read_all(files, path) for path in paths)))
