"""Whether a docker host can run jobs at all, asked once per host before any job is tried.

A docker host that cannot work fails every job the same way: the daemon is not there, the image is
not on it (resenv never pulls), the image lacks a tool every command needs, or the daemon refuses the
container's settings (a ``memlock`` ulimit a daemon without CAP_SYS_RESOURCE may not raise). Each
of these would otherwise surface inside the first job's first command, look like a passing infra
failure, and be retried. The preflight reaches the daemon, inspects the image and starts one
throwaway container with exactly the settings every job's container gets
(`docker.container_kwargs`), which checks the image's tools and prints its python3's version; the
host is then *broken* (`Host.mark_broken`, jobs `error/host_setup`, never retried) with the cause
and the fix in one line, and `resenv hosts check` reports the same lines.

`setup_failure` names the same deterministic failures when they happen to a job's own container
(the daemon was changed after the preflight), so that the job is not retried either.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .docker import LABEL_MANAGED, LABEL_RUN, container_kwargs

LABEL_PREFLIGHT = "resenv.preflight"
# every exec is `setsid sh -c '... mkdir; env -i ... timeout ...'`; the checkout is a git clone; the probes
# and the built-in baseline run python3
NEEDED_TOOLS = ("sh", "env", "setsid", "timeout", "mkdir", "git", "python3")
NEEDED_PYTHON = (3, 11)  # the built-in baseline agent's driver
PROBE = ("for t in " + " ".join(NEEDED_TOOLS) + "; do command -v $t >/dev/null 2>&1 || echo missing=$t; done; "
         "python3 -c 'import sys; print(\"python3=%d.%d.%d\" % sys.version_info[:3])' 2>/dev/null; exit 0")
WAIT_S = 120
IMAGE_FIX = ("build one there with `resenv image build --tag {image}` (README: A docker host, step by step),"
             " or `docker load` it; resenv never pulls")


@dataclass
class DockerPreflight:
    """What the preflight learned: the daemon's version, the image's id and python3, and every
    problem that stops the host (cause and fix, one line each)."""

    daemon: str | None = None  # where the daemon was looked for (a socket or $DOCKER_HOST)
    version: str | None = None
    image_id: str | None = None
    python3: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def daemon_address(options: Any, remote: bool) -> str:
    """Where this host's daemon is looked for, as a person would write it."""
    return daemon_url(options.socket, remote)


def daemon_url(socket_path: str | None, remote: bool = False) -> str:
    """A daemon at `socket_path`, else where the docker CLI would look (for a remote host: its default)."""
    if socket_path:
        return f"unix://{socket_path.removeprefix('unix://')}"
    if remote:
        return "unix:///var/run/docker.sock"
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def explanation(error: BaseException) -> str:
    """The daemon's own words for an SDK error, on one line (not the request URL around them)."""
    text = getattr(error, "explanation", None) or str(error)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())


def setup_failure(error: BaseException, options: Any) -> str | None:
    """Cause and fix when starting a container failed in a way that no retry can mend, else None."""
    text = explanation(error)
    if re.search(r"setting rlimit|rlimit type 8", text):
        limit = "unlimited" if options.memlock == -1 else f"{options.memlock} bytes"
        return (f"the docker daemon may not raise the containers' memlock limit to {limit} ({text}): it lacks "
                "CAP_SYS_RESOURCE or its own limit is lower; leave `docker.memlock` unset (the default) or set it"
                " no higher than the daemon's limit")
    if re.search(r"could not select device driver|unknown or invalid runtime", text):
        return (f"the docker daemon cannot give containers GPUs ({text}): install the NVIDIA Container Toolkit and"
                " register its runtime (`nvidia-ctk runtime configure --runtime=docker`), then restart dockerd")
    if re.search(r"No such image|not found: manifest unknown|pull access denied", text, re.I):
        return None  # the caller names the image (a job's or a checkpoint's)
    if re.search(r"invalid (argument|user)|unable to find user|no matching entries in passwd", text, re.I):
        return f"the docker daemon refuses the container's settings ({text}): fix the host's `docker:` options"
    return None


def run_preflight(client_factory: Callable[[], Any], image: str, options: Any, *, host: str, run_id: str,
                  remote: bool = False, gpus: Sequence[int] = ()) -> DockerPreflight:
    """Reach the daemon, find the image, start one throwaway container with the jobs' settings (and,
    on a host with GPUs, a request for one of them, as a GPU job's container makes).

    Blocking (the SDK): call it in a worker thread. Every container it starts carries the run's
    labels, so a crash before its removal leaves nothing `reap` would not find."""
    import docker.errors

    result = DockerPreflight(daemon=daemon_address(options, remote))
    try:
        client = client_factory()
        client.ping()
        result.version = str(client.version().get("Version") or "") or None
    except Exception as error:  # any failure to reach it: the message says which
        fix = ("start dockerd there, or set `docker.socket` to its socket" if remote else
               "start dockerd, or point `docker.socket` (or DOCKER_HOST) at its socket")
        result.problems.append(f"cannot reach the docker daemon at {result.daemon}: {explanation(error)}; {fix}")
        return result
    try:
        result.image_id = client.images.get(image).id
    except docker.errors.ImageNotFound:
        result.problems.append(f"image {image} is not on this docker host; " + IMAGE_FIX.format(image=image))
        return result
    except Exception as error:
        result.problems.append(f"cannot inspect image {image}: {explanation(error)}")
        return result
    name = f"resenv-preflight-{os.urandom(3).hex()}"
    labels = {LABEL_MANAGED: "1", LABEL_RUN: run_id, LABEL_PREFLIGHT: "1"}
    kwargs = container_kwargs(image, options, name=name, labels=labels, gpus=gpus, command=["sh", "-c", PROBE])
    container = None
    try:
        container = client.containers.create(**kwargs)
        container.start()
        status = container.wait(timeout=WAIT_S)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    except Exception as error:
        cause = setup_failure(error, options)
        result.problems.append(cause or f"a container of image {image} with this host's `docker:` settings does not"
                                        f" start: {explanation(error)}")
        return result
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
    _read_probe(result, image, output, status)
    return result


def _read_probe(result: DockerPreflight, image: str, output: str, status: Any) -> None:
    missing = [line.split("=", 1)[1] for line in output.splitlines() if line.startswith("missing=")]
    for line in output.splitlines():
        if line.startswith("python3="):
            result.python3 = line.split("=", 1)[1].strip()
    code = status.get("StatusCode") if isinstance(status, dict) else None
    if code not in (0, None) and not missing:
        result.problems.append(f"a container of image {image} cannot run `sh` (exit {code}: {output.strip()[-200:]!r});"
                               " " + IMAGE_FIX.format(image=image))
        return
    if missing:
        result.problems.append(
            f"image {image} lacks {', '.join(missing)} on its PATH (every command runs as `setsid sh -c ... env -i"
            " ... timeout`, the checkout with git, the probes with python3); " + IMAGE_FIX.format(image=image))
    if result.python3 and tuple(int(part) for part in result.python3.split(".")[:2]) < NEEDED_PYTHON:
        result.notes.append(f"image {image} has python3 {result.python3}, older than "
                            f"{'.'.join(map(str, NEEDED_PYTHON))}: the built-in baseline agent cannot run in it")
