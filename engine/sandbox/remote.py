"""SSH connections to remote hosts (asyncssh): one multiplexed connection per host.

* **Authentication** is by public key only (a key file, or the user's default keys and agent);
  password and keyboard-interactive auth are never offered. Host keys are checked against
  ``known_hosts`` (the user's by default); ``strict_host_keys: false`` is for test rigs only.
* **One connection per host** carries every command, SFTP transfer and telemetry stream as its own
  channel. OpenSSH limits sessions per connection (``MaxSessions``, 10 by default), so channels are
  admitted through a semaphore that stays below it, with separate reserved permits for SFTP and for
  control commands (kill, stop, continue): a host whose exec channels are all busy can still kill.
* **Liveness**: keepalives every ``keepalive_s``; ``keepalive_count`` unanswered ones close the
  connection. A lost connection marks the host ``down`` at once (``on_state``), and a monitor task
  reconnects with exponential backoff; when it succeeds the host is ``up`` again.
* **Failures that retrying cannot mend** — a host key that is not in ``known_hosts`` or does not match
  it, a user the host refuses, a key or known_hosts file of the engine's that is missing, unreadable
  or not a private key — make the connection ``broken`` instead: no reconnecting, and the
  reason says what to fix (the known_hosts file, the key the host offered with its fingerprint,
  whether it is unknown or a mismatch; the user and the key that were refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncssh

log = logging.getLogger(__name__)

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
RESERVED_CHANNELS = 3  # one for SFTP, one for control commands, one of margin for closing channels


class HostDown(Exception):
    """The host cannot be reached now (connection refused, lost, timed out)."""


class HostBroken(HostDown):
    """The host refused the connection in a way that retrying will not mend (host key, auth)."""


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect; built from a `SshHost` spec."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    strict_host_keys: bool = True
    keepalive_s: float = 10.0
    keepalive_count: int = 3
    connect_timeout_s: float = 15.0
    max_sessions: int = 10

    @classmethod
    def from_spec(cls, name: str, spec: Any) -> SshTarget:
        return cls(
            name=name, address=spec.address, port=spec.port, user=spec.user, key=spec.key,
            known_hosts=spec.known_hosts, strict_host_keys=spec.strict_host_keys,
            keepalive_s=spec.keepalive_s, keepalive_count=spec.keepalive_count,
            connect_timeout_s=spec.connect_timeout_s, max_sessions=spec.max_sessions,
        )

    def connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "host": self.address, "port": self.port,
            "keepalive_interval": self.keepalive_s, "keepalive_count_max": self.keepalive_count,
            "connect_timeout": self.connect_timeout_s, "login_timeout": self.connect_timeout_s,
            "preferred_auth": "publickey", "password": None, "kbdint_auth": False,
            "config": [],  # the engine's behaviour must not depend on ~/.ssh/config
        }
        if self.user:
            options["username"] = self.user
        if self.key:
            options["client_keys"] = [os.path.expanduser(self.key)]
            options["agent_path"] = None
        if not self.strict_host_keys:
            options["known_hosts"] = None
        elif self.known_hosts:
            options["known_hosts"] = os.path.expanduser(self.known_hosts)
        return options


class _Client(asyncssh.SSHClient):
    def __init__(self, owner: SshConnection) -> None:
        self.owner = owner

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost(self, exc)


@dataclass
class CommandResult:
    returncode: int | None
    stdout: bytes
    stderr: bytes


class SshConnection:
    """The one connection to one host, re-established after loss; see the module docstring."""

    def __init__(self, target: SshTarget, on_state: Callable[[str, str | None], None] | None = None) -> None:
        self.target = target
        self.on_state = on_state
        self.state = "new"  # new | up | down | closed
        self.reason: str | None = None
        self.conn: asyncssh.SSHClientConnection | None = None
        self._client: _Client | None = None
        self._connect_lock = asyncio.Lock()
        pool = max(1, target.max_sessions - RESERVED_CHANNELS)
        self.channel_limit = pool
        self._channels = asyncio.Semaphore(pool)
        self._control = asyncio.Semaphore(1)
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_lock = asyncio.Lock()
        self._monitor: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self.generation = 0  # bumps on every new connection (a job can tell a reconnect happened)
        self.backoff_start_s = BACKOFF_START_S
        self.backoff_max_s = BACKOFF_MAX_S
        self.listeners: list[Callable[[str, str | None], None]] = []

    # -- state ----------------------------------------------------------------------------------
    def _set_state(self, state: str, reason: str | None) -> None:
        if state == self.state and reason == self.reason:
            return
        self.state, self.reason = state, reason
        if state == "up":
            self._up.set()
        else:
            self._up.clear()
        for callback in ([self.on_state] if self.on_state else []) + self.listeners:
            try:
                callback(state, reason)
            except Exception:  # a listener's bug must not break the connection
                log.exception("host %s: state listener failed", self.target.name)

    def mark_broken(self, reason: str) -> None:
        """The host cannot work as set up (found after connecting: a data dir its user cannot
        create, a missing tool): no job may use it, and no reconnect will change that."""
        self._set_state("broken", reason)

    def _lost(self, client: _Client, exc: Exception | None) -> None:
        if client is not self._client or self.state in ("closed", "broken"):
            if client is self._client:
                self.conn, self._client, self._sftp = None, None, None
            return
        self.conn = None
        self._client = None
        self._sftp = None
        reason = f"connection lost: {exc}" if exc else "connection closed"
        log.warning("host %s: %s", self.target.name, reason)
        self._set_state("down", reason)
        self._start_monitor()

    @property
    def up(self) -> bool:
        return self.state == "up" and self.conn is not None

    # -- connecting -----------------------------------------------------------------------------
    async def connect(self) -> asyncssh.SSHClientConnection:
        """Connect once (or return the live connection); HostDown when that fails."""
        async with self._connect_lock:
            if self.conn is not None:
                return self.conn
            if self.state == "closed":
                raise HostDown(f"{self.target.name}: connection closed")
            if self.state == "broken":
                raise HostBroken(f"{self.target.name}: {self.reason}")
            client = _Client(self)
            try:
                conn, _ = await asyncio.wait_for(
                    asyncssh.create_connection(lambda: client, **self.target.connect_options()),
                    timeout=self.target.connect_timeout_s + 1,
                )
            except (OSError, asyncssh.Error, asyncssh.KeyImportError, asyncio.TimeoutError) as error:
                where = f"{self.target.name} ({self.target.address}:{self.target.port})"
                permanent = await self._permanent_reason(error)
                if permanent is not None:
                    self._set_state("broken", permanent)
                    raise HostBroken(f"{where}: {permanent}") from error
                reason = transient_reason(self.target, error)
                self._set_state("down", reason)
                raise HostDown(f"{where}: {reason}") from error
            self._client, self.conn = client, conn
            self.generation += 1
            self._set_state("up", None)
            return conn

    async def _permanent_reason(self, error: BaseException) -> str | None:
        """What to fix, for a refusal that will be the same on every try; None for the others."""
        target = self.target
        local = local_file_problem(target, error)
        if local is not None:
            return local
        if isinstance(error, asyncssh.HostKeyNotVerifiable):
            return await host_key_problem(target)
        if isinstance(error, asyncssh.PermissionDenied):
            key = os.path.expanduser(target.key) if target.key else "the default keys and agent"
            return (f"user {target.user or '(default)'} was refused by the host (public-key auth with "
                    f"{key}): add the public key to that user's ~/.ssh/authorized_keys on the host, "
                    "or set `user`/`key` on the host in the benchmark file")
        return None

    async def start(self) -> bool:
        """First connection; on failure the host is down and the monitor keeps trying (unless the
        failure is permanent: then it stays broken)."""
        try:
            await self.connect()
            return True
        except HostBroken:
            return False
        except HostDown:
            self._start_monitor()
            return False

    def _start_monitor(self) -> None:
        if self.state in ("closed", "broken") or (self._monitor is not None and not self._monitor.done()):
            return
        try:
            self._monitor = asyncio.get_running_loop().create_task(
                self._reconnect_loop(), name=f"ssh-reconnect-{self.target.name}")
        except RuntimeError:  # no running loop (interpreter shutdown)
            pass

    async def _reconnect_loop(self) -> None:
        delay = self.backoff_start_s
        while self.state not in ("closed", "broken") and self.conn is None:
            await asyncio.sleep(delay)
            try:
                await self.connect()
            except HostBroken:
                return
            except HostDown:
                delay = min(delay * 2, self.backoff_max_s)

    async def wait_up(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self._up.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def ensure(self) -> asyncssh.SSHClientConnection:
        if self.conn is not None:
            return self.conn
        return await self.connect()

    async def close(self) -> None:
        self._set_state("closed", None)
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(BaseException):
                await self._monitor
        conn, self.conn, self._client, self._sftp = self.conn, None, None, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)

    # -- channels -------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def channel(self, control: bool = False) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """A permit to open one channel (exec or stream); control permits never wait behind jobs."""
        semaphore = self._control if control else self._channels
        async with semaphore:
            yield await self.ensure()

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0,
                  control: bool = False) -> CommandResult:
        """Run one short command through the user's shell; HostDown if the host is unreachable."""
        try:
            async with self.channel(control=control) as conn:
                result = await asyncio.wait_for(
                    conn.run(command, input=input, encoding=None, check=False), timeout)
        except (asyncssh.Error, OSError) as error:
            raise HostDown(f"{self.target.name}: {type(error).__name__}: {error}") from error
        return CommandResult(result.returncode, result.stdout or b"", result.stderr or b"")

    async def sftp(self) -> asyncssh.SFTPClient:
        """The host's SFTP client (one long-lived channel, reserved outside the exec pool)."""
        async with self._sftp_lock:
            conn = await self.ensure()
            if self._sftp is None:
                try:
                    self._sftp = await conn.start_sftp_client()
                except (asyncssh.Error, OSError) as error:
                    raise HostDown(f"{self.target.name}: sftp: {error}") from error
            return self._sftp


