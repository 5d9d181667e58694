"""A real, private Slurm cluster for tests: Debian's slurmctld/slurmd/munged on loopback, in a tmp dir.

* One ``munged -F`` with its own key and socket; ``slurm.conf`` names that socket (``AuthInfo``), so
  nothing touches the machine's ``/run/munge`` or ``/etc/slurm``.
* ``slurmctld -D`` and one ``slurmd -D -N <node>`` per node, all in the foreground, started with
  ``start_new_session`` and stopped by their PIDs (never by name). Every node is this machine
  (``NodeAddr=127.0.0.1``) with its own ``Port``, so two nodes give real multi-node scheduling.
* GPUs are fake: character devices ``<root>/dev/nvidia<N>`` (NVIDIA's major 195; slurmd refuses empty
  files) declared in ``gres.conf`` as ``Name=gpu File=...``.
  Slurm schedules ``--gres=gpu:N`` against them and sets ``CUDA_VISIBLE_DEVICES`` in the job; no
  cgroup device constraint is configured (proctrack/linuxproc, task/none), so nothing opens them.
* Clients find the cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.env`); ``host_yaml`` writes a
  ``kind: slurm`` host entry that sets it.

Starts in about two seconds; ``slurm_available()`` says whether it can run here (root, packages).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import stat
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .sshd_rig import descendants, free_port

BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
MUNGED = shutil.which("munged") or "/usr/sbin/munged"


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


def slurm_available() -> bool:
    """Root, and Debian's slurmctld, slurmd, slurm-client and munge installed."""
    return os.geteuid() == 0 and all(_which(name) for name in BINARIES) and os.path.exists(MUNGED)


