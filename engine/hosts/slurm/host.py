"""The ``kind: slurm`` host: resenv's jobs run as Slurm jobs on a cluster, which owns the GPUs.

* **No GPU leasing.** The cluster's scheduler decides who gets which GPU; resenv only asks. The host
  shows ``gpus`` GPU ids (the most one node can give one job: the spec's count, or with ``auto`` the
  partition's largest node) so that the scheduler knows which tiers it can judge here, but a lease
  never takes them: every job of the run may ask at once, and waits in Slurm's queue, not resenv's.
  ``slots`` bounds how many resenv jobs are in flight on the cluster.
* **Reached locally or over SSH.** With ``login:`` the Slurm commands and the shared files go over
  one SSH connection to the login node (engine/sandbox/remote.py, reused as for SSH hosts); without it the
  engine runs where ``sbatch`` works.
* **Submission without hammering the controller**: at most ``SUBMIT_CONCURRENCY`` sbatch calls at once;
  when the controller does not answer, every submitter backs off together (doubling to 30 s) and
  tries again; a submission whose answer was lost is found again by its unique comment instead of
  being submitted twice.
* **Leftovers** of a dead engine (jobs named ``resenv-<run>``) are cancelled when a run (re)starts.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..gpuinfo import DriverInfo
from ..pool import Host
from ...sandbox.base import SandboxError
from .client import ControllerUnavailable, LocalRunner, SlurmClient, SlurmError, SshRunner
from .facts import ClusterFacts, cluster_facts
from .files import LocalFiles, SftpFiles, SharedFiles
from .monitor import SlurmMonitor
from .script import Resources

log = logging.getLogger(__name__)

SUBMIT_CONCURRENCY = 8
SUBMIT_GIVE_UP_S = 600.0  # a controller unreachable this long fails the command as infrastructure


@dataclass(eq=False)
class SlurmHost(Host):
    spec: Any = None
    client: SlurmClient = field(default=None, repr=False)  # type: ignore[assignment]
    monitor: SlurmMonitor = field(default=None, repr=False)  # type: ignore[assignment]
    files: SharedFiles = field(default_factory=LocalFiles, repr=False)
    ssh: Any = field(default=None, repr=False)  # the login node's SshHost, when reached over SSH
    data_dir: Path | None = None
    run_id: str | None = None
    auto_gpus: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    tail_s: float = 0.25
    agent_gpus: int | None = 0
    submitted: int = 0
    facts_ready: bool = False
    _reaped: bool = field(default=False, repr=False)
    _submit_gate: asyncio.Semaphore | None = field(default=None, repr=False)
    _backoff_until: float = 0.0
    _backoff_s: float = 0.0

    # -- scheduling ---------------------------------------------------------------------------------
    gpus_shared = True

    @property
    def free_gpus(self) -> list[int]:
        return list(self.gpu_ids)  # Slurm hands out the GPUs; a lease never takes them

    def available(self) -> bool:
        """Up and read: until the cluster has answered once, `gpus: auto` is unknown (every GPU tier would
        be skipped) and a dead engine's jobs of this run are not cancelled yet (new ones would share their name)."""
        return (self.ssh is None or self.ssh.available()) and self.facts_ready and self.broken is None

    def inventory(self) -> dict[str, Any]:
        base = {"kind": "slurm", "where": self.client.runner.where if self.client else "local", "slots": self.slots,
                "gpus": self.gpu_ids, "controller": self.monitor.state if self.monitor else None,
                "controller_reason": self.monitor.reason if self.monitor else None}
        return base | {key: value for key, value in self.facts.items() if key not in base}

    def driver(self) -> DriverInfo | None:
        return None  # the compute nodes' driver is not known on the submit side

    def sandbox(self, workdir: Path, **job: Any) -> Any:
        from .sandbox import SlurmSandbox

        return SlurmSandbox(self, workdir, attempt=job.get("attempt"))

    def login_sandbox(self, workdir: Path) -> Any:
        """The submit side's sandbox: shared files and the quick commands (checkout, versions)."""
        if self.ssh is not None:
            from ...sandbox.ssh_process import RemoteProcessSandbox

            return RemoteProcessSandbox(self.ssh, workdir)
        from ...sandbox.process import ProcessSandbox

        workdir.mkdir(parents=True, exist_ok=True)
        return ProcessSandbox(workdir)

    def job_name(self, run_id: str | None = None) -> str:
        return f"resenv-{run_id or self.run_id or 'adhoc'}"

    def resources(self, gpus: int) -> Resources:
        spec = self.spec
        return Resources(
            gpus=gpus, gres=getattr(spec, "gres", "gpu"), cpus=getattr(spec, "cpus", None),
            memory_mib=getattr(spec, "memory_mib", None), partition=getattr(spec, "partition", None),
            account=getattr(spec, "account", None), qos=getattr(spec, "qos", None),
            time_limit_min=getattr(spec, "time_limit_min", None),
            extra=tuple(getattr(spec, "sbatch_options", ()) or ()),
        )

    # -- submission ---------------------------------------------------------------------------------
    async def submit(self, script: str, options: list[str]) -> str:
        """sbatch with backoff while the controller is away; SandboxError when Slurm refuses the job."""
        if self._submit_gate is None:
            self._submit_gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)
        token = next((opt.partition("=")[2] for opt in options if opt.startswith("--comment=")), "")
        if not token:
            raise ValueError("a submission needs its unique --comment (see submission_token)")
        deadline = time.monotonic() + SUBMIT_GIVE_UP_S
        lost_answer = False
        while True:
            wait = self._backoff_until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if lost_answer and (found := await self._find(token)) is not None:
                    return found
                async with self._submit_gate:
                    job_id = await self.client.submit(script, options)
                self._backoff_s = 0.0
                self.submitted += 1
                return job_id
            except ControllerUnavailable as error:
                lost_answer = True
                if time.monotonic() > deadline:
                    raise SandboxError(f"host {self.name}: slurm controller unreachable: {error}") from error
                self._backoff_s = min(max(self._backoff_s * 2, 0.5), 30.0)
                self._backoff_until = max(self._backoff_until, time.monotonic() + self._backoff_s)
                log.warning("host %s: sbatch: %s; retrying in %.1f s", self.name, error, self._backoff_s)
            except SlurmError as error:
                raise SandboxError(f"host {self.name}: {error}") from error

    @staticmethod
    def submission_token() -> str:
        """A submission's unique ``--comment``: how a submission whose answer was lost is found again
        (the caller keeps the options it sends, so what it records is what was submitted)."""
        return f"resenv:{secrets.token_hex(8)}"

    async def _find(self, token: str) -> str | None:
        """The job a lost sbatch answer was about, by its unique comment."""
        jobs = await self.client.query()
        return next((job.job_id for job in jobs.values() if job.comment == token), None)

    # -- life ---------------------------------------------------------------------------------------
    async def start(self) -> bool:
        """Connect (SSH login), learn the cluster, start the poller, cancel a dead engine's jobs.

        A login node or controller that does not answer yet leaves the host unavailable: the poller
        keeps asking (with backoff), and the fleet reads the cluster once it answers.
        """
        reason: str | None = None
        if self.ssh is not None:
            self.ssh.connection.listeners.append(self.ssh._on_state)
            if not await self.ssh.connection.start():
                reason = f"login node: {self.ssh.connection.reason}"
        facts = await self.refresh() if reason is None else None
        if facts is None:
            reason = reason or "; ".join(self.facts.get("problems", [])) or "no answer"
            self.monitor._set_state("unreachable", reason)
        self.monitor.start()
        return facts is not None

    async def reap_leftovers(self) -> int:
        """Cancel the jobs of this run that an engine which stopped left in the queue (once per engine)."""
        if self._reaped or not self.run_id:
            return 0
        try:
            cancelled = await self.client.cancel_named(self.job_name())
        except SlurmError as error:
            log.warning("host %s: cannot look for leftover jobs: %s", self.name, error)
            return 0
        self._reaped = True
        if cancelled:
            self.facts["leftovers_cancelled"] = cancelled
            log.warning("host %s: cancelled %d job(s) left by an engine that stopped", self.name, cancelled)
        return cancelled

    async def refresh(self) -> ClusterFacts | None:
        """Facts of the cluster (and `gpus: auto`); never raises."""
        try:
            facts = await cluster_facts(self.client, getattr(self.spec, "partition", None),
                                        getattr(self.spec, "gres", "gpu"))
        except SlurmError as error:
            self.facts = {"problems": [str(error)]}
            log.warning("host %s: cannot read the cluster: %s", self.name, error)
            return None
        self.facts = facts.inventory()
        if self.auto_gpus:
            self.gpu_ids = list(range(facts.gpus_per_node))
        self.facts_ready = True
        await self.reap_leftovers()  # before this engine submits anything
        return facts

    async def close(self) -> None:
        await self.monitor.stop()
        if self.ssh is not None:
            await self.ssh.close()


