"""A repo pinned by git URL gets its submodules at the commits it records, from a real `git daemon`
on loopback; where they cannot be fetched the job still runs and the transcript says why."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import resenv, rows
from ..sshd_rig import free_port

AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
"""
MAIN = "import sys\nsys.path.insert(0, 'vendor/sub')\nimport subpkg\nassert subpkg.VALUE == 42\nprint('submodule ok')\n"


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def daemon(tmp_path):
    """`git daemon` serving tmp_path/served on 127.0.0.1 (stopped by its PID)."""
    served = tmp_path / "served"
    served.mkdir()
    port = free_port()
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={served}",
                             "--listen=127.0.0.1", f"--port={port}", str(served)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = subprocess.run(["git", "ls-remote", f"git://127.0.0.1:{port}/none.git"], capture_output=True, text=True)
        if "Connection refused" not in probe.stderr:
            break
        time.sleep(0.1)
    try:
        yield served, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def superproject(tmp_path: Path, served: Path, port: int, *, main: str = MAIN, at: str = "vendor/sub") -> tuple[Path, str]:
    sub = tmp_path / "sub"
    (sub / "subpkg").mkdir(parents=True)
    (sub / "subpkg" / "__init__.py").write_text("VALUE = 42\n")
    git("init", "-q", cwd=sub)
    git("add", ".", cwd=sub)
    git("commit", "-qm", "sub", cwd=sub)
    git("clone", "-q", "--bare", str(sub), str(served / "sub.git"), cwd=tmp_path)
    top = tmp_path / "top"
    top.mkdir()
    (top / "main.py").write_text(main)
    git("init", "-q", cwd=top)
    git("submodule", "add", "-q", f"git://127.0.0.1:{port}/sub.git", at, cwd=top)
    git("add", ".", cwd=top)
    git("commit", "-qm", "top", cwd=top)
    return top, git("rev-parse", "HEAD", cwd=top)


def benchmark(root: Path, top: Path, commit: str) -> Path:
    text = "version: 1\ndefaults: {suite: s, agent: a, host: local, retries: {infra: 0, backoff_s: 0.1}}\n"
    text += "hosts:\n  local: {kind: local, slots: 1, gpus: 0}\n"
    text += "agents:\n" + textwrap.indent(AGENT, "  ")
    text += textwrap.dedent(f"""\
        suites:
          s:
            repos:
              - id: top
                source: {{git: "{top}", commit: {commit}}}
                entrypoints:
                  cpu: {{command: "{{python}} main.py"}}
                not_applicable: {{single_gpu: no GPU code, multi_gpu: no GPU code}}
        """)
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


def run_c1(tmp_path: Path, cli_env: dict, bench: Path) -> tuple[str, list[dict]]:
    done = resenv("run", str(bench), "--tiers", "C1", "--display", "plain", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    status = rows(db, "SELECT status FROM tier_results WHERE tier = 'C1'")[0]["status"]
    checkout = [json.loads(r["data"]) for r in rows(db, "SELECT data FROM events WHERE kind = 'checkout'")]
    return status, checkout


def test_submodules_are_checked_out_at_the_recorded_commit(tmp_path, cli_env, daemon):
    served, port = daemon
    top, commit = superproject(tmp_path, served, port)
    status, checkout = run_c1(tmp_path, cli_env, benchmark(tmp_path, top, commit))
    assert status == "pass"
    assert not any("submodules" in event for event in checkout), checkout


def test_a_submodule_that_cannot_be_fetched_is_reported_and_the_job_still_runs(tmp_path, cli_env, daemon):
    served, port = daemon
    top, commit = superproject(tmp_path, served, port)
    (served / "sub.git").rename(served / "gone.git")  # the submodule's host lost it
    status, checkout = run_c1(tmp_path, cli_env, benchmark(tmp_path, top, commit))
    assert status == "fail"  # main.py cannot import the missing submodule: the agent's problem to solve
    missing = [event for event in checkout if event.get("submodules") == "not initialised"]
    assert missing and missing[0]["returncode"] != 0 and "sub.git" in missing[0]["log_tail"], checkout


def test_a_submodule_under_an_imported_folder_is_the_repos_not_a_shadow(tmp_path, cli_env, daemon):
    """F5-TTS imports `third_party.BigVGAN`, a submodule under `src/third_party/`: the folder git makes
    for it is the checkout's own, never quarantined as a shadow of the import."""
    served, port = daemon
    main = ("import sys\nsys.path.insert(0, 'src')\nfrom third_party.sub.subpkg import VALUE\n"
            "assert VALUE == 42\nprint('submodule ok')\n")
    top, commit = superproject(tmp_path, served, port, main=main, at="src/third_party/sub")
    status, checkout = run_c1(tmp_path, cli_env, benchmark(tmp_path, top, commit))
    shadows = rows(Path(cli_env["RESENV_DB"]), "SELECT path FROM findings WHERE kind = 'shadow'")
    assert shadows == [] and status == "pass", (shadows, checkout)
