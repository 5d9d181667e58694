"""C0 reuse with real components: the pinned pyright, real venvs, real pip installs.

A verdict is reused only when nothing pyright reads has changed; each test that changes something
(a package added or removed, a resolved module or a census file edited with its mtime put back, the
rules version) checks that pyright runs again. "pyright ran" is observable: its raw report is
written into the attempt's work dir, and the result's ``reused_from`` is unset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from resenv.probes import c0reuse
from resenv.probes.c0 import C0Result, run_c0
from resenv.probes.c0reuse import ReuseStore, tree_digest

from .test_c0 import census_of, make_repo, make_venv

pytestmark = pytest.mark.timeout(600)


async def judge(python: Path, repo: Path, tmp_path: Path, attempt: int) -> C0Result:
    store = ReuseStore(tmp_path / "c0-reuse", f"attempt {attempt}")
    return await run_c0(str(python), repo, census_of(repo), work_dir=tmp_path / f"attempt-{attempt}",
                        timeout=300, reuse=store)


def pyright_ran(tmp_path: Path, attempt: int) -> bool:
    return (tmp_path / f"attempt-{attempt}" / "pyright.json").exists()


def edit_keeping_mtime(path: Path, text: str) -> None:
    before = path.stat()
    path.write_text(path.read_text() + text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


@pytest.fixture
def venv(tmp_path):
    """A venv per test: the tests below change it."""
    return make_venv(tmp_path / "venv", "idna", "six")


async def test_a_retry_on_an_unchanged_env_reuses_the_verdict(tmp_path, venv):
    repo = make_repo(tmp_path / "repo")
    first = await judge(venv, repo, tmp_path, 1)
    assert first.status == "fail" and first.missing == ["tomli"], first.log_tail
    assert first.reused_from is None and pyright_ran(tmp_path, 1)
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from == "attempt 1"
    assert not pyright_ran(tmp_path, 2), "pyright must not run again"
    assert again.pyright_s == 0.0
    assert (again.status, again.category, again.missing, again.missing_source, again.paper_ratio) == \
        (first.status, first.category, first.missing, first.missing_source, first.paper_ratio)
    assert "reused the verdict of attempt 1" in again.log_tail


async def test_a_package_added_after_the_first_c0_is_judged_again(tmp_path, venv):
    repo = make_repo(tmp_path / "repo")
    assert (await judge(venv, repo, tmp_path, 1)).missing == ["tomli"]
    make_venv_install(venv, "tomli")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)
    assert again.status == "pass", again.log_tail


async def test_a_package_removed_after_the_first_c0_is_judged_again(tmp_path, venv):
    repo = make_repo(tmp_path / "repo")
    assert (await judge(venv, repo, tmp_path, 1)).missing == ["tomli"]
    site = next((venv.parent.parent / "lib").glob("python3*/site-packages"))
    shutil.rmtree(site / "idna")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)
    assert again.missing == ["idna", "tomli"], again.log_tail


async def test_a_resolved_module_edited_with_its_mtime_restored_is_judged_again(tmp_path, venv):
    repo = make_repo(tmp_path / "repo")
    await judge(venv, repo, tmp_path, 1)
    site = next((venv.parent.parent / "lib").glob("python3*/site-packages"))
    edit_keeping_mtime(site / "idna" / "__init__.py", "\n# edited\n")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)


async def test_a_census_file_edited_in_the_checkout_is_judged_again(tmp_path, venv):
    repo = make_repo(tmp_path / "repo")
    await judge(venv, repo, tmp_path, 1)
    edit_keeping_mtime(repo / "mypkg" / "sub.py", "import tomli\n")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)


async def test_a_module_added_under_a_pth_directory_is_judged_again(tmp_path, venv):
    """An editable install's source lies wherever its ``.pth`` line points: the key walks it too."""
    repo = make_repo(tmp_path / "repo")
    source = tmp_path / "editable-src"
    source.mkdir()
    site = next((venv.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "editable.pth").write_text(f"{source}\n")
    assert (await judge(venv, repo, tmp_path, 1)).missing == ["tomli"]
    (source / "tomli.py").write_text("def load(handle): ...\n")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)
    assert again.status == "pass", again.log_tail


async def test_a_changed_rules_version_never_reuses(tmp_path, venv, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    await judge(venv, repo, tmp_path, 1)
    monkeypatch.setattr(c0reuse, "RULES_VERSION", "changed")
    again = await judge(venv, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)


async def test_an_interpreter_that_answers_differently_is_judged_again(tmp_path, venv):
    """The interpreter is asked once per C0 and pyright is told those answers: a second answer that
    differs (here: another search path) changes the key."""
    repo = make_repo(tmp_path / "repo")
    extra = tmp_path / "extra"
    (extra / "tomli").mkdir(parents=True)
    (extra / "tomli" / "__init__.py").write_text("def load(handle): ...\n")
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    flag = tmp_path / "second"
    wrapper.write_text(f'#!/bin/sh\nif [ -e {flag} ]; then export PYTHONPATH={extra}; fi\nexec {venv} "$@"\n')
    wrapper.chmod(0o755)
    assert (await judge(wrapper, repo, tmp_path, 1)).missing == ["tomli"]
    flag.touch()
    again = await judge(wrapper, repo, tmp_path, 2)
    assert again.reused_from is None and pyright_ran(tmp_path, 2)
    assert again.status == "pass", again.log_tail


def test_the_tree_digest_follows_links_once_and_never_opens_special_files(tmp_path):
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "pkg" / "loop").symlink_to(root)  # a cycle
    os.mkfifo(root / "pipe.py")  # opening it would block
    first = tree_digest([root])
    assert tree_digest([root]) == first
    (root / "native.so").write_bytes(b"\0")
    assert tree_digest([root]) != first, "a new name must change the digest"


def make_venv_install(python: Path, *packages: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--disable-pip-version-check", *packages], check=True, capture_output=True)
