"""The run's hosts while the engine runs: SSH connections, host up/down states and GPU telemetry.

`start_fleet(engine)` is called once the engine has claimed its run: it connects the SSH hosts
(learning `gpus: auto` and the driver from them), records every state change of a host in the
store's ``hosts`` table and as a ``host_state`` event, wakes the dispatcher when a host comes back,
and starts GPU samplers for hosts with GPUs (NVML locally, an ``nvidia-smi`` stream per SSH host).
`stop_fleet(engine)` stops all of it before the store closes. A host that is unreachable at the
start is simply ``down``: the run goes on with the others and uses it once it connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # asyncssh is imported only when a run has SSH hosts
    from .ssh import SshHost

from ..sandbox.base import host_path
from ..store.db import dumps
from .telemetry import NvmlSampler, ProcessMap, SmiStreamSampler, TelemetrySink

log = logging.getLogger(__name__)


class Fleet:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.writer = engine.writer
        self.run_id = engine.run_id
        self.hosts = list(engine.pool.hosts)
        self.process_map = ProcessMap()
        self.sink = TelemetrySink(self.writer, self.run_id, on_state=self._telemetry_state)
        self.nvml: list[NvmlSampler] = []
        self.smi: list[SmiStreamSampler] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._last_processes: dict[str, list[tuple]] = {}
        self._down_since: dict[str, float] = {}  # SSH hosts waited for, since when
        self._preflighted: set[str] = set()  # docker hosts whose preflight ran (or runs)

    async def start(self) -> None:
        ssh = [host for host in self.hosts if _is_ssh(host)]
        for host in ssh:
            host.data_dir = self.engine.run_dir
            host.connection.listeners.append(lambda state, reason, host=host: self._host_state(host, state, reason))
            host.on_reaped = functools.partial(self._leftover_killed, host)
        if ssh:
            await asyncio.gather(*(host.start() for host in ssh), return_exceptions=True)
            for host in ssh:
                self._record(host, *_ssh_state(host))
        await self._start_slurm()  # login node, cluster facts, the squeue poller
        for host in self.hosts:
            self._start_sampler(host)
        await self._docker_hygiene("reap")
        await self._docker_preflight()
        self._tasks.append(asyncio.create_task(self._telemetry_loop(), name="telemetry"))

    async def _start_slurm(self) -> None:
        """Slurm hosts: connect (a login node), read the cluster, start the poller; record their states."""
        slurm = [host for host in self.hosts if _is_slurm(host)]
        for host in slurm:
            host.data_dir, host.run_id = self.engine.run_dir, self.run_id
            host.monitor.on_state = lambda state, reason, host=host: self._slurm_state(host, state, reason)
            if host.ssh is not None:
                host.ssh.data_dir = self.engine.run_dir
                host.ssh.connection.listeners.append(
                    lambda state, reason, host=host: self._slurm_state(host, state, reason))
        if slurm:
            await asyncio.gather(*(host.start() for host in slurm), return_exceptions=True)
            for host in slurm:
                self._record(host, "up" if host.available() else "down", None)

    def _slurm_state(self, host: Any, state: str, reason: str | None) -> None:
        """The controller (or the login node) became unreachable or answered again."""
        if state == "closed":
            return
        self._record(host, "up" if state == "up" else "down", reason)
        self.engine.display.message(f"host {host.name}: slurm {'answers again' if state == 'up' else state}"
                                    + (f": {reason}" if reason else ""))
        if state == "up" and not host.facts_ready:
            asyncio.get_running_loop().create_task(self._refresh_slurm(host))
        self.engine.wake.set()

    async def _refresh_slurm(self, host: Any) -> None:
        await host.refresh()
        self._record(host, "up" if host.available() else "down", None)
        self.engine.wake.set()

    def _start_sampler(self, host: Any) -> None:
        if _is_slurm(host):
            return  # the cluster's GPUs are its own; nodes are sampled by the site's tools
        if _is_ssh(host):
            if host.gpu_ids:
                sampler = SmiStreamSampler(host.name, host.connection, self.sink, processes=self.process_map)
                sampler.start()
                self.smi.append(sampler)
        elif host.gpu_ids:
            sampler = NvmlSampler(host.name, self.sink, gpus=list(host.gpu_ids), processes=self.process_map)
            sampler.start()
            self.nvml.append(sampler)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sampler in self.smi:
            await sampler.stop()
        for sampler in self.nvml:
            await asyncio.to_thread(sampler.stop)
        self.sink.flush()
        await self._docker_hygiene("prune")
        for host in self.hosts:
            if _is_ssh(host) or _is_slurm(host):
                with contextlib.suppress(Exception):
                    await host.close()

    async def _docker_preflight(self) -> None:
        """Before any job: each docker host's daemon, image and a throwaway container with the jobs'
        settings (engine/sandbox/docker_preflight.py). A host that fails is broken with the cause and
        the fix, so its jobs end as `error/host_setup` instead of failing one by one. An SSH host that
        is down now is checked when it comes up (`_host_state`)."""
        for host in self.hosts:
            if _is_docker(host) and host.available():
                await self._preflight_host(host)
        self.engine.wake.set()

    async def _preflight_host(self, host: Any) -> None:
        from ..sandbox import docker as docker_sandbox
        from ..sandbox.docker_preflight import run_preflight

        if host.name in self._preflighted:
            return
        self._preflighted.add(host.name)
        try:
            factory = await docker_sandbox.client_factory_for(host)
        except Exception as error:  # the SSH host went down meanwhile: checked again when it is back
            self._preflighted.discard(host.name)
            log.warning("docker preflight on %s: %s", host.name, error)
            return
        # in a worker thread: a remote daemon's forwarded socket is served by this event loop
        result = await asyncio.to_thread(run_preflight, factory, host.spec.image, host.spec.docker,
                                         host=host.name, run_id=self.run_id, remote=_is_ssh(host),
                                         gpus=tuple(host.gpu_ids[:1]))
        self.writer.event(self.run_id, "docker_preflight", {
            "host": host.name, "daemon": result.daemon, "version": result.version, "image": result.image_id,
            "python3": result.python3, "problems": result.problems, "notes": result.notes})
        for note in result.notes:
            self.engine.display.message(f"host {host.name}: {note}")
        if result.ok:
            return
        reason = f"docker preflight failed: {'; '.join(result.problems)}"
        host.mark_broken(reason)
        if not _is_ssh(host):  # an SSH host's connection tells its listeners, which record it
            self._record(host, "broken", reason)
            self.engine.display.message(f"host {host.name} cannot run jobs: {reason}")

    async def _docker_hygiene(self, what: str) -> None:
        """reap: a run's orphans when an engine starts; prune: its containers and images at its end."""
        docker_hosts = [host for host in self.hosts if getattr(host.spec, "sandbox", "process") == "docker"]
        if not docker_hosts:
            return  # the docker SDK (and asyncssh) are needed only by runs that use them
        from ..sandbox import docker as docker_sandbox

        for host in docker_hosts:
            try:
                if _is_ssh(host) and not host.available():
                    continue
                factory = await docker_sandbox.client_factory_for(host)
                fn = docker_sandbox.reap if what == "reap" else functools.partial(
                    docker_sandbox.prune, images=not host.spec.docker.keep_checkpoints)
                # in a worker thread: a remote daemon's forwarded socket is served by this event loop
                done = await asyncio.to_thread(lambda: fn(factory(), self.run_id))
                if done:
                    self.writer.event(self.run_id, f"docker_{what}", {"host": host.name, "removed": done})
            except Exception as error:  # hygiene never stops a run
                log.warning("docker %s on %s failed: %s", what, host.name, error)

    # -- states -------------------------------------------------------------------------------
    def _record(self, host: Any, state: str, reason: str | None) -> None:
        """The host's state in the store; a host waited for carries since when (the dashboard shows it)."""
        if state == "down":
            self._down_since.setdefault(host.name, time.time())
        else:
            self._down_since.pop(host.name, None)
        inventory = host.inventory() | {"reason": reason, "down_since": self._down_since.get(host.name)}
        if host.name in self.sink.hosts:
            inventory["telemetry"] = self.sink.hosts[host.name].state
        self.writer.execute(
            "UPDATE hosts SET state = ?, inventory_json = ?, updated_at = ? WHERE run_id = ? AND name = ?",
            (state, dumps(inventory), time.time(), self.run_id, host.name))
        self.writer.event(self.run_id, "host_state", {"host": host.name, "state": state, "reason": reason})

    def _leftover_killed(self, host: SshHost, pgid: int, workdir: Path) -> None:
        """A process group left running on the host (by a lost connection, or by a dead engine) was killed."""
        self.writer.event(self.run_id, "leftover_killed", {"pgid": pgid, "host": host.name, "workdir": str(workdir)})
        self.engine.display.message(f"host {host.name}: killed process group {pgid} left running in {workdir}")

    def _host_state(self, host: SshHost, state: str, reason: str | None) -> None:
        if state == "closed":
            return
        self._record(host, state, reason)
        if state == "up":
            self.engine.display.message(f"host {host.name} is up")
            if _is_docker(host) and host.name not in self._preflighted and self._tasks:  # down at the start
                self._tasks.append(asyncio.get_running_loop().create_task(self._preflight_host(host)))
            if host.auto_gpus and not host.gpu_ids:
                asyncio.get_running_loop().create_task(self._refresh(host))
        elif state == "broken":
            self.engine.display.message(f"host {host.name} cannot run jobs: {reason}")
        else:
            since = self._down_since[host.name]
            self.engine.display.message(
                f"waiting for host {host.name} since {time.strftime('%H:%M:%S', time.localtime(since))}"
                f" (reconnecting with backoff): {reason}")
        self.engine.wake.set()

    async def _refresh(self, host: SshHost) -> None:
        await host.refresh()
        self._record(host, *_ssh_state(host))
        if host.gpu_ids and not any(s.host == host.name for s in self.smi):
            self._start_sampler(host)
        self.engine.wake.set()

    def _telemetry_state(self, host: str, state: str) -> None:
        if state == "stale":
            self.writer.execute("UPDATE hosts SET state = 'stale', updated_at = ? WHERE run_id = ? AND name = ?"
                                " AND state = 'up'", (time.time(), self.run_id, host))
        elif state == "ok":
            self.writer.execute("UPDATE hosts SET state = 'up', updated_at = ? WHERE run_id = ? AND name = ?"
                                " AND state = 'stale'", (time.time(), self.run_id, host))
        self.writer.execute(
            "UPDATE hosts SET inventory_json = json_set(inventory_json, '$.telemetry', ?) WHERE run_id = ? AND name = ?",
            (state, self.run_id, host))
        self.writer.event(self.run_id, "telemetry_state", {"host": host, "state": state})

    # -- the 1 Hz loop ----------------------------------------------------------------------------
    async def _telemetry_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                self._refresh_process_map()
                self.sink.flush()
                self._record_processes()
            except Exception:  # telemetry never stops a run
                log.exception("telemetry flush failed")

    def _refresh_process_map(self) -> None:
        workdirs = {}
        for job_id, running in self.engine.running.items():
            attempt = running.attempt
            if attempt is not None:
                workdirs[str(attempt.paths.workdir)] = job_id
                # a process on an SSH host names its cwd as the host sees it (under the host's data dir)
                workdirs[host_path(attempt.sandbox, attempt.paths.workdir)] = job_id
                container = getattr(attempt.sandbox, "container_id", None)
                if container:
                    self.process_map.containers[container] = job_id
        self.process_map.workdirs = workdirs

    def _record_processes(self) -> None:
        for name, info in self.sink.hosts.items():
            current = sorted((p.gpu, p.pid, p.job_id) for p in info.processes)
            if current != self._last_processes.get(name, []):
                self._last_processes[name] = current
                self.writer.event(self.run_id, "gpu_processes", {
                    "host": name,
                    "processes": [{"gpu": p.gpu, "pid": p.pid, "used_mib": p.used_mib, "job_id": p.job_id}
                                  for p in info.processes]})


async def start_fleet(engine: Any) -> Fleet:
    fleet = Fleet(engine)
    await fleet.start()
    return fleet


async def stop_fleet(engine: Any) -> None:
    fleet = getattr(engine, "fleet", None)
    if fleet is not None:
        try:
            await fleet.stop()
        except Exception:  # stopping telemetry must never lose the run's own records
            log.exception("stopping the fleet failed")


def host_rows_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode `hosts` rows for display (the inventory is JSON)."""
    return [row | {"inventory": json.loads(row["inventory_json"])} for row in rows]


def _ssh_state(host: Any) -> tuple[str, str | None]:
    """An SSH host's state for the store: up, broken (for good) or down (waited for), and why."""
    if host.available():
        return "up", None
    if host.broken:
        return "broken", host.broken
    return "down", host.connection.reason


def _is_ssh(host: Any) -> bool:
    return getattr(host, "kind", "local") == "ssh" and hasattr(host, "connection")


def _is_docker(host: Any) -> bool:
    return getattr(getattr(host, "spec", None), "sandbox", "process") == "docker"


def _is_slurm(host: Any) -> bool:
    return getattr(host, "kind", "local") == "slurm" and hasattr(host, "monitor")