def transient_reason(target: SshTarget, error: BaseException) -> str:
    """A connection that failed in a way that may pass, said with what to look at."""
    where = f"{target.address}:{target.port}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused at {where}: is sshd running there and `port` right?"
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return (f"no answer from {where} within {target.connect_timeout_s:g} s: is the host up and reachable"
                " from here (a firewall, the address)?")
    if isinstance(error, socket.gaierror):
        return f"cannot resolve {target.address}: {error.strerror or error}; is `address` right?"
    return f"{type(error).__name__}: {error}".strip()


def local_file_problem(target: SshTarget, error: BaseException) -> str | None:
    """What to fix when the engine's own key or known_hosts file cannot be used (missing, unreadable,
    not a private key): a mistake in the benchmark or on this machine, the same on every try."""
    key = os.path.expanduser(target.key) if target.key else None
    if isinstance(error, asyncssh.KeyImportError):
        if key is None:
            return f"a default key in ~/.ssh cannot be used: {error}; set `key` on the host to one that can"
        if "assphrase" in str(error):
            return (f"the key file {key} is protected by a passphrase, which resenv cannot ask for: load it into "
                    "ssh-agent and leave `key` out of the host, or give a key without a passphrase")
        if key.endswith(".pub") and os.path.exists(key[:-4]):
            return f"the key file {key} is a public key: set `key` to the private half, {key[:-4]}"
        return (f"the key file {key} is not a private key ({error}): set `key` to the private key whose public"
                " half is in the remote user's ~/.ssh/authorized_keys")
    if not isinstance(error, OSError) or error.filename is None:
        return None
    path = os.path.abspath(os.fsdecode(error.filename))
    why = "does not exist" if isinstance(error, FileNotFoundError) else f"cannot be read ({error.strerror})"
    if key is not None and path == os.path.abspath(key):
        return (f"the key file {key} {why}: set `key` to the private key whose public half is in the remote"
                " user's ~/.ssh/authorized_keys (without `key`: ~/.ssh/id_* and the ssh agent)")
    known = known_hosts_file(target)
    if target.strict_host_keys and path == os.path.abspath(known):
        return (f"the known_hosts file {known} {why}: check the host's fingerprint with its admin, then "
                f"`ssh-keyscan -p {target.port} {target.address} >> {known}`")
    return None


