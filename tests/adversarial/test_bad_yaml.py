"""A hostile benchmark.yaml through the real CLI: nesting 1,000 levels deep and a "billion laughs"
alias bomb end in one clear line naming the file, line and field, quickly and in little memory
(never a RecursionError traceback, never a hang)."""

from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import RESENV

MEMORY_CAP = 2 << 30  # address space of the CLI under test: a bomb must fail fast well below it


def cli(tmp_path: Path, cli_env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    started = time.monotonic()
    out = subprocess.run([*RESENV, *args], env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         preexec_fn=cap)
    return out, time.monotonic() - started


def problem_lines(out: subprocess.CompletedProcess) -> list[str]:
    """The problems named at a place in the file (a single one shares the error's line)."""
    return [line.removeprefix("Error: invalid benchmark: ") for line in out.stderr.splitlines()
            if "benchmark.yaml:" in line]


HEAD = "version: 1\ndefaults: {suite: s}\n"


@pytest.mark.parametrize("opening,closing", [("[", "]"), ("{a: ", "}")])
def test_nesting_1000_deep_is_one_error_at_its_line_and_field(tmp_path, cli_env, opening, closing):
    (tmp_path / "benchmark.yaml").write_text(HEAD + "agents:\n  a:\n    env: " + opening * 1000 + "1" + closing * 1000 + "\n")
    for command in (["validate"], ["run", "--display", "none"]):
        out, _ = cli(tmp_path, cli_env, *command, "benchmark.yaml")
        assert out.returncode != 0
        assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr, out.stderr[-2000:]
        [line] = problem_lines(out)
        assert line.startswith("benchmark.yaml:5:") and "agents.a.env" in line and "deeper than" in line, line


def laughs(levels: int = 10, width: int = 10) -> str:
    text = 'lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels):
        text += f"lol{level}: &lol{level} [" + ", ".join([f"*lol{level - 1}"] * width) + "]\n"
    return text


def test_a_billion_laughs_is_one_error_fast_and_small(tmp_path, cli_env):
    (tmp_path / "benchmark.yaml").write_text(HEAD + "agents:\n  a:\n    env:\n" + "".join(
        "      " + line + "\n" for line in laughs().splitlines()))
    out, seconds = cli(tmp_path, cli_env, "validate", "benchmark.yaml")
    assert out.returncode != 0 and "Traceback" not in out.stderr and "MemoryError" not in out.stderr, out.stderr[-2000:]
    [line] = problem_lines(out)
    assert "agents.a.env.lol" in line and "aliases" in line, line
    assert seconds < 60


def test_aliases_that_nest_each_other_are_bounded_in_depth_too(tmp_path, cli_env):
    # each anchor holds the previous one 20 levels down: few values, but 400 levels once expanded
    text = "agents:\n  a:\n    env:\n      d0: &d0 1\n"
    for level in range(1, 21):
        text += f"      d{level}: &d{level} " + "[" * 20 + f"*d{level - 1}" + "]" * 20 + "\n"
    (tmp_path / "benchmark.yaml").write_text(HEAD + text)
    out, _ = cli(tmp_path, cli_env, "validate", "benchmark.yaml")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    [line] = problem_lines(out)
    assert "agents.a.env.d" in line and "deeper than" in line, line
