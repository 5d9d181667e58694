"""The run's census cache: one computation per (repo, commit) in a real process pool, shared by
concurrent requests; a failure reaches every waiting caller as it was raised and is not kept."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from resenv.engine.censuses import CensusCache
from resenv.engine.checkout import Pristine

from ..conftest import wait_for


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def pristine(tmp_path: Path) -> Pristine:
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "__init__.py").write_text("import numpy\n")
    (work / "main.py").write_text("import pkg\nimport os\nimport torch\n")
    (work / "setup.py").write_text("from setuptools import Extension, setup\n"
                                   "setup(ext_modules=[Extension('pkg._fast', ['fast.c'])])\n")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "one")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return Pristine(bare, _git(work, "rev-parse", "HEAD"))


@pytest.fixture
def cache() -> Iterator[CensusCache]:
    censuses = CensusCache()
    yield censuses
    censuses.close()


async def test_concurrent_requests_share_one_computation(cache: CensusCache, pristine: Pristine) -> None:
    answers = await asyncio.gather(*(cache.census("r", pristine) for _ in range(4)))
    assert len({id(census) for census, _ in answers}) == 1  # the very same object: one computation
    assert sum(seconds is not None for _, seconds in answers) == 1
    census = answers[0][0]
    assert {m.name: m.kind for m in census.modules} == {
        "numpy": "third_party", "os": "stdlib", "pkg": "repo", "setuptools": "third_party", "torch": "third_party"}
    again, seconds = await cache.census("r", pristine)  # later: kept
    assert again is census and seconds is None
    assert await cache.compiled_modules("r", pristine) == frozenset({"pkg._fast"})


async def test_a_failure_reaches_every_waiter_and_is_not_kept(cache: CensusCache, pristine: Pristine,
                                                              tmp_path: Path) -> None:
    later = Pristine(tmp_path / "later.git", pristine.commit)  # no repository there yet
    failures = await asyncio.gather(*(cache.census("r", later) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(failure, RuntimeError) and "ls-tree" in str(failure) for failure in failures), failures
    assert len({id(failure) for failure in failures}) == 1  # one computation failed, all were told
    with pytest.raises(RuntimeError):
        await cache.compiled_modules("r", later)

    subprocess.run(["git", "clone", "-q", "--bare", str(pristine.path), str(later.path)], check=True)
    census, seconds = await cache.census("r", later)  # computed again, now it can be
    assert seconds is not None and census.total == 5


async def test_a_cancelled_waiter_leaves_the_computation_to_the_others(cache: CensusCache,
                                                                        pristine: Pristine) -> None:
    first = asyncio.ensure_future(cache.census("r", pristine))
    second = asyncio.ensure_future(cache.census("r", pristine))
    await asyncio.sleep(0)  # both are waiting on the one computation
    first.cancel()
    census, _ = await second
    assert census.total == 5
    with pytest.raises(asyncio.CancelledError):
        await first


ENGINE = """
import asyncio, sys
from pathlib import Path
from resenv.engine.censuses import CensusCache
from resenv.engine.checkout import Pristine

async def main():
    cache = CensusCache()
    await cache.census("r", Pristine(Path(sys.argv[1]), sys.argv[2]))
    print("ready", flush=True)
    await asyncio.sleep(3600)  # killed outright while its pool is up

asyncio.run(main())
"""


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found |= {int(child)} | _descendants(int(child))
    return found


def test_an_engine_killed_outright_leaves_no_census_worker(pristine: Pristine) -> None:
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, str(pristine.path), pristine.commit],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
        workers = _descendants(engine.pid)
        assert workers  # the pool's workers (and the resource tracker)
    finally:
        engine.kill()
        engine.wait()
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in workers),
             timeout=30)


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:"))
    except (OSError, StopIteration):
        return "Z"
