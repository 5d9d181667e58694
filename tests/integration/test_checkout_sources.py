"""Checkouts from real local git sources through the real engine and sandbox.

A fetched or mirrored repository can hold files only their owner may read (a partial clone's
``.promisor`` file is 0400). The sandbox runs as another uid, so the pristine copy must be readable by
it, and making it so must never change the source's own files."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from resenv.engine.checkout import git_fatal_line

from ..conftest import resenv
from .test_engine_run import db_rows


def owner_only_source(tmp_path: Path) -> tuple[Path, str]:
    source = tmp_path / "upstream"
    source.mkdir()
    (source / "main.py").write_text("print('hi from the pinned tree')\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=source, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    for path in (source / ".git" / "objects").rglob("*"):
        if path.is_file():
            path.chmod(0o400)
    return source, git("rev-parse", "HEAD")


def git_source_benchmark(root: Path, repo_id: str, source: Path, commit: str, agent_command: str) -> Path:
    """A benchmark of one repo pinned in a local git source, one command agent, one local slot and no
    infra retries (a checkout failure shows at once)."""
    bench = root / "benchmark.yaml"
    bench.write_text(
        "version: 1\ndefaults: {suite: s, agent: a, host: h, retries: {infra: 0, backoff_s: 0.1}}\n"
        "hosts: {h: {kind: local, slots: 1, gpus: 0}}\n"
        f"agents: {{a: {{kind: command, command: {agent_command}}}}}\n"
        "suites:\n  s:\n    repos:\n"
        f"      - id: {repo_id}\n        source: {{git: '{source}', commit: '{commit}'}}\n"
        "        entrypoints: {cpu: {command: '{python} main.py'}}\n"
        "        not_applicable: {single_gpu: none, multi_gpu: none}\n")
    return bench


def test_a_source_with_owner_only_files_checks_out_and_stays_as_it_was(tmp_path, cli_env):
    source, commit = owner_only_source(tmp_path)
    before = {p: stat.S_IMODE(p.stat().st_mode) for p in (source / ".git" / "objects").rglob("*") if p.is_file()}
    bench = git_source_benchmark(tmp_path, "owner-only", source, commit,
                                 "\"printf '{{\\\"python_path\\\": \\\"%s\\\"}}' $(command -v python3) > {report}\"")
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    [attempt] = db_rows(db, "SELECT state, category, reason FROM attempts")
    assert attempt["state"] == "done", attempt
    [tier] = db_rows(db, "SELECT tier, status FROM tier_results")
    assert (tier["tier"], tier["status"]) == ("C1", "pass")
    after = {p: stat.S_IMODE(p.stat().st_mode) for p in before}
    assert after == before, "the source's own files were changed"


def test_a_failed_checkout_command_gives_gits_own_reason(tmp_path):
    log = tmp_path / "checkout-1.stderr"
    log.write_text("Cloning into bare repository...\nfatal: failed to copy file to 'x.promisor': Permission denied\n")
    assert git_fatal_line(log) == ": fatal: failed to copy file to 'x.promisor': Permission denied"
    log.write_text("nothing git would call fatal\n")
    assert git_fatal_line(log) == "" and git_fatal_line(tmp_path / "absent") == ""
