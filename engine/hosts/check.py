"""What a host has and what is wrong with it, as `resenv hosts check` shows it (engine/cli/hosts.py).

One small POSIX shell script gathers the facts (OS, CPUs, GPUs, driver and CUDA version, docker,
free disk at the data dir, the tools the sandboxes need); it runs locally for `local` hosts and over
the host's SSH connection for `ssh` hosts, so both are judged by the same rules. On an SSH host the data
dir is the host's own (`data_dir:`, or the remote user's ``${XDG_DATA_HOME:-$HOME/.local/share}/resenv``,
resolved by the script): the facts name it, and it is proved by creating (and removing) a file there. A missing NVIDIA
driver is a state (`no NVIDIA driver`), a problem only when the spec asks that host for GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from types import SimpleNamespace
from pathlib import Path
from typing import Any

FACTS_SCRIPT = r"""
d="$1"
if [ -z "$d" ]; then
  case ${XDG_DATA_HOME:-} in /*) d="$XDG_DATA_HOME/resenv";; *) d="$HOME/.local/share/resenv";; esac
fi
echo "data_dir=$d"
p="$d"; while [ -n "$p" ] && [ ! -e "$p" ]; do p=$(dirname "$p"); done
echo "hostname=$(hostname 2>/dev/null || cat /etc/hostname)"
echo "kernel=$(uname -srm)"
( . /etc/os-release 2>/dev/null && echo "os=$PRETTY_NAME" )
echo "cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "mem_kib=$(awk '/^MemTotal:/{print $2}' /proc/meminfo 2>/dev/null)"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "nvidia_smi=$(command -v nvidia-smi)"
  nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits 2>&1 | sed 's/^/gpu=/'
  nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/CUDA Version: */cuda=/'
else
  echo "nvidia_smi="
fi
if command -v docker >/dev/null 2>&1; then
  echo "docker=$(docker version --format '{{.Server.Version}}' 2>&1 | grep -v '^ *$' | tr '\n' ' ')"
else
  echo "docker="
fi
echo "disk_free_kib=$(df -Pk "$p" 2>/dev/null | awk 'NR==2{print $4}')"
for tool in git tar setsid sh python3; do echo "tool_$tool=$(command -v $tool)"; done
echo "user=$(id -un 2>/dev/null || id -u)"
echo "uid=$(id -u)"
if [ -n "$2" ] && [ -e "$2" ]; then echo "shares_data_dir=yes"; fi
echo "python3=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
if out=$(mkdir -p "$d" 2>&1) && out=$(mktemp "$d/.resenv-check.XXXXXX" 2>&1) && rm -f "$out"; then
  echo "data_dir_writable=yes"
else
  echo "data_dir_error=$(printf '%s' "$out" | tr '\n' ' ')"