@dataclass
class SlurmCluster:
    root: Path
    nodes: tuple[str, ...] = ("n1",)
    gpus_per_node: int = 2
    cpus_per_node: int = 8
    memory_mib: int = 8000
    cluster_name: str = field(default_factory=lambda: f"rt{secrets.token_hex(3)}")
    partition: str = "debug"
    ctld_port: int = 0
    node_ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    extra_conf: list[str] = field(default_factory=list)
    mount_ns_pid: int | None = None  # run the daemons in this process's mount namespace (an sshd's)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a client needs to reach this cluster (added to the caller's environment)."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return dict(os.environ) | self.env()

    # -- configuration ----------------------------------------------------------------------------
    def write_config(self) -> None:
        host = socket.gethostname()
        dev = self.root / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        for index in range(self.gpus_per_node):
            # Slurm wants real character devices in gres.conf: NVIDIA's major (195) with minors of
            # their own; they name no driver here and nothing ever opens them.
            path = dev / f"nvidia{index}"
            if not path.exists():
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(195, index))
        for sub in ("state", "log", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o755)
        for node in self.nodes:
            (self.root / f"spool-{node}").mkdir(parents=True, exist_ok=True)
        if not self.ctld_port:
            self.ctld_port = free_port()
        for node in self.nodes:
            self.node_ports.setdefault(node, free_port())
        gres = f" Gres=gpu:{self.gpus_per_node}" if self.gpus_per_node else ""
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool-%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.root / 'log' / 'jobcomp.txt'}",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "MaxJobCount=20000",
            "DefMemPerCPU=100",
            "MinJobAge=300",
            "KillWait=2",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "MessageTimeout=10",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "PreemptType=preempt/none",
            *self.extra_conf,
        ]
        for node in self.nodes:
            lines.append(f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.node_ports[node]} "
                         f"CPUs={self.cpus_per_node} RealMemory={self.memory_mib}{gres} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        gres_lines = []
        if self.gpus_per_node:
            files = f"{dev}/nvidia[0-{self.gpus_per_node - 1}]" if self.gpus_per_node > 1 else f"{dev}/nvidia0"
            gres_lines.append(f"Name=gpu File={files}")
        (self.root / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        # slurmd 22.05 always loads a cgroup plugin; jobs use none of it (proctrack/linuxproc, task/none).
        (self.root / "cgroup.conf").write_text("CgroupPlugin=autodetect\nCgroupMountpoint=/sys/fs/cgroup\n")
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            os.chmod(key, 0o400)

    # -- processes -------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        if self.mount_ns_pid is not None:  # the cluster sees the files that login node sees
            argv = ["nsenter", f"--target={self.mount_ns_pid}", "--mount", "--", *argv]
        log = open(self.root / "log" / f"{name}.out", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=self.client_env())
        log.close()
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 30.0) -> None:
        self.write_config()
        munge = self.root / "munge"
        self._spawn("munged", [MUNGED, "-F", "-f", f"--socket={self.munge_socket}", f"--key-file={munge / 'munge.key'}",
                               f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                               f"--seed-file={munge / 'munged.seed'}", "--num-threads=4"])
        self._wait(lambda: self.munge_socket.exists(), "munged", timeout)
        self.start_controller(timeout)
        for node in self.nodes:
            self.start_node(node)
        self.wait_nodes_idle(timeout)

    def start_controller(self, timeout: float = 30.0) -> None:
        self._spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-f", str(self.conf)])
        self._wait(lambda: self._port_open(self.ctld_port), "slurmctld", timeout)

    def start_node(self, node: str) -> None:
        self._spawn(f"slurmd-{node}", [_which("slurmd") or "slurmd", "-D", "-N", node, "-f", str(self.conf)])

    def wait_nodes_idle(self, timeout: float = 30.0) -> None:
        def idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return all(states.get(node, "").rstrip("*") in {"idle", "mixed", "allocated"} for node in self.nodes)

        self._wait(idle, "slurmd nodes idle", timeout)

    def _wait(self, ready, what: str, timeout: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}: {self.logs()}")
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{what} not ready in {timeout:g} s: {self.logs()}")

    @staticmethod
    def _port_open(port: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            return False

    def logs(self, tail: int = 3000) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if path.is_file():
                out.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def stop_process(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)

    def restart_controller(self, down_s: float = 0.0) -> None:
        """Stop slurmctld (its state is saved), wait `down_s`, start it again."""
        self.stop_process("slurmctld")
        time.sleep(down_s)
        self.start_controller()

    def stop(self) -> None:
        """Cancel every job, then stop the daemons by PID (nodes first, munged last)."""
        if "slurmctld" in self.procs:
            self.run("scancel", "--full", "-u", "root", check=False)
        for name in [n for n in self.procs if n.startswith("slurmd-")]:
            self.stop_process(name)
        self.stop_process("slurmctld")
        self.stop_process("munged")
        # slurmstepd processes of jobs that were still running: children of the stopped slurmds,
        # re-parented to init but still in their session; kill those whose spool dir is ours.
        for pid in _stepds_of(self.root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- clients ---------------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.client_env(), check=check,
                              timeout=timeout)

    def host_yaml(self, name: str, **extra: object) -> str:
        fields: dict[str, object] = {"kind": "slurm", "partition": self.partition,
                                     "slurm_conf": str(self.conf), **extra}
        inner = ", ".join(f"{key}: {value}" for key, value in fields.items())
        return f"  {name}: {{{inner}}}\n"


def _stepds_of(root: Path) -> list[int]:
    """PIDs of our slurmstepd processes (their environment names our slurm.conf) and everything below them."""
    marker = f"SLURM_CONF={root / 'slurm.conf'}".encode()
    stepds = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if Path(f"/proc/{name}/comm").read_text().strip() != "slurmstepd":
                continue
            if marker in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                stepds.append(int(name))
        except OSError:
            continue

    return [pid for stepd in stepds for pid in [stepd, *descendants(stepd)]]


def make_cluster(root: Path, *, nodes: tuple[str, ...] = ("n1",), gpus_per_node: int = 2, cpus_per_node: int = 8,
                 extra_conf: list[str] | None = None, mount_ns_pid: int | None = None) -> SlurmCluster:
    """Configure and start a private cluster under `root` (stop it with `.stop()`).

    `mount_ns_pid`: start the daemons in that process's mount namespace — an sshd rig's that hides
    the engine's data dir — so the "cluster" shares files with the "login node" and not with the engine.
    """
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    cluster = SlurmCluster(root=root, nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node,
                           extra_conf=list(extra_conf or []), mount_ns_pid=mount_ns_pid)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster
