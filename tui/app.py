"""resenv-tui: the live supervision dashboard (Textual).

    resenv-tui [--db PATH] [RUN] [--readonly]     attach to any run in a store, live or finished
    resenv-tui --serve [--host H] [--port N] [--writable] [--db PATH] [RUN]   the same in a browser
    resenv run --display tui                      run the engine in a thread and watch it here

This module stays light: it starts reading the store in the background before it imports Textual
and the screens (dashboard.py), so a 10,000-job run is on screen as soon as Textual is up.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path
from typing import Any

import click

from ..engine.paths import absolute, default_db
from .data import FeedError, Poller, RunFeed, resolve_run


def __getattr__(name: str) -> Any:  # `from resenv.tui.app import ResenvApp` keeps working
    if name in ("ResenvApp", "CSS", "CONTROL_EFFECT", "PAINT_HZ"):
        from . import dashboard

        return getattr(dashboard, name)
    raise AttributeError(name)


def run_with_engine(db_path: Path, run_id: str, *, jobs_limit: int | None = None) -> str | None:
    """`resenv run --display tui`: the engine in a thread (its own loop, no signal handlers), the
    dashboard in the main thread. Returns the run's final state; re-raises an engine error."""
    from .dashboard import ResenvApp
    from .live import EngineThread

    thread = EngineThread(db_path, run_id, jobs_limit=jobs_limit)
    thread.start()
    app = ResenvApp(db_path, run_id, engine=thread)
    app.start_loading()

    def on_term(signum: int, frame: Any) -> None:  # `kill`: stop cleanly, like quitting does
        thread.stop()
        try:
            asyncio.get_running_loop().call_soon_threadsafe(app.exit)
        except RuntimeError:
            pass

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        app.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if thread.is_alive():
            if not thread.stop_requested:
                thread.stop()
            print(f"stopping the engine of run {run_id}…", file=sys.stderr, flush=True)
            thread.join()
    if thread.error is not None:
        raise thread.error
    print(f"run {run_id}: {thread.state}")
    if thread.state == "interrupted":
        print(f"resume with: resenv run --resume {run_id}")
    return thread.state


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_ref", metavar="[RUN]", default="latest", required=False)
@click.option("--db", "db_path", type=click.Path(path_type=Path), default=None,
              help="SQLite store (default: $RESENV_DB or the user data dir).")
@click.option("--readonly", is_flag=True, help="Watch only: pause, resume, retry and cancel are refused.")
@click.option("--serve", is_flag=True,
              help="Serve the dashboard to browsers (textual-serve): read-only unless --writable, loopback by default.")
@click.option("--host", default=None, metavar="HOST", help="With --serve: the address to bind (default: 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="With --serve: the port (default: 8000).")
@click.option("--writable", is_flag=True, help="With --serve: browsers may pause, resume, retry and cancel.")
def main(run_ref: str, db_path: Path | None, readonly: bool, serve: bool, host: str | None, port: int | None,
         writable: bool) -> None:
    """Attach the live dashboard to a run (default: the latest), live or finished."""
    if not serve and (host is not None or port is not None or writable):
        raise click.UsageError("--host, --port and --writable go with --serve")
    if readonly and writable:
        raise click.UsageError("--readonly and --writable contradict each other")
    db = absolute(db_path) if db_path else default_db()
    try:
        run = resolve_run(db, run_ref)
    except (FeedError, OSError) as error:
        raise click.ClickException(str(error)) from error
    if serve:
        from . import serve as served

        try:
            served.serve(db, run["id"], host=host or served.DEFAULT_HOST, port=port or served.DEFAULT_PORT,
                         writable=writable)
        except served.ServeError as error:
            raise click.ClickException(str(error)) from error
        return
    feed, poller = RunFeed(db, run["id"]), Poller()
    poller.add(feed)
    poller.start()  # the store loads while Textual is imported and starts
    from .dashboard import ResenvApp

    # What Textual's import made lives as long as the process: out of the collector's way, the
    # collections that building 10,000 rows triggers stop walking it (a tenth of a second on open).
    gc.freeze()
    ResenvApp(db, run["id"], readonly=readonly, feed=feed, poller=poller).run()


if __name__ == "__main__":
    main()
