"""`resenv-tui --serve`: the real server on a free loopback port, spoken to as a browser does (the page
over HTTP, then the websocket it names, keys in and the terminal's bytes out), over a fixture store
whose path would run a command if it ever reached the shell unquoted."""

from __future__ import annotations

import asyncio
import codecs
import json
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from resenv.tui.serve import served_command

from ..conftest import rows
from . import fixture_db

RUN = fixture_db.LIVE_RUN
HOSTILE = "store 'single' \"double\" $(touch INJECTED) ; touch INJECTED2"
ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
PATIENCE = 120.0  # a busy machine starts Textual slowly; every wait ends as soon as its condition holds


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Browser:
    """One tab: the terminal text that came over the websocket so far (escape sequences stripped)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    async def press(self, key: str) -> None:
        await self.ws.send_str(json.dumps(["stdin", key]))

    async def until(self, condition: Callable[[str], bool], since: int = 0) -> str:
        """Read the screen until `condition` holds for what came after offset `since`; that text."""
        async def read() -> str:
            while not condition(self.text[since:]):
                message = await self.ws.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.text += ESCAPES.sub("", self._decoder.decode(message.data))
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    raise AssertionError(f"the websocket closed; the screen so far:\n{self.text[-2000:]}")
            return self.text[since:]

        return await asyncio.wait_for(read(), PATIENCE)


@asynccontextmanager
async def served(tmp_path: Path, *flags: str) -> AsyncIterator[tuple[Path, Browser]]:
    """The fixture store under a hostile path, served by `resenv-tui --serve`, and one browser tab on it."""
    db = fixture_db.build(tmp_path / HOSTILE)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "resenv.tui", "--serve", "--db", str(db), RUN, "--port", str(port), *flags],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(server.stdout.readline), PATIENCE)
        url = f"http://127.0.0.1:{port}"
        mode = "writable" if "--writable" in flags else "read-only"
        assert line == f"serving run {RUN} ({mode}) at {url} — Ctrl+C stops\n", (line, server.stderr.read())
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/") as page:
                assert page.status == 200
                html = await page.text()
            assert f"resenv · run {RUN} ({mode})" in html
            ws_url = re.search(r'data-session-websocket-url="([^"]+)"', html).group(1)
            assert ws_url == f"ws://127.0.0.1:{port}/ws"
            async with session.ws_connect(ws_url + "?width=140&height=40") as ws:
                yield db, Browser(ws)
    finally:
        server.terminate()
        assert server.wait(timeout=PATIENCE) == 0  # SIGTERM: a clean stop
        assert not (tmp_path / "INJECTED").exists() and not (tmp_path / "INJECTED2").exists()


def controls(db: Path) -> list[dict]:
    return rows(db, "SELECT action, job_id, origin FROM controls WHERE run_id = ?", (RUN,))


async def test_a_browser_sees_the_run_and_a_read_only_serve_refuses_pause(tmp_path: Path) -> None:
    async with served(tmp_path) as (db, browser):
        screen = await browser.until(lambda text: "numpy-v1-api" in text and "READ-ONLY" in text)
        assert RUN in screen and "tiny-stdlib" in screen
        since = len(browser.text)
        await browser.press("P")  # pause the run...
        await browser.press("?")  # ...then open help: once it is up, the pause key has been handled
        after = await browser.until(lambda text: "keys and commands" in text, since)
        assert "Pause run" not in after  # no confirmation offered: nothing to confirm
        assert controls(db) == []


async def test_a_writable_serve_pauses_after_confirmation(tmp_path: Path) -> None:
    async with served(tmp_path, "--writable") as (db, browser):
        await browser.until(lambda text: "numpy-v1-api" in text)
        assert "READ-ONLY" not in browser.text
        since = len(browser.text)
        await browser.press("P")
        await browser.until(lambda text: "Pause run" in text, since)
        await browser.press("y")
        for _ in range(int(PATIENCE * 10)):  # the control is written by a worker thread of the dashboard
            if controls(db):
                break
            await asyncio.sleep(0.1)
        assert controls(db) == [{"action": "pause", "job_id": None, "origin": "tui"}]


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "192.0.2.1"], "cannot serve on 192.0.2.1:{port}: Cannot assign requested address"),  # not ours
    (["--host", "127.0.0.1"], "cannot serve on 127.0.0.1:{port}: Address already in use"),
])
def test_serving_that_cannot_start_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    db = fixture_db.build(tmp_path / "store")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "resenv.tui", "--serve", "--db", str(db), RUN,
                                 "--port", str(port), *args], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: " + message.format(port=port)) and len(result.stderr.splitlines()) == 1


def test_the_served_command_is_one_argument_per_value(tmp_path: Path) -> None:
    db = tmp_path / HOSTILE / "store.db"
    assert shlex.split(served_command(db, RUN, writable=False)) == [
        sys.executable, "-m", "resenv.tui", "--db", str(db), RUN, "--readonly"]
    assert shlex.split(served_command(db, RUN, writable=True))[-1] == RUN


def test_serve_flags_belong_together(tmp_path: Path) -> None:
    db = fixture_db.build(tmp_path / "store")
    alone = subprocess.run([sys.executable, "-m", "resenv.tui", "--db", str(db), RUN, "--writable"],
                           capture_output=True, text=True, timeout=PATIENCE)
    assert alone.returncode == 2 and "--host, --port and --writable go with --serve" in alone.stderr
    both = subprocess.run([sys.executable, "-m", "resenv.tui", "--serve", "--readonly", "--writable", "--db", str(db),
                           RUN], capture_output=True, text=True, timeout=PATIENCE)
    assert both.returncode == 2 and "--readonly and --writable contradict each other" in both.stderr
