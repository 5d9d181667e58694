"""The spec's `hosts:` section: local, SSH and Slurm hosts, and their sandbox options."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, Strict, Tag

from .fields import (
    GpuSelection,
    HostDir,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    Seconds,
    SpecModel,
    Text,
    _Problem,
    _at_least,
    _kind_tag,
)


# --------------------------------------------------------------------------- docker sandboxes, ssh hosts


def _memlock(value: int) -> int:
    if value == -1 or value >= 1:
        return value
    raise ValueError(f"expected -1 (unlimited) or a number of bytes >= 1, got {value}; leave it out (null)"
                     " to keep the docker daemon's own limit")


def _docker_socket(value: str) -> str:
    path = value.removeprefix("unix://")
    if not path.startswith("/"):
        raise ValueError(f"expected the absolute path of the docker daemon's unix socket"
                         f" (/var/run/docker.sock or unix:///var/run/docker.sock), got {value!r}")
    return path


class DockerOptions(SpecModel):
    """Limits of a docker sandbox's container (see engine/sandbox/docker.py)."""

    network: Literal["none", "host"] = "none"  # never a bridge
    cpus: PositiveNumber | None = None  # CPU quota, in CPUs
    memory_mib: PositiveInt | None = None  # hard memory limit (swap included)
    pids: PositiveInt = 4096  # pids limit
    shm_mib: PositiveInt = 2048  # /dev/shm (NCCL needs more than docker's 64 MiB)
    # RLIMIT_MEMLOCK for NCCL over InfiniBand, in bytes; -1 = unlimited. None (the default) leaves
    # the daemon's own: raising it needs CAP_SYS_RESOURCE, which many machines' dockerd lacks.
    memlock: Annotated[int, Strict(), AfterValidator(_memlock)] | None = None
    user: Text | None = None  # user[:group] in the container (default: the image's)
    # The daemon's unix socket (a path or unix:// URL). None: a local host uses $DOCKER_HOST (else
    # the default socket), an ssh host /var/run/docker.sock on that host.
    socket: Annotated[str, Strict(), AfterValidator(_docker_socket)] | None = None
    # Post-agent checkpoint images outlive the run, so any tier can be re-run after it ended
    # (`resenv control retry RUN JOB --tier C3`, then `resenv run --resume RUN`); false removes them
    # at the run's end with its containers.
    keep_checkpoints: bool = True


class ProcessOptions(SpecModel):
    """What a local process sandbox's bubblewrap namespace lets a command reach (engine/sandbox/isolation.py)."""

    network: Literal["none", "host"] = "host"  # host: agents can install packages; none: loopback only
    expose: list[Text] = Field(default_factory=list)  # extra absolute host paths, seen read-only
    devices: list[Text] = Field(default_factory=list)  # device nodes (or a driver's folder) passed through read-write, as /dev/nvidia* are
    uid: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 65534  # commands' uid when resenv is root

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        return [_Problem((key, index), "must be an absolute path")
                for key in ("expose", "devices") for index, path in enumerate(data.get(key) or [])
                if isinstance(path, str) and not path.startswith("/")]


class _SandboxChoice(SpecModel):
    """`sandbox: process | unsafe-process | docker`; docker needs `image:` (built or loaded on the
    host, never pulled). `unsafe-process` runs commands without bubblewrap: they see the whole machine."""

    sandbox: Literal["process", "unsafe-process", "docker"] = "process"
    image: Text | None = None
    docker: DockerOptions = Field(default_factory=DockerOptions)
    process: ProcessOptions = Field(default_factory=ProcessOptions)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        if data.get("sandbox") == "docker" and not data.get("image"):
            return [_Problem(("image",), "sandbox: docker needs `image:` (an image present on the host)")]
        return []


class LocalHost(_SandboxChoice):
    """This machine."""

    kind: Literal["local"]
    slots: PositiveInt = 2
    gpus: GpuSelection = "auto"


