"""The docker sandbox: one container per job attempt, through the docker SDK (docker-py).

* **Container**: created from the host's ``image`` (present on the host; resenv never pulls), with
  ``--init`` as PID 1 and an idle shell as its main process; every command is a ``docker exec``.
  Never privileged, ``no-new-privileges``; network mode ``none`` or ``host`` only (never a bridge);
  CPU quota, memory (swap included) and pids limits from the spec; ``/dev/shm`` size for NCCL, and
  a ``memlock`` ulimit only when the spec sets one (raising it needs CAP_SYS_RESOURCE in the daemon,
  which many machines lack: unset keeps the daemon's own); GPUs only when the job leased some, as
  ``DeviceRequest(device_ids=[leased ids], capabilities=[["gpu"]])`` — inside the container those
  GPUs are numbered from 0, so ``CUDA_VISIBLE_DEVICES`` is renumbered for each exec.
* **Labels**: ``resenv.run``, ``resenv.job``, ``resenv.attempt`` (and ``resenv.managed=1``). resenv
  only ever removes containers and images that carry its labels: :func:`reap` removes a run's
  orphans when an engine starts (a resumed run), :func:`prune` removes a run's containers and
  checkpoint images when it ends.
* **Nothing from the host is mounted.** The work dir has the same absolute path inside the
  container as on the engine's machine (like the remote process sandbox, so paths in templates and
  the report mean the same everywhere); the pristine repo goes in as a tar stream (``put_archive``),
  files come out as tar streams (``get_archive``), and ``report.json`` is copied back for the engine.
* **Exec**: each command runs as ``setsid env -i sh -c '<announce pgid>; cd; <export ENV read from
  stdin>; exec timeout -k GRACE BACKSTOP ARGV'``: its own process group (timeouts and kills signal
  the group through another exec), exactly its declared environment (sent on stdin, never on a
  command line, where the host's users could read a key), output streamed from the exec's socket to raw files and
  ``on_line``. The authoritative deadline is host-side and counts active (unpaused) time; the
  in-container ``timeout -k`` is a backstop (the deadline plus ``max(300 s, deadline)``) for when
  the engine or its connection to the daemon is gone — a pause longer than that lets it fire.
* **Secrets**: output is redacted as it streams (`OutputSink`). An agent CLI's own state
  (``~/.claude``, ``CODEX_HOME``, which copy tool outputs and the environment) is in the container's
  writable layer, not on a tmpfs, so it is on the docker host's disk while the container lives and
  goes into the checkpoint image (Claude Code keeps no session transcript:
  ``--no-session-persistence``). A ``--tmpfs`` for those folders at container creation would close it.
* **Pause** is ``docker pause`` (the cgroup freezer: nothing in the container runs, escapees included).
* **Checkpoint**: after the agent phase the container is committed to an image
  (``resenv-ckpt:<run>-<job>-a<attempt>``, same labels), so any tier can be re-run later in a fresh
  container started from it (``reopen=True``).

A local docker host's daemon is at ``docker.socket`` when the spec names one, else where
``DOCKER_HOST`` says (`local_docker_client`). Remote docker (``kind: ssh`` with ``sandbox: docker``)
uses the same SDK through the host's SSH connection: the remote daemon's socket (``docker.socket``,
else ``/var/run/docker.sock``) is forwarded to a local unix socket (``direct-streamlocal`` channels,
which are not sessions and so do not count against the server's MaxSessions). Chosen over running the ``docker`` CLI over SSH because it keeps one code path for
local and remote (tar streams, exec sockets, labels, device requests, typed errors) instead of
re-encoding every call as a command line and parsing its text output. Every SDK call runs in a
worker thread (``asyncio.to_thread``): the calls block, and for a remote daemon the forwarding
itself is served by the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import os
import posixpath
import re
import shlex
import signal
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .base import ExecResult, HostSetupError, OutputLine, SandboxError, SandboxPathError
from .common import (
    BackgroundTasks,
    ExecTimer,
    GroupRun,
    OutputSink,
    PauseClock,
    PgidHeader,
    copy_back,
    env_stream,
    exec_args,
    group_targets,
    kill_script,
    log_paths,
    mirrored_cwd,
    remote_command,
    resolve_mirrored,
    sandbox_env,
    wait_done,
)

log = logging.getLogger(__name__)

LABEL_RUN, LABEL_JOB, LABEL_ATTEMPT, LABEL_MANAGED = "resenv.run", "resenv.job", "resenv.attempt", "resenv.managed"
CHECKPOINT_REPO = "resenv-ckpt"


class CheckpointGone(SandboxError):
    """A tier re-run found its attempt's checkpoint image removed: that post-agent state is gone for
    good, so the re-run ends at once (never retried)."""
IDLE = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
BACKSTOP_GRACE_S = 10


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.")[:60] or "x"


def checkpoint_tag(run_id: str, job_key: str, number: int) -> str:
    return f"{_slug(run_id)}-{_slug(job_key)}-a{number}"


def local_docker_client(socket_path: str | None = None) -> Any:
    """The local daemon: at `docker.socket` when the spec names one, else where $DOCKER_HOST says
    (else the default socket), as the docker CLI finds it."""
    import docker

    if socket_path:
        return docker.DockerClient(base_url=f"unix://{socket_path}", timeout=120)
    return docker.from_env(timeout=120)


def local_client_factory(host: Any) -> Callable[[], Any]:
    """How to reach a local docker host's daemon (its `docker.socket`, else the environment's)."""
    socket_path = getattr(getattr(getattr(host, "spec", None), "docker", None), "socket", None)
    return functools.partial(local_docker_client, socket_path)


def remote_docker_client(host: Any) -> Any:
    """A docker client for an SSH host's daemon, through a forwarded unix socket (see the module doc)."""
    forward = getattr(host, "_docker_forward", None)
    if forward is None:
        raise SandboxError(f"host {host.name}: docker socket not forwarded yet")
    import docker

    return docker.DockerClient(base_url=f"unix://{forward}", timeout=120)


