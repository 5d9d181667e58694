"""resenv-tui --serve: the same dashboard in a browser, for a team watching a long campaign.

textual-serve runs one dashboard process per browser tab (it passes the command to a shell), so the
command is built here with every argument quoted: a store path with spaces or quotes stays one
argument and runs nothing. The served dashboard is read-only unless `writable`, and it binds to
loopback unless told otherwise. The URL is printed once the port is bound, so a port in use or a host
that does not resolve is one line, never a URL that does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import sys
from pathlib import Path

from aiohttp import web
from textual_serve.server import Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


class ServeError(Exception):
    """Serving could not start (the port is taken, the host does not resolve or is not this machine's)."""


def served_command(db: Path, run_id: str, *, writable: bool) -> str:
    """The shell command each browser tab runs: this interpreter's dashboard on this store and run."""
    argv = [sys.executable, "-m", "resenv.tui", "--db", str(db), run_id]
    if not writable:
        argv.append("--readonly")
    return shlex.join(argv)


class _QuietServer(Server):
    """textual-serve's server without its banner: `serve` prints the one line that matters."""

    async def on_startup(self, app: web.Application) -> None:
        pass


def serve(db: Path, run_id: str, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, writable: bool = False) -> None:
    """Serve the dashboard of `run_id` until SIGINT or SIGTERM; ServeError if it cannot start."""
    logging.basicConfig(level=logging.WARNING, format="textual-serve: %(message)s")
    mode = "writable" if writable else "read-only"
    url_host = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in a URL
    server = _QuietServer(served_command(db, run_id, writable=writable), host=host, port=port,
                          title=f"resenv · run {run_id} ({mode})", public_url=f"http://{url_host}:{port}")
    asyncio.run(_serve(server, run_id, mode))


async def _serve(server: Server, run_id: str, mode: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # The server's own aiohttp app, started here rather than by Server.serve, which prints before it
    # binds and turns a bind error into a traceback.
    runner = web.AppRunner(await server._make_app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, server.host, server.port).start()
        except OSError as error:  # errno > 0: the bind (taken, not this machine's); else the name lookup
            reason = os.strerror(error.errno) if error.errno and error.errno > 0 else error.strerror or str(error)
            raise ServeError(f"cannot serve on {server.host}:{server.port}: {reason}") from error
        print(f"serving run {run_id} ({mode}) at {server.public_url} — Ctrl+C stops", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