def known_hosts_file(target: SshTarget) -> str:
    return os.path.expanduser(target.known_hosts or "~/.ssh/known_hosts")


async def host_key_problem(target: SshTarget) -> str:
    """Why the host's key was not trusted, said so that the user can act: the key it offered (type
    and SHA256 fingerprint), the known_hosts file, and whether that file has no key for the host or
    a different one (a reinstalled host, or someone in between)."""
    path = known_hosts_file(target)
    where = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
    try:
        offered = await asyncio.wait_for(asyncssh.get_server_host_key(target.address, target.port),
                                         timeout=target.connect_timeout_s)
    except (OSError, asyncssh.Error, asyncio.TimeoutError):
        offered = None
    shown = (f"{offered.get_algorithm()} key {offered.get_fingerprint()}" if offered is not None
             else "its key (it could not be read again)")
    try:
        trusted = asyncssh.read_known_hosts(path).match(target.address, target.address, target.port)[0]
    except (OSError, ValueError):
        trusted = []
    if trusted:
        return (f"host key not trusted: the host offered {shown}, which does not match the key for {where} "
                f"in {path}; if the host was reinstalled, check the new fingerprint with its admin, then "
                f"`ssh-keygen -R '{where}' -f {path}` and add the new key")
    return (f"host key not trusted: the host offered {shown}, and {where} is not in {path}; check the "
            f"fingerprint with the host's admin, then `ssh-keyscan -p {target.port} {target.address} >> {path}`")


def quote_argv(argv: list[str]) -> str:
    return " ".join(shlex.quote(str(arg)) for arg in argv)


async def round_trip(connection: SshConnection) -> float:
    """Seconds for one `true` over the warm connection (perf and `hosts check`)."""
    started = time.perf_counter()
    await connection.run("true")
    return time.perf_counter() - started