async def client_factory_for(host: Any) -> Callable[[], Any]:
    """How to reach a docker host's daemon: the local one, or an SSH host's through its forwarded socket."""
    if getattr(host, "kind", "local") == "ssh" and hasattr(host, "connection"):
        await forward_docker_socket(host)
        return lambda: remote_docker_client(host)
    return local_client_factory(host)


async def forward_docker_socket(host: Any, remote: str | None = None) -> str:
    """Forward the host's docker socket to a local one (once per connection)."""
    remote = remote or getattr(getattr(host.spec, "docker", None), "socket", None) or "/var/run/docker.sock"
    conn = await host.connection.ensure()
    if getattr(host, "_docker_forward_conn", None) is conn:
        return host._docker_forward
    path = os.path.join(tempfile.mkdtemp(prefix="rsv-dock-"), "docker.sock")
    await conn.forward_local_path(path, remote)
    host._docker_forward, host._docker_forward_conn = path, conn
    return path


def container_kwargs(image: str, options: Any, *, name: str, labels: Mapping[str, str], gpus: Sequence[int] = (),
                     command: Sequence[str] = IDLE) -> dict[str, Any]:
    """What a container of this host is created with: its image, the spec's limits, resenv's labels,
    the leased GPUs. The sandbox and the preflight (engine/sandbox/docker_preflight.py) share it, so a
    preflight that passes started a container like every job's."""
    from docker.types import DeviceRequest, Ulimit

    o = options
    if o.network not in ("none", "host"):  # the spec refuses it already; never a bridge
        raise SandboxError(f"network mode {o.network!r} is not allowed")
    kwargs: dict[str, Any] = {
        "image": image, "command": list(command), "name": name, "labels": dict(labels),
        "init": True, "detach": True, "privileged": False, "security_opt": ["no-new-privileges"],
        "network_mode": o.network, "pids_limit": o.pids, "shm_size": f"{o.shm_mib}m",
        "working_dir": "/", "stdin_open": False, "tty": False,
    }
    if o.memlock is not None:
        kwargs["ulimits"] = [Ulimit(name="memlock", soft=o.memlock, hard=o.memlock)]
    if o.cpus:
        kwargs["nano_cpus"] = int(o.cpus * 1e9)
    if o.memory_mib:
        kwargs["mem_limit"] = f"{o.memory_mib}m"
        kwargs["memswap_limit"] = f"{o.memory_mib}m"
    if o.user:
        kwargs["user"] = o.user
    if gpus:
        kwargs["device_requests"] = [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]
    return kwargs


