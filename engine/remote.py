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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
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
    """The host cannot be reached now (connection refused, lost, timed out, auth failed)."""


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

    def _lost(self, client: _Client, exc: Exception | None) -> None:
        if client is not self._client or self.state == "closed":
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
            client = _Client(self)
            try:
                conn, _ = await asyncio.wait_for(
                    asyncssh.create_connection(lambda: client, **self.target.connect_options()),
                    timeout=self.target.connect_timeout_s + 1,
                )
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as error:
                reason = f"{type(error).__name__}: {error}".strip()
                self._set_state("down", reason)
                raise HostDown(f"{self.target.name} ({self.target.address}:{self.target.port}): {reason}") from error
            self._client, self.conn = client, conn
            self.generation += 1
            self._set_state("up", None)
            return conn

    async def start(self) -> bool:
        """First connection; on failure the host is down and the monitor keeps trying."""
        try:
            await self.connect()
            return True
        except HostDown:
            self._start_monitor()
            return False

    def _start_monitor(self) -> None:
        if self.state == "closed" or (self._monitor is not None and not self._monitor.done()):
            return
        try:
            self._monitor = asyncio.get_running_loop().create_task(
                self._reconnect_loop(), name=f"ssh-reconnect-{self.target.name}")
        except RuntimeError:  # no running loop (interpreter shutdown)
            pass

    async def _reconnect_loop(self) -> None:
        delay = self.backoff_start_s
        while self.state != "closed" and self.conn is None:
            await asyncio.sleep(delay)
            try:
                await self.connect()
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


def quote_argv(argv: list[str]) -> str:
    return " ".join(shlex.quote(str(arg)) for arg in argv)


async def round_trip(connection: SshConnection) -> float:
    """Seconds for one `true` over the warm connection (perf and `hosts check`)."""
    started = time.perf_counter()
    await connection.run("true")
    return time.perf_counter() - started
