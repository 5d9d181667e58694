"""SSH hosts: a `Host` whose sandboxes run over one multiplexed SSH connection (engine/sandbox/remote.py).

The host is *available* to the scheduler only while its connection is up: a host that dies or is cut
off is marked down at once (its running commands fail as infrastructure errors, their jobs are
re-queued on other fitting hosts by the engine's infra retries), and is chosen again only after the
connection's monitor has reconnected. Process groups that were running when the connection dropped
are killed (if they still run inside their job's work dir) as soon as the host is back.

A run's files on the host live under the host's data dir (its `data_dir:`, by default the remote
user's XDG data dir, resolved when the connection comes up) at ``runs/<run>/...``, the same paths
relative to the run's folder as on the engine: `paths` is the map (engine/sandbox/hostpaths.py). The
run's pristine bare repos are pushed there once per host as a tar stream, then made read-only. A Slurm
login node keeps the engine's paths (`mirror_paths`): its jobs read them on the shared file system.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import asyncssh

from ..checkout import COMPLETE_MARKER
from .gpuinfo import DriverInfo
from .check import remote_facts
from .pool import Host
from ..sandbox.remote import HostDown, SshConnection, SshTarget
from ..sandbox.base import SandboxError
from ..sandbox.hostpaths import PathMap

log = logging.getLogger(__name__)

PUSH_CHUNK = 1 << 20


@dataclass(eq=False)
class SshHost(Host):
    spec: Any = None
    connection: SshConnection = field(default=None, repr=False)  # type: ignore[assignment]
    facts: dict[str, Any] = field(default_factory=dict)
    auto_gpus: bool = False
    data_dir: Path | None = None  # the engine's folder of this run
    mirror_paths: bool = False  # True: the host uses the engine's own paths (a Slurm login node)
    host_data_dir: str | None = None  # the data dir on the host, known once the connection came up
    _staged: dict[str, asyncio.Task[None]] = field(default_factory=dict, repr=False)
    _groups: dict[int, Path] = field(default_factory=dict, repr=False)  # pgid -> work dir, in flight
    _orphans: dict[int, Path] = field(default_factory=dict, repr=False)
    _was_up: bool = False
    _facts: asyncio.Task[None] | None = field(default=None, repr=False)  # the facts being read
    on_reaped: Callable[[int, Path], None] | None = field(default=None, repr=False)  # a left-over group was killed

    # -- scheduling ---------------------------------------------------------------------------
    def available(self) -> bool:
        """Up, not broken, and (unless it keeps the engine's paths) its data dir known: no job is
        placed where its files' place is not known yet."""
        return (self.connection is not None and self.connection.up and self.broken is None
                and (self.mirror_paths or self.host_data_dir is not None))

    def inventory(self) -> dict[str, Any]:
        base = {"kind": "ssh", "address": f"{self.connection.target.address}:{self.connection.target.port}",
                "slots": self.slots, "gpus": self.gpu_ids, "state": self.connection.state}
        return base | {key: value for key, value in self.facts.items() if key not in base}

    @property
    def paths(self) -> PathMap:
        """Where the engine's run folder is on the host (the identity until the host's data dir is known)."""
        root = self.data_dir or Path("/nonexistent-run")
        if self.mirror_paths:
            return PathMap.identity(root)
        if self.host_data_dir is None:  # its facts could not be read: no guessing where its files go
            raise SandboxError(f"host {self.name}: its data dir is not known (the host's facts could not be read)")
        return PathMap(str(root), f"{self.host_data_dir.rstrip('/')}/runs/{root.name}")

    def driver(self) -> DriverInfo | None:
        if not self.gpu_ids:
            return None
        return self._driver or DriverInfo(None, None)

    def sandbox(self, workdir: Path, **job: Any) -> Any:
        if getattr(self.spec, "sandbox", "process") == "docker":
            from ..sandbox.docker import DockerSandbox, remote_docker_client

            return DockerSandbox.for_job(self, workdir, client_factory=lambda: remote_docker_client(self), **job)
        from ..sandbox.ssh_process import RemoteProcessSandbox

        return RemoteProcessSandbox(self, workdir)

    # -- life ----------------------------------------------------------------------------------
    async def start(self) -> bool:
        self.connection.listeners.append(self._on_state)
        ok = await self.connection.start()
        if ok:
            await self._read_facts()
        return ok

    async def _read_facts(self) -> None:
        """Read the facts once at a time (the first connection, or a host down at the start that came up)."""
        if self._facts is None or self._facts.done():
            self._facts = asyncio.get_running_loop().create_task(self.refresh())
        await asyncio.shield(self._facts)

    async def refresh(self) -> None:
        """Facts of the host (GPUs for `gpus: auto`, driver, docker); never raises."""
        try:
            facts = await remote_facts(self.connection, self.spec, self.data_dir or Path("/tmp"),
                                       mirror=self.mirror_paths)
        except Exception as error:  # facts are informative: a failure must not stop the run
            log.warning("host %s: cannot gather facts: %s", self.name, error)
            return
        self.facts = facts.inventory()
        self.host_data_dir = facts.data_dir
        if facts.blocking:
            self.mark_broken("; ".join(facts.blocking))
            return
        if self.auto_gpus:
            self.gpu_ids = sorted(gpu["index"] for gpu in facts.gpus)
        if facts.gpus:
            self._driver = DriverInfo(facts.driver_version, facts.cuda_version)

    def mark_broken(self, reason: str) -> None:
        """Broken for good (see `Host.mark_broken`); the connection says so to its listeners (the
        fleet records and shows it) and stays open for the kills still owed."""
        super().mark_broken(reason)
        self.connection.mark_broken(self.broken or reason)

    def _on_state(self, state: str, reason: str | None) -> None:
        if state == "broken":
            self.broken = self.broken or reason
        if state == "up":
            if not self.mirror_paths and self.host_data_dir is None and (self._facts is None or self._facts.done()):
                # came up after a start it was down for (or facts that failed): read them now
                self._facts = asyncio.get_running_loop().create_task(self.refresh())
            if self._orphans or (self._was_up and self._groups):
                asyncio.get_running_loop().create_task(self.reap_orphans())
            self._was_up = True
        elif state == "down":
            self._orphans.update(self._groups)

    async def close(self) -> None:
        await self.connection.close()

    # -- process groups -------------------------------------------------------------------------
    def note_group(self, pgid: int, workdir: Path) -> None:
        self._groups[pgid] = workdir
        if len(self._groups) > 4096:  # finished groups are dropped oldest first
            for old in list(self._groups)[:1024]:
                del self._groups[old]

    def note_orphan(self, pgid: int, workdir: Path) -> None:
        self._orphans[pgid] = workdir

    async def reap_orphans(self) -> int:
        """Kill groups left running while the connection was down, if they run in their work dir."""
        if not self.mirror_paths and self.host_data_dir is None and self._facts is not None:
            await asyncio.shield(self._facts)  # where the work dirs are on the host comes with its facts
        if not self.mirror_paths and self.host_data_dir is None:
            return 0  # not known yet: they stay owed until the facts can be read
        orphans, self._orphans = dict(self._orphans), {}
        killed = 0
        for pgid, workdir in orphans.items():
            root = shlex.quote(self.paths.to_host(workdir))
            script = (f"cwd=$(readlink /proc/{pgid}/cwd 2>/dev/null) || exit 1; "
                      f"case \"$cwd/\" in {root}/*) kill -KILL -{pgid} && echo killed;; esac")
            try:
                result = await self.connection.run(script, timeout=15, control=True)
            except (HostDown, asyncio.TimeoutError):
                self._orphans[pgid] = workdir
                continue
            if b"killed" in result.stdout:
                killed += 1
                if self.on_reaped is not None:
                    self.on_reaped(pgid, workdir)
        if killed:
            log.info("host %s: killed %d process group(s) left from before the reconnect", self.name, killed)
        return killed

    # -- files -----------------------------------------------------------------------------------
    async def push_tree(self, src: Path, target: str) -> None:
        """Copy a local file or tree to `target` on the host as one tar stream (links kept as links)."""
        quoted = shlex.quote(target)
        if src.is_dir():
            command = f"mkdir -p {quoted} && tar -x -f - -C {quoted}"
            arcname = "."
        else:
            parent = shlex.quote(str(Path(target).parent))
            command = f"mkdir -p {parent} && tar -x -f - -C {parent}"
            arcname = Path(target).name
        reader, writer = _pipe()
        producer = threading.Thread(target=_tar_into, args=(src, arcname, writer), daemon=True)
        try:
            async with self.connection.channel() as conn:
                proc = await conn.create_process(command, encoding=None)
                producer.start()
                loop = asyncio.get_running_loop()
                while chunk := await loop.run_in_executor(None, reader.read, PUSH_CHUNK):
                    proc.stdin.write(chunk)
                    await proc.stdin.drain()
                proc.stdin.write_eof()
                result = await proc.wait()
        except (HostDown, asyncssh.Error, OSError) as error:
            raise SandboxError(f"host {self.name}: copy of {src} failed: {error}") from error
        finally:
            reader.close()
        if result.exit_status != 0:
            err = (result.stderr or b"").decode(errors="replace").strip()[-500:]
            raise SandboxError(f"host {self.name}: unpacking {src} into {target} failed ({result.exit_status}): {err}")

    async def stage_pristine(self, path: Path) -> None:
        """The pristine bare repo at its place on the host (`paths`), read-only, pushed once per run."""
        key = str(path)
        task = self._staged.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.get_running_loop().create_task(self._stage(path))
            self._staged[key] = task
        await asyncio.shield(task)

    async def _stage(self, path: Path) -> None:
        there = self.paths.to_host(path)
        quoted = shlex.quote(there)
        marker = shlex.quote(f"{there}/{COMPLETE_MARKER}")
        result = await self.connection.run(f"test -f {marker}", timeout=30)
        if result.returncode == 0:
            return
        partial = shlex.quote(there + ".partial")
        await self.connection.run(f"rm -rf {partial}", timeout=60)
        await self.push_tree(path, there + ".partial")
        done = await self.connection.run(
            f"chmod -R a-w {partial} && rm -rf {quoted} && mv {partial} {quoted}", timeout=120)
        if done.returncode != 0:
            raise SandboxError(f"host {self.name}: cannot place pristine {there}: {done.stderr.decode(errors='replace')[-300:]}")


def _pipe() -> tuple[Any, Any]:
    import os

    read_fd, write_fd = os.pipe()
    return open(read_fd, "rb"), open(write_fd, "wb")


def _tar_into(src: Path, arcname: str, writer: Any) -> None:
    try:
        with tarfile.open(fileobj=writer, mode="w|") as tar:
            tar.add(str(src), arcname=arcname, recursive=True)
    except (OSError, tarfile.TarError) as error:
        log.warning("tar of %s failed: %s", src, error)
    finally:
        writer.close()


def build_ssh_host(name: str, spec: Any, data_dir: Path | None = None) -> SshHost:
    """An `SshHost` from its spec (not connected yet: the engine's fleet starts it)."""
    auto = spec.gpus == "auto"
    gpu_ids = [] if auto else (list(range(spec.gpus)) if isinstance(spec.gpus, int) else list(spec.gpus))
    connection = SshConnection(SshTarget.from_spec(name, spec))
    connection.state = "down"  # until the first connection succeeds
    connection.reason = "not connected yet"
    return SshHost(name=name, kind="ssh", slots=spec.slots, gpu_ids=gpu_ids, spec=spec,
                   connection=connection, auto_gpus=auto, data_dir=data_dir)