def build_slurm_host(name: str, spec: Any, data_dir: Path | None = None) -> SlurmHost:
    """A `SlurmHost` from its spec (not started: the engine's fleet starts it)."""
    env = {"SLURM_CONF": spec.slurm_conf} if getattr(spec, "slurm_conf", None) else {}
    ssh = None
    files: SharedFiles = LocalFiles()
    if getattr(spec, "login", None) is not None:
        from ..ssh import SshHost
        from ...sandbox.remote import SshConnection, SshTarget

        connection = SshConnection(SshTarget.from_spec(f"{name}-login", spec.login))
        connection.state, connection.reason = "down", "not connected yet"
        ssh = SshHost(name=f"{name}-login", kind="ssh", slots=1, gpu_ids=[], spec=spec.login, connection=connection,
                      data_dir=data_dir, mirror_paths=True)
        runner: Any = SshRunner(connection, env)
        files = SftpFiles(connection)
    else:
        runner = LocalRunner(env)
    client = SlurmClient(runner)
    auto = spec.gpus == "auto"
    gpu_ids = [] if auto else list(range(spec.gpus))
    monitor = SlurmMonitor(client, poll_s=spec.poll_s)
    return SlurmHost(name=name, kind="slurm", slots=spec.slots, gpu_ids=gpu_ids, spec=spec, client=client,
                     monitor=monitor, files=files, ssh=ssh, data_dir=data_dir, auto_gpus=auto,
                     tail_s=spec.poll_s if ssh is not None else min(0.25, spec.poll_s),
                     agent_gpus=spec.agent_gpus)