fi
"""

MIN_FREE_GIB = 10.0
NEEDED_PYTHON = (3, 11)  # the built-in baseline agent's driver; the probe kit runs on older ones too
_DRIVERLESS = re.compile(r"(couldn't communicate with the NVIDIA driver|NVIDIA-SMI has failed|No devices were found)", re.I)


@dataclass
class HostFacts:
    name: str
    kind: str
    reachable: bool = False
    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    cpus: int | None = None
    mem_gib: float | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    gpu_state: str = "unknown"  # ok | no NVIDIA driver | nvidia-smi failed: ...
    docker: str | None = None  # server version, or None
    slurm: dict[str, Any] | None = None  # partition, nodes, GPUs per node, limits (slurm hosts)
    docker_error: str | None = None
    docker_preflight: Any = field(default=None, repr=False)  # sandbox: docker: the run's preflight (daemon, image, a container)
    image: str | None = None
    disk_free_gib: float | None = None
    tools: dict[str, str | None] = field(default_factory=dict)
    user: str | None = None
    python3: str | None = None  # the version of the host's python3, None: none on PATH
    data_dir: str | None = None  # the data dir on the host (an SSH host's own), as the script resolved it
    data_dir_error: str | None = None  # why the user cannot create files in the data dir
    uid: int | None = None  # the remote user's
    shares_data_dir: bool = False  # the host sees the engine's own data dir (same machine, shared file system)
    problems: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)  # problems no job can run with: the host is broken
    notes: list[str] = field(default_factory=list)
    round_trip_ms: float | None = None

    def inventory(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "reachable": self.reachable, "hostname": self.hostname, "os": self.os,
            "kernel": self.kernel, "cpus": self.cpus, "mem_gib": self.mem_gib,
            "gpus": [gpu["index"] for gpu in self.gpus], "gpu_names": [gpu.get("name") for gpu in self.gpus],
            "gpu_state": self.gpu_state, "driver": self.driver_version, "cuda": self.cuda_version,
            "docker": self.docker, "disk_free_gib": self.disk_free_gib, "user": self.user,
            "python3": self.python3, "data_dir": self.data_dir, "problems": self.problems,
        }


def parse_facts(name: str, kind: str, text: str) -> HostFacts:
    facts = HostFacts(name=name, kind=kind, reachable=True)
    smi_present = False
    for line in text.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "hostname":
            facts.hostname = value or None
        elif key == "kernel":
            facts.kernel = value or None
        elif key == "os":
            facts.os = value or None
        elif key == "cpus" and value.isdecimal():
            facts.cpus = int(value)
        elif key == "mem_kib" and value.isdecimal():
            facts.mem_gib = round(int(value) / 2**20, 1)
        elif key == "nvidia_smi":
            smi_present = bool(value)
        elif key == "gpu":
            parts = [part.strip() for part in value.split(",")]
            if len(parts) >= 5 and parts[0].isdecimal():
                facts.gpus.append({"index": int(parts[0]), "uuid": parts[1], "name": parts[2],
                                   "memory_mib": _number(parts[3])})
                facts.driver_version = parts[4]
            elif value:
                facts.gpu_state = ("no NVIDIA driver: " if _DRIVERLESS.search(value) else "nvidia-smi failed: ") + value[:200]
        elif key == "cuda":
            facts.cuda_version = value or None
        elif key == "docker":
            if value and re.match(r"^\d+\.\d+", value):
                facts.docker = value
            elif value:
                facts.docker_error = value[:300]
        elif key == "disk_free_kib" and value.isdecimal():
            facts.disk_free_gib = round(int(value) / 2**20, 1)
        elif key.startswith("tool_"):
            facts.tools[key[5:]] = value or None
        elif key == "user":
            facts.user = value or None
        elif key == "python3":
            facts.python3 = value or None
        elif key == "uid" and value.isdecimal():
            facts.uid = int(value)
        elif key == "shares_data_dir":
            facts.shares_data_dir = value == "yes"
        elif key == "data_dir":
            facts.data_dir = value or None
        elif key == "data_dir_error":
            facts.data_dir_error = value or "unknown error"
    if not smi_present:
        facts.gpu_state = "no NVIDIA driver"
    elif facts.gpus:
        facts.gpu_state = "ok"
    elif facts.gpu_state == "unknown":
        facts.gpu_state = "no NVIDIA driver: nvidia-smi lists no GPU"
    return facts


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def judge(facts: HostFacts, spec: Any, data_dir: Path | None = None, mirror: bool = False) -> HostFacts:
    """Add every problem the host has for what the spec asks of it (`mirror`: an SSH host that uses the
    engine's own paths, a Slurm login node; any other SSH host has its own data dir)."""
    if not facts.reachable:
        return facts
    wanted = getattr(spec, "gpus", "auto")
    have = {gpu["index"] for gpu in facts.gpus}
    if wanted != "auto":
        ids = set(range(wanted)) if isinstance(wanted, int) else set(wanted)
        if ids and facts.gpu_state != "ok":
            facts.problems.append(f"spec asks for GPUs {sorted(ids)} but the host has {facts.gpu_state}")
        elif ids - have:
            facts.problems.append(f"spec asks for GPU ids {sorted(ids - have)} the host does not have (has {sorted(have)})")
    elif facts.gpu_state not in ("ok", "no NVIDIA driver"):
        facts.problems.append(facts.gpu_state)
    if getattr(spec, "sandbox", "process") == "docker" and facts.docker_preflight is not None:
        preflight = facts.docker_preflight
        facts.docker, facts.image = preflight.version or facts.docker, preflight.image_id
        if preflight.version is not None:
            facts.docker_error = None
        facts.blocking.extend(preflight.problems)
        facts.notes.extend(preflight.notes)
    if facts.disk_free_gib is not None and facts.disk_free_gib < MIN_FREE_GIB:
        facts.problems.append(f"only {facts.disk_free_gib} GiB free at the data dir (want >= {MIN_FREE_GIB:g})")
    remote = getattr(spec, "kind", "local") == "ssh"
    needed = ["git", "tar", "sh"] + (["setsid", "python3"] if remote else [])
    for tool in needed:
        if facts.tools and not facts.tools.get(tool):
            facts.blocking.append(f"{tool} is not on the PATH of {facts.user or 'the user'} on the host: install it"
                                  " (the checkout needs git, the file transfers tar, the commands setsid and sh,"
                                  " the probes python3)")
    shared_by_another = mirror and facts.shares_data_dir and facts.uid is not None and facts.uid != os.getuid()
    if remote and not mirror and facts.data_dir_error is not None:
        facts.blocking.append(
            f"cannot create files in the host's data dir {facts.data_dir} as {facts.user or 'the user'}:"
            f" {facts.data_dir_error.strip()}; set `data_dir:` of host {facts.name} in the benchmark to a folder"
            " this user can create")
    elif shared_by_another and data_dir is not None:
        engine_user = pwd_name(os.getuid())
        facts.blocking.append(
            f"the host sees this machine's data dir {data_dir} (the same machine, or a shared file system), and its"
            f" user {facts.user or facts.uid} cannot write the folders resenv creates there as {engine_user}: run"
            f" resenv as {facts.user or 'that user'}, or give a data dir the host does not share (`--data-dir DIR`)")
    elif facts.data_dir_error is not None and data_dir is not None:
        fix = ("choose a data dir that this user can create on every SSH host, the same path as here"
               " (`resenv run --data-dir DIR`, or RESENV_DATA_DIR): an SSH host's work dirs have the engine's paths"
               if remote else "choose a data dir you can write (`resenv run --data-dir DIR`)")
        facts.blocking.append(f"cannot create files in {data_dir} as {facts.user or 'the user'}: "
                              f"{facts.data_dir_error.strip()}; {fix}")
    if facts.python3 and tuple(int(part) for part in facts.python3.split(".")[:2]) < NEEDED_PYTHON:
        facts.notes.append(f"python3 {facts.python3} is older than {'.'.join(map(str, NEEDED_PYTHON))}: the built-in"
                           " baseline agent cannot run here (other agents and the probes can); set its `driver:`")
    facts.problems.extend(facts.blocking)
    return facts


def pwd_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


async def local_facts(name: str, spec: Any, data_dir: Path) -> HostFacts:
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", FACTS_SCRIPT, "facts", str(data_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL)
    out, _ = await process.communicate()
    facts = parse_facts(name, "local", out.decode(errors="replace"))
    if getattr(spec, "sandbox", "process") == "docker":
        facts.docker_preflight = await docker_preflight(SimpleNamespace(name=name, kind="local", spec=spec),
                                                        _first_gpu(facts, spec))
    return judge(facts, spec, data_dir)


async def docker_preflight(host: Any, gpus: tuple[int, ...] = ()) -> Any:
    """The preflight a run does on a docker host (engine/sandbox/docker_preflight.py), for the check."""
    from ..sandbox.docker import client_factory_for
    from ..sandbox.docker_preflight import run_preflight

    factory = await client_factory_for(host)
    return await asyncio.to_thread(run_preflight, factory, host.spec.image, host.spec.docker, host=host.name,
                                   run_id="hosts-check", remote=host.kind == "ssh", gpus=gpus)


def _first_gpu(facts: HostFacts, spec: Any) -> tuple[int, ...]:
    """One GPU for the preflight's container to ask for, when the spec lets jobs on this host have GPUs."""
    wanted = getattr(spec, "gpus", "auto")
    if wanted == 0 or wanted == [] or facts.gpu_state != "ok":
        return ()
    return tuple(sorted(gpu["index"] for gpu in facts.gpus)[:1])


async def remote_facts(connection: Any, spec: Any, data_dir: Path, check_docker: bool = False,
                       mirror: bool = False) -> HostFacts:
    """The facts of an SSH host; its data dir is its own (`spec.data_dir`, or the remote user's XDG
    data dir, which the script resolves), or with `mirror` the engine's `data_dir`."""
    from ..sandbox.remote import HostDown, round_trip

    name = connection.target.name
    marker = None
    if mirror:  # a file only this machine made: the host sees it when it shares the data dir with the engine
        with contextlib.suppress(OSError):
            if data_dir.is_dir():
                handle, marker = tempfile.mkstemp(prefix=".resenv-shared-", dir=data_dir)
                os.close(handle)
    there = str(data_dir) if mirror else (getattr(spec, "data_dir", None) or "")
    command = ("sh -c " + shlex.quote(FACTS_SCRIPT) + " facts " + shlex.quote(there) + " "
               + shlex.quote(marker or ""))
    try:
        await connection.ensure()
        result = await connection.run(command, timeout=60)
        rtt = await round_trip(connection)
    except (HostDown, asyncio.TimeoutError) as error:
        facts = HostFacts(name=name, kind="ssh", reachable=False)
        facts.problems.append(f"unreachable: {error}")
        return facts
    finally:
        if marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(marker)
    facts = parse_facts(name, "ssh", result.stdout.decode(errors="replace"))
    if getattr(spec, "sandbox", "process") == "docker" and check_docker:
        facts.docker_preflight = await docker_preflight(SimpleNamespace(name=name, kind="ssh", spec=spec,
                                                                        connection=connection), _first_gpu(facts, spec))
    facts = judge(facts, spec, data_dir, mirror)
    facts.round_trip_ms = round(rtt * 1000, 2)
    return facts