class SshHost(_SandboxChoice):
    """A machine reached over SSH (public-key auth only; host keys checked against known_hosts)."""

    kind: Literal["ssh"]
    address: Text
    port: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 22
    user: Text | None = None  # default: the engine's user
    key: Text | None = None  # private key file (default: ~/.ssh/id_* and the ssh agent)
    known_hosts: Text | None = None  # default: ~/.ssh/known_hosts
    strict_host_keys: bool = True  # false: accept any host key (test rigs only)
    slots: PositiveInt = 2
    gpus: GpuSelection = "auto"
    keepalive_s: Seconds = 10.0  # a silent host is dead after keepalive_s * keepalive_count
    keepalive_count: PositiveInt = 3
    connect_timeout_s: Seconds = 15.0
    max_sessions: PositiveInt = 10  # the server's MaxSessions (OpenSSH default 10)
    # where the run's files go on the host (runs/<run>/...); default: ${XDG_DATA_HOME:-$HOME/.local/share}/resenv
    data_dir: HostDir | None = None


# --------------------------------------------------------------------------- slurm hosts
def _gpu_count_or_auto(value: Any) -> Any:
    if value == "auto" and isinstance(value, str):
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected 'auto' or a GPU count >= 0 (GPUs one node gives one job), got {value!r}")


SBATCH_OWNED = ("--job-name", "--output", "--error", "--open-mode", "--chdir", "--export", "--parsable", "--wrap",
                "--array", "--requeue", "--no-requeue", "--comment", "--gres", "--gpus", "--nodes", "--ntasks",
                "--partition", "--account", "--qos", "--time", "--cpus-per-task", "--mem", "--input")


class SlurmLogin(SpecModel):
    """The login node a slurm host is reached through: SSH as for `kind: ssh` hosts."""

    address: Text
    port: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 22
    user: Text | None = None
    key: Text | None = None
    known_hosts: Text | None = None
    strict_host_keys: bool = True
    keepalive_s: Seconds = 10.0
    keepalive_count: PositiveInt = 3
    connect_timeout_s: Seconds = 15.0
    max_sessions: PositiveInt = 10


class SlurmHost(SpecModel):
    """A Slurm cluster: each sandbox command that needs the cluster is one Slurm job (docs/slurm.md)."""

    kind: Literal["slurm"]
    partition: Text | None = None  # default: the cluster's default partition
    account: Text | None = None
    qos: Text | None = None
    gpus: Annotated[Union[Literal["auto"], int], BeforeValidator(_gpu_count_or_auto)] = "auto"
    gres: Text = "gpu"  # the GRES asked for as --gres=<gres>:N (e.g. gpu:a100)
    agent_gpus: NonNegativeInt = 0  # GPUs of the agent's own job (0: none idle through an agent's hours)
    cpus: PositiveInt = 4  # --cpus-per-task of every job
    memory_mib: PositiveInt | None = None  # --mem (default: the partition's)
    time_limit_min: PositiveInt | None = None  # a cap on --time (default: resenv's timeout + a margin)
    sbatch_options: tuple[Text, ...] = ()  # more sbatch options, each one `--name[=value]`
    slots: PositiveInt = 16  # resenv jobs in flight on the cluster at once
    poll_s: Seconds = 1.0  # one squeue per poll for every job of the host
    slurm_conf: Text | None = None  # SLURM_CONF for the client commands (default: the system's)
    login: SlurmLogin | None = None  # reach the cluster through this login node (default: this machine)
    sandbox: Literal["process"] = "process"

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        problems = []
        options = data.get("sbatch_options")
        for index, option in enumerate(options if isinstance(options, (list, tuple)) else []):
            if not isinstance(option, str):
                continue
            name = option.split("=", 1)[0]
            if not name.startswith("--") or " " in name:
                problems.append(_Problem(("sbatch_options", index),
                                         f"expected one long option `--name[=value]`, got {option!r}"))
            elif name in SBATCH_OWNED:
                problems.append(_Problem(("sbatch_options", index),
                                         f"{name} is set by resenv (or by a field of this host); "
                                         "use the host's fields (partition, account, qos, cpus, memory_mib, ...)"))
        return problems


Host = Annotated[
    Union[Annotated[LocalHost, Tag("kind=local")], Annotated[SshHost, Tag("kind=ssh")],
          Annotated[SlurmHost, Tag("kind=slurm")]],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known host kinds: local, ssh, slurm"),
]
