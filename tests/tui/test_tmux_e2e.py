"""End to end in a real terminal: the `resenv-tui` and `resenv run --display tui` binaries inside
tmux (120×40) against live runs, read back with `tmux capture-pane`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import write_benchmark
from .conftest import MAIN

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

BIN = Path(sys.executable).parent

STREAMING_AGENT = f"""\
a:
  kind: command
  command: >-
    echo start {{job}}; case "{{job}}" in slow/*) n=600;; *) n=3;; esac;
    i=0; while [ $i -lt $n ]; do echo tick $i of {{job}}; i=$((i+1)); case "{{job}}" in slow/*) sleep 0.1;; esac; done;
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""


def command(name: str) -> list[str]:
    """The installed console script, or the module it runs when the checkout is not reinstalled yet."""
    script = BIN / name
    if script.exists():
        return [str(script)]
    module = {"resenv-tui": "resenv.tui", "resenv": "resenv.engine.cli.main"}[name]
    return [sys.executable, "-m", module]


class Tmux:
    def __init__(self, tmp: Path, argv: list[str], env: dict[str, str]) -> None:
        self.socket = f"resenv-e2e-{os.getpid()}-{id(self)}"
        self.status = tmp / f"{self.socket}.status"
        shell = " ".join(_quote(part) for part in argv) + f"; echo $? > {_quote(str(self.status))}; sleep 60"
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-x", "120",
                        "-y", "40", "sh", "-c", shell], check=True, env=env)

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "e2e"], capture_output=True,
                              text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "e2e", *keys], check=True)

    def wait(self, predicate, timeout: float = 60.0, what: str = "screen") -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{what} not shown within {timeout} s; screen:\n{screen}")

    def exit_status(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status.exists() and self.status.read_text().strip():
                return int(self.status.read_text())
            time.sleep(0.2)
        raise AssertionError(f"the command did not exit; screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, RESENV_DB=str(tmp / "store.db"), RESENV_DATA_DIR=str(tmp / "data"), TERM="xterm-256color",
               PYTHONUNBUFFERED="1")
    env.pop("TMUX", None)
    return env


def test_resenv_tui_attaches_to_a_live_run_in_a_real_terminal(tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path, {"fast": {"main.py": MAIN}, "slow": {"main.py": MAIN}}, STREAMING_AGENT)
    env = _env(tmp_path)
    engine = subprocess.Popen([*command("resenv"), "run", str(bench), "--tiers", "C1,C5", "--display", "none"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tmux = None
    try:
        db = tmp_path / "store.db"
        deadline = time.monotonic() + 60
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        tmux = Tmux(tmp_path, [*command("resenv-tui"), "--db", str(db)], env)
        screen = tmux.wait(lambda s: "slow/a" not in s and "slow" in s and "running" in s and "fast" in s,
                           what="the live run")
        assert "s × a" in screen and "C0 C1 C2 C3 C4 C5" in screen
        assert "Pyramid" in screen and "Hosts" in screen and "no GPU" in screen
        tmux.wait(lambda s: "✓ done" in s, what="the fast job done")
        # filter to the slow job, open it, watch its transcript grow
        tmux.keys("/")
        tmux.wait(lambda s: "filter: words that must all appear" in s, what="the filter box")
        tmux.keys("slow")
        tmux.wait(lambda s: "filter “slow”: 1 of 2" in s, what="the filtered table")
        tmux.keys("Enter")  # leaves the filter box (the table keeps the filter)
        tmux.wait(lambda s: "s Sort" in s, what="the table focused")
        tmux.keys("Enter")
        first = tmux.wait(lambda s: "Transcript" in s and "tick" in s, what="the transcript")
        tmux.wait(lambda s: s != first and "tick" in s and "following" in s, what="new transcript lines")
        tick = _last_tick(tmux.screen())
        time.sleep(1.5)
        assert _last_tick(tmux.screen()) > tick  # it follows the tail
        tmux.keys("Escape")  # (a key right after Escape would read as alt+key: wait for the overview)
        tmux.wait(lambda s: "Jobs · sorted by" in s, what="the overview again")
        tmux.keys("2")
        tmux.wait(lambda s: "no GPU on this host" in s and "job(s) running here" in s, what="the hosts screen")
        tmux.keys("3")
        tmux.wait(lambda s: "History" in s and "every run in" in s, what="history")
        tmux.keys("q")  # attached, not owning the engine: leaves at once, the run goes on
        assert tmux.exit_status() == 0
        assert engine.poll() is None
    finally:
        if tmux is not None:
            tmux.close()
        engine.terminate()
        engine.wait(60)


def _last_tick(screen: str) -> int:
    ticks = [int(line.split("tick ")[1].split()[0]) for line in screen.splitlines() if "│ tick " in line]
    return max(ticks, default=-1)


def test_resenv_run_opens_the_dashboard_and_quitting_stops_the_run_for_resume(tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path, {"fast": {"main.py": MAIN}, "slow": {"main.py": MAIN}}, STREAMING_AGENT)
    env = _env(tmp_path)
    tmux = Tmux(tmp_path, [*command("resenv"), "run", str(bench), "--tiers", "C1,C5"], env)  # a TTY: tui by default
    try:
        tmux.wait(lambda s: "running" in s and "slow" in s and "C0 C1 C2 C3 C4 C5" in s, what="the dashboard")
        tmux.wait(lambda s: "◐ running" in s, what="a running job")
        tmux.keys("q")
        tmux.wait(lambda s: "Stop the run and quit?" in s and "resenv run --resume" in s, what="the confirmation")
        tmux.keys("y")
        assert tmux.exit_status() == 130  # interrupted, resumable: as Ctrl-C in plain mode
        screen = tmux.wait(lambda s: "resume with: resenv run --resume" in s, what="the resume hint")
        assert ": interrupted" in screen
    finally:
        tmux.close()
    from resenv.engine.store.db import StoreReader

    reader = StoreReader(tmp_path / "store.db")
    try:
        run = reader.resolve_run("latest")
        assert run["state"] == "interrupted"
        slow = reader.rows("SELECT a.state, a.category FROM attempts a JOIN jobs j ON j.id = a.job_id"
                           " WHERE j.key = 'slow/a'")
        assert [(row["state"], row["category"]) for row in slow] == [("error", "infra")]
    finally:
        reader.close()