@dataclass(eq=False)
class _DockerRun(GroupRun):
    exec_id: str | None = None
    sock: Any = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class DockerSandbox:
    """One container per job attempt; see the module docstring."""
    output_redacted = True  # its output reaches the raw files through OutputSink: redacted as it streams

    registry: dict[str, int] = {}  # container id -> job id, for the telemetry's process map

    def __init__(self, *, workdir: Path, image: str, options: Any, labels: dict[str, str], gpus: tuple[int, ...],
                 name: str, client_factory: Callable[[], Any], checkpoint_as: str | None = None,
                 job_id: int | None = None, host: Any = None, term_grace_s: float = 5.0) -> None:
        self.workdir = Path(os.path.abspath(workdir))
        self.workdir.mkdir(parents=True, exist_ok=True)  # the engine-side mirror (report.json)
        self.home = self.workdir / "home"
        self.tmp = self.workdir / "tmp"
        self.image = image
        self.options = options
        self.labels = labels
        self.gpus = tuple(gpus)
        self.name = name
        self.client_factory = client_factory
        self.checkpoint_as = checkpoint_as
        self.job_id = job_id
        self.host = host
        self.term_grace_s = term_grace_s
        self.client: Any = None
        self.container: Any = None
        self.container_id: str | None = None
        self.checkpoint_image: str | None = None
        self._create_lock = asyncio.Lock()
        self._staged: set[str] = set()
        self._runs: set[_DockerRun] = set()
        self._clock = PauseClock()
        self._closed = False
        self._background = BackgroundTasks()
        self.timings: dict[str, float] = {}

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def for_job(cls, host: Any, workdir: Path, *, lease: Any = None, attempt: Any = None, reopen: bool = False,
                client_factory: Callable[[], Any] | None = None, **_: Any) -> DockerSandbox:
        spec = host.spec
        run_id = attempt.ctx.run_id if attempt is not None else "adhoc"
        job_key = attempt.job["key"] if attempt is not None else workdir.parent.parent.name
        number = attempt.number if attempt is not None else 0
        attempt_id = attempt.attempt_id if attempt is not None else 0
        tag = checkpoint_tag(run_id, job_key, number)
        labels = {LABEL_MANAGED: "1", LABEL_RUN: run_id, LABEL_JOB: job_key, LABEL_ATTEMPT: str(attempt_id)}
        image = f"{CHECKPOINT_REPO}:{tag}" if reopen else spec.image
        return cls(
            workdir=workdir, image=image, options=spec.docker, labels=labels,
            gpus=tuple(lease.gpus) if lease is not None else (),
            name=f"resenv-{_slug(run_id)}-{attempt_id}-{os.urandom(2).hex()}",
            client_factory=client_factory or local_client_factory(host),
            checkpoint_as=None if reopen else f"{CHECKPOINT_REPO}:{tag}",
            job_id=attempt.job["id"] if attempt is not None else None, host=host,
        )

    async def start(self) -> None:
        """Create and start the container now (the provision phase), not at the first command: a
        container that cannot start is the provision's failure, not the checkout's."""
        await self._ensure()

    def create_kwargs(self) -> dict[str, Any]:
        """Everything the container is created with (kept in one place so tests can check it)."""
        return container_kwargs(self.image, self.options, name=self.name, labels=self.labels, gpus=self.gpus)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import docker.errors
        import requests.exceptions

        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except (docker.errors.APIError, docker.errors.DockerException, requests.exceptions.RequestException,
                OSError) as error:
            if isinstance(error, docker.errors.NotFound):
                raise SandboxError(f"docker: not found: {error}") from error
            raise SandboxError(f"docker: {type(error).__name__}: {error}") from error

    async def _ensure(self) -> Any:
        async with self._create_lock:
            if self.container is not None:
                return self.container
            if self._closed:
                raise SandboxError("sandbox is closed")
            started = time.perf_counter()
            if self.host is not None and getattr(self.host, "kind", "local") == "ssh":
                from .docker import forward_docker_socket

                await forward_docker_socket(self.host)
            # in a worker thread: the client asks the daemon for its API version, and a remote
            # daemon's forwarded socket is served by this event loop
            self.client = await self._call(self.client_factory)
            try:
                container = await self._call(self.client.containers.create, **self.create_kwargs())
            except SandboxError as error:
                self._raise_typed(error)
                raise
            self.container, self.container_id = container, container.id
            if self.job_id is not None:
                DockerSandbox.registry[container.id] = self.job_id
            try:
                await self._call(container.start)
            except SandboxError as error:
                self._raise_typed(error)
                raise
            dirs = " ".join(shlex.quote(str(d)) for d in (self.workdir, self.home, self.tmp))
            code, out = await self._exec_simple(["sh", "-c", f"mkdir -p {dirs}"])
            if code != 0:
                raise SandboxError(f"docker: cannot make the work dir in the container: {out[-300:]!r}")
            self.timings["container_start_s"] = time.perf_counter() - started
            return container

    def _raise_typed(self, error: SandboxError) -> None:
        """Raise why this container could not be created or started, typed by whether a retry can mend
        it: a missing image or settings the daemon refuses break the host (`HostSetupError`), a removed
        checkpoint ends the re-run (`CheckpointGone`); otherwise return (the caller re-raises)."""
        import docker.errors

        from .docker_preflight import IMAGE_FIX, setup_failure

        cause = error.__cause__ if error.__cause__ is not None else error
        if isinstance(cause, docker.errors.ImageNotFound):
            if self.checkpoint_as is None:
                # a reopened attempt whose checkpoint was removed: its post-agent state is gone
                raise CheckpointGone(
                    f"the checkpoint image {self.image} is gone from this docker host (`resenv prune` removes it, and"
                    " so does the run's end with docker.keep_checkpoints: false)") from error
            raise HostSetupError(f"image {self.image} is not on this docker host; "
                                 + IMAGE_FIX.format(image=self.image)) from error
        if (setup := setup_failure(cause, self.options)) is not None:
            raise HostSetupError(setup) from error

    async def _exec_simple(self, argv: list[str], *, user: str | None = None) -> tuple[int, bytes]:
        """A short helper command in the container (mkdir, kill, test); returns (exit code, output)."""
        api = self.client.api

        def run() -> tuple[int, bytes]:
            exec_id = api.exec_create(self.container_id, argv, stdout=True, stderr=True, user=user or "")["Id"]
            output = api.exec_start(exec_id)
            return api.exec_inspect(exec_id)["ExitCode"], output

        return await self._call(run)

    # -- environment ------------------------------------------------------------------------
    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        out = sandbox_env(self.home, self.tmp, env)
        visible = out.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and self.gpus:
            out["CUDA_VISIBLE_DEVICES"] = self.visible_gpus(visible)
        return out

    def visible_gpus(self, host_ids: str) -> str:
        """Host GPU ids ("3,5") as the container numbers them ("0,1"): its leased GPUs are 0..n-1."""
        order = {str(gpu): str(index) for index, gpu in enumerate(self.gpus)}
        return ",".join(order.get(part.strip(), part.strip()) for part in host_ids.split(",") if part.strip())

    @property
    def paused(self) -> bool:
        return self._clock.paused

    # -- exec ---------------------------------------------------------------------------------
    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, timeout_name: str = "exec", stdin: bytes | None = None,
        log_prefix: Path, on_line: Callable[[OutputLine], None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed")
        args = exec_args(argv)
        run_cwd = mirrored_cwd(self.workdir, cwd)
        if timeout is not None:
            backstop = timeout + max(300.0, timeout)
            args = ["timeout", "-k", str(BACKSTOP_GRACE_S), f"{backstop:.0f}", *args]
        command = ["sh", "-c", remote_command(args, run_cwd)]
        stdin = env_stream(self.child_env(env)) + (stdin or b"")
        stdout_path, stderr_path = log_paths(log_prefix)
        timer = ExecTimer(self._clock, timeout_name, stdout_path, stderr_path)

        await self._clock.resumed.wait()
        await self._ensure()
        if self._closed:
            raise SandboxError("sandbox is closed")
        run = _DockerRun()
        self._runs.add(run)
        try:
            with open(stdout_path, "wb") as out_f, open(stderr_path, "wb") as err_f:
                code = await self._supervise(run, command, stdin, out_f, err_f, on_line, on_start, timeout, timer)
        finally:
            self._runs.discard(run)
            run.done.set()
        return timer.result(code, run.timed_out, run.killed)

    async def _supervise(
        self, run: _DockerRun, command: list[str], stdin: bytes | None, out_f: BinaryIO, err_f: BinaryIO,
        on_line: Callable[[OutputLine], None] | None, on_start: Callable[[int], None] | None,
        timeout: float | None, timer: ExecTimer,
    ) -> int | None:
        api = self.client.api
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()

        def start() -> Any:
            exec_id = api.exec_create(self.container_id, command, stdout=True, stderr=True, stdin=True)["Id"]
            run.exec_id = exec_id
            return api.exec_start(exec_id, socket=True)

        sock = await self._call(start)
        raw = getattr(sock, "_sock", sock)
        run.sock = raw

        def reader() -> None:
            from docker.utils.socket import frames_iter

            try:
                if stdin:
                    raw.sendall(stdin)
                with contextlib.suppress(OSError):
                    raw.shutdown(socket.SHUT_WR)
                for stream_id, data in frames_iter(sock, tty=False):
                    loop.call_soon_threadsafe(queue.put_nowait, (stream_id, data))
            except Exception as error:  # the daemon went away: the exec's end tells
                log.debug("docker exec stream ended: %s", error)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        thread = threading.Thread(target=reader, name="docker-exec", daemon=True)
        thread.start()
        watcher = asyncio.create_task(self._deadline(run, timeout, timer)) if timeout is not None else None
        sinks = {1: OutputSink(out_f, "stdout", on_line), 2: OutputSink(err_f, "stderr", on_line)}
        header = PgidHeader()

        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                stream_id, chunk = item
                if stream_id == 2 and not header.done:
                    pgid, chunk = header.feed(chunk)
                    if pgid is not None:
                        run.pgid = pgid
                        run.pgid_known.set()
                        if on_start is not None:
                            on_start(pgid)
                        if self._closed or run.killed:
                            self._background.spawn(self._signal_groups([run], "KILL"))
                    if not chunk:
                        continue
                try:
                    sinks[stream_id if stream_id in (1, 2) else 1].write(chunk)
                except Exception as error:  # on_line raised or the disk is full: stop the command
                    run.fail(error)
                    self._background.spawn(self._signal_groups([run], "KILL"))
            if rest := header.leftover():
                sinks[2].write(rest)
            for sink in sinks.values():
                sink.close()
            run.finished.set()
            if watcher is not None:
                if run.timed_out:
                    await watcher
                else:
                    watcher.cancel()
            if run.error is not None:
                raise run.error
            info = await self._call(api.exec_inspect, run.exec_id)
            if info.get("Running"):
                await asyncio.sleep(0.05)
                info = await self._call(api.exec_inspect, run.exec_id)
            code = info.get("ExitCode")
            if code is None:
                raise SandboxError("docker: the exec ended without an exit code (daemon or container gone)")
            if code == 124 and run.timed_out:  # the backstop and the deadline agree
                return -signal.SIGTERM
            return run.exit_code(code)
        except asyncio.CancelledError:
            run.killed = True
            raise
        finally:
            run.pgid_known.set()
            if watcher is not None and not watcher.done():
                watcher.cancel()
            if run.pgid is not None and self.container is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._signal_groups([run], "KILL", wait_pgid=False))
            with contextlib.suppress(OSError):
                raw.close()
            await asyncio.to_thread(thread.join, 5)

    async def _deadline(self, run: _DockerRun, timeout: float, timer: ExecTimer) -> None:
        await timer.expire(timeout)
        if run.finished.is_set():
            return
        run.timed_out = True
        await self._signal_groups([run], "TERM", also_cont=True)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.finished.wait(), self.term_grace_s)
        await self._signal_groups([run], "KILL")

    async def _signal_groups(self, runs: list[_DockerRun], sig: str, also_cont: bool = False,
                             wait_pgid: bool = True) -> None:
        groups = await group_targets(runs, sig, wait_pgid)
        if not groups or self.container is None:
            return
        with contextlib.suppress(SandboxError):
            await self._exec_simple(["sh", "-c", kill_script(groups, sig, also_cont)], user="0")

    # -- control ----------------------------------------------------------------------------
    def pause(self) -> None:
        """`docker pause`: the cgroup freezer stops everything in the container; clocks stop too."""
        if not self._clock.pause():
            return
        if self.container is not None:
            self._background.spawn(self._call(self.container.pause))

    def resume(self) -> None:
        if not self._clock.paused:
            return
        if self.container is not None:
            self._background.spawn(self._call(self.container.unpause))
        self._clock.resume()

    async def kill(self) -> None:
        runs = list(self._runs)
        for run in runs:
            run.killed = True
        if not runs:
            return
        if self._clock.paused and self.container is not None:
            with contextlib.suppress(SandboxError):
                await self._call(self.container.unpause)
        await self._signal_groups(runs, "KILL")
        await wait_done(runs)

    async def close(self) -> None:
        """Kill what runs, then remove the container (its checkpoint image stays until the run's end)."""
        self._closed = True
        await self.kill()
        self.resume()
        await self._background.drain(10)
        container, self.container = self.container, None
        if container is not None:
            DockerSandbox.registry.pop(container.id, None)
            with contextlib.suppress(SandboxError):
                await self._call(container.remove, force=True)

    async def checkpoint(self) -> str | None:
        """Commit the container's state (after the agent) so a tier can be re-run in a fresh container."""
        if self.container is None or self.checkpoint_as is None:
            return None
        repository, _, tag = self.checkpoint_as.partition(":")
        image = await self._call(self.container.commit, repository=repository, tag=tag,
                                 conf={"Labels": dict(self.labels)}, pause=True)
        self.checkpoint_image = image.id
        return image.id

    # -- files ------------------------------------------------------------------------------
    def resolve(self, rel_path: str) -> str:
        return resolve_mirrored(self.workdir, rel_path)

    async def _check_real(self, target: str, rel_path: str) -> None:
        root = shlex.quote(str(self.workdir))
        quoted = shlex.quote(target)
        script = (f"p={quoted}; while [ ! -e \"$p\" ] && [ ! -L \"$p\" ]; do p=$(dirname \"$p\"); done; "
                  f"r=$(readlink -f \"$p\"); w=$(readlink -f {root}); case \"$r/\" in \"$w\"/*) exit 0;; esac; exit 3")
        code, _ = await self._exec_simple(["sh", "-c", script])
        if code == 3:
            raise SandboxPathError(f"path escapes the sandbox: {rel_path!r}")

    async def put(self, rel_path: str, data: bytes | Path) -> Path:
        target = self.resolve(rel_path)
        await self._ensure()
        await self._check_real(target, rel_path)
        parent, name = posixpath.split(target)
        if isinstance(data, (bytes, bytearray, memoryview)):
            payload = _tar_bytes(name, bytes(data))
        else:
            src = Path(data)
            if not src.exists():
                raise FileNotFoundError(f"no such file or directory: {src}")
            payload = await asyncio.to_thread(_tar_path, src, name)
        await self._exec_simple(["mkdir", "-p", parent])
        ok = await self._call(self.container.put_archive, parent, payload)
        if not ok:
            raise SandboxError(f"docker: put {rel_path!r} failed")
        return Path(target)

    async def put_abs(self, path: Path) -> None:
        """Copy a host tree to the same absolute path in the container (the pristine repo)."""
        await self._ensure()
        parent, name = os.path.split(str(path))
        payload = await asyncio.to_thread(_tar_path, path, name)
        await self._exec_simple(["mkdir", "-p", parent])
        if not await self._call(self.container.put_archive, parent, payload):
            raise SandboxError(f"docker: copying {path} into the container failed")

    async def get(self, rel_path: str, max_bytes: int = 50 * 2**20) -> bytes:
        target = self.resolve(rel_path)
        await self._ensure()
        await self._check_real(target, rel_path)
        try:
            stream, stat = await self._call(self.container.get_archive, target)
        except SandboxError as error:
            if "not found" in str(error).lower() or "no such" in str(error).lower():
                raise FileNotFoundError(f"no such file in sandbox: {rel_path!r}") from None
            raise
        mode = stat.get("mode", 0)
        if mode & (1 << 31) or mode & (1 << 27) or mode & (1 << 26) or mode & (1 << 25) or mode & (1 << 21):
            raise SandboxError(f"not a regular file: {rel_path!r}")  # dir, symlink, named pipe, socket, device
        if stat.get("size", 0) > max_bytes:
            raise SandboxError(f"{rel_path!r} is {stat['size']} bytes, more than max_bytes={max_bytes}")

        def read() -> bytes:
            buffer = io.BytesIO()
            for chunk in stream:
                buffer.write(chunk)
                if buffer.tell() > max_bytes + 1024 * 1024:
                    break
            buffer.seek(0)
            with tarfile.open(fileobj=buffer) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise SandboxError(f"not a regular file: {rel_path!r}")
                handle = tar.extractfile(member)
                assert handle is not None
                return handle.read(max_bytes + 1)

        data = await asyncio.to_thread(read)
        if len(data) > max_bytes:
            raise SandboxError(f"{rel_path!r} is more than max_bytes={max_bytes}")
        return data

    # -- optional hooks the lifecycle and tiers look for: the container cannot see the engine's files ----
    async def stage_pristine(self, path: Path) -> None:
        if str(path) not in self._staged:
            await self.put_abs(Path(path))
            self._staged.add(str(path))

    async def sync_back(self, rel_path: str, max_bytes: int = 50 * 2**20) -> None:
        await copy_back(self.get, self.workdir, rel_path, max_bytes)

    async def path_status(self, path: str) -> tuple[bool, bool]:
        await self._ensure()
        quoted = shlex.quote(path)
        _, out = await self._exec_simple(["sh", "-c", f"test -e {quoted} && echo e; test -x {quoted} && echo x; true"])
        return b"e" in out, b"x" in out


def _tar_bytes(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _tar_path(src: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(src), arcname=name, recursive=True)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------- run hygiene
def reap(client: Any, run_id: str) -> list[str]:
    """Remove containers an earlier engine of this run left behind (only containers resenv labelled)."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_RUN}={run_id}"]}):
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.id)
    return removed


def prune(client: Any, run_id: str, images: bool = True) -> dict[str, list[str]]:
    """At a run's end: its leftover containers and (unless kept for later tier retries) its
    checkpoint images, by label only."""
    containers = reap(client, run_id)
    removed: list[str] = []
    if not images:
        return {"containers": containers, "images": removed}
    for image in client.images.list(filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_RUN}={run_id}"]}):
        with contextlib.suppress(Exception):
            client.images.remove(image.id, force=True)
            removed.append(image.id)
    return {"containers": containers, "images": removed}
