"""Shared fixtures: small benchmarks written into tmp dirs, and helpers to run the real CLI."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
RESENV = [sys.executable, "-m", "resenv.engine.cli.main"]


def bundle_repos(root: Path, repos: dict[str, dict[str, str]]) -> str:
    """Write each repo (id -> {file: content}) under `root`/suites; return suite `s` with them, as YAML."""
    entries = []
    for repo_id, files in repos.items():
        tree = root / "suites" / repo_id
        tree.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(content)
        entries.append(textwrap.dedent(f"""\
              - id: {repo_id}
                source: {{path: suites/{repo_id}}}
                entrypoints:
                  cpu: {{command: "{{python}} main.py"}}
                not_applicable: {{single_gpu: no GPU code, multi_gpu: no GPU code}}
        """))
    return "suites:\n  s:\n    repos:\n" + textwrap.indent("".join(entries), "    ")


def write_benchmark(root: Path, repos: dict[str, dict[str, str]], agents: str, *, hosts: str = "", defaults: str = "",
                    expose: tuple[Path, ...] = (), retries: str = "{infra: 0, backoff_s: 0.1}") -> Path:
    """A benchmark.yaml in `root` with bundled repos (id -> {file: content}) and the given agents block;
    `expose`: host folders the local host's sandboxes may read (a test's gates)."""
    text = "version: 1\n"
    text += f"defaults:\n  suite: s\n  agent: a\n  host: local\n  retries: {retries}\n" + defaults
    shown = f", process: {{expose: [{', '.join(str(path) for path in expose)}]}}" if expose else ""
    text += f"hosts:\n  local: {{kind: local, slots: 4, gpus: 0{shown}}}\n" + hosts
    text += "agents:\n" + textwrap.indent(textwrap.dedent(agents), "  ")
    text += bundle_repos(root, repos)
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


def rows(db: Path, sql: str, params: tuple = ()) -> list[dict]:
    """Query results of a run's store as dicts."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail the test after `timeout`.

    A store that a just-started engine is still creating (no schema yet) counts as "not yet".
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except sqlite3.OperationalError:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def finished_run(root: Path, bench: Path, tiers: str) -> tuple[dict[str, str], str]:
    """Run `bench` with `tiers` to its end through the CLI in `root`: (the CLI environment, the run id)."""
    env = cli_environ(root)
    done = resenv("run", str(bench), "--tiers", tiers, "--display", "plain", env=env, cwd=root, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return env, rows(Path(env["RESENV_DB"]), "SELECT id FROM runs")[0]["id"]


def cli_environ(tmp_path: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: a private DB and data dir."""
    env = dict(os.environ)
    env["RESENV_DB"] = str(tmp_path / "store.db")
    env["RESENV_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: a private DB and data dir."""
    return cli_environ(tmp_path)


def resenv(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*RESENV, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
