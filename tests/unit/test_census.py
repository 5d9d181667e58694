"""The import census: what counts as an import, how modules are classified, what is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from resenv.probes.census import Census, RepoFiles, files_at_commit, files_in_dir, import_census


def src(text: str) -> bytes:
    return textwrap.dedent(text).encode()


def kinds(census: Census) -> dict[str, str]:
    return {m.name: m.kind for m in census.modules}


def test_classification_stdlib_repo_third_party():
    census = import_census({
        "train.py": src("""\
            from __future__ import annotations
            import os, json
            import numpy as np
            import torch.nn.functional as F
            from models.resnet import ResNet
            import utils
            from mypkg import thing
            """),
        "models/__init__.py": b"",
        "models/resnet.py": src("import torch\n"),
        "utils.py": src("import collections\n"),
        "src/mypkg/__init__.py": src("thing = 1\n"),
    })
    assert kinds(census) == {
        "__future__": "stdlib", "os": "stdlib", "json": "stdlib", "collections": "stdlib",
        "numpy": "third_party", "torch": "third_party",
        "models": "repo", "utils": "repo", "mypkg": "repo",
    }
    assert (census.total, census.stdlib, census.repo, census.third_party) == (9, 4, 3, 2)
    assert census.files == ["models/__init__.py", "models/resnet.py", "src/mypkg/__init__.py", "train.py", "utils.py"]
    torch = census.module("torch")
    assert torch.files == 2 and torch.first == "models/resnet.py:1"
    assert census.names("third_party") == ["numpy", "torch"]


def test_repo_modules_beyond_the_root():
    census = import_census({
        # a regular package whose parent is not a package (a nested project / vendored code)
        "third_party/fastlib/fastlib/__init__.py": b"",
        "main.py": src("import fastlib\nimport torch\nimport helpers\n"),
        # a namespace dir deep in the tree never shadows an installed package
        "examples/torch/run.py": src("import torch\n"),
        # scripts importing their siblings: repo; the same name imported from elsewhere: not
        "scripts/run.py": src("import common\nimport helpers\n"),
        "scripts/common.py": b"x = 1\n",
        "tools/helpers.py": b"",
        # a packaging file mapping a name onto a directory
        "pyproject.toml": src("""\
            [tool.setuptools.package-dir]
            mylib = "lib"
            [tool.setuptools.packages.find]
            where = ["python"]
            """),
        "lib/__init__.py": b"",
        "python/core/__init__.py": b"",
        "python/toplevel_mod.py": b"",
        "app.py": src("import mylib\nimport core\nimport toplevel_mod\n"),
    })
    found = kinds(census)
    assert found["fastlib"] == "repo"
    assert found["torch"] == "third_party"
    assert found["common"] == "repo"
    assert found["helpers"] == "third_party"  # main.py and scripts/ have no helpers beside them
    assert found["mylib"] == "repo" and found["core"] == "repo" and found["toplevel_mod"] == "repo"


def test_setup_py_and_setup_cfg_hints():
    census = import_census({
        "setup.py": src("""\
            from setuptools import setup, find_packages
            setup(name="x", package_dir={"": "source"}, packages=find_packages("source"))
            """),
        "source/alpha/__init__.py": b"",
        "sub/setup.cfg": src("""\
            [options]
            package_dir =
                beta = code
            """),
        "run.py": src("import alpha\nimport beta\nimport setuptools\n"),
    })
    assert kinds(census) == {"setuptools": "third_party", "alpha": "repo", "beta": "repo"}


def test_nested_and_guarded_imports_all_count():
    census = import_census({
        "m.py": src("""\
            import sys
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import tc_only
            def f():
                import in_function
            class C:
                import in_class_body
                def m(self):
                    from in_method.sub import y
            with open(__file__):
                import in_with
            try:
                import optional
            except ImportError:
                import fallback
            else:
                import in_else
            finally:
                import in_finally
            for _ in range(1):
                import in_loop
            while False:
                import in_while
            match sys.argv:
                case []:
                    import in_match
            async def g():
                import in_async
            """),
        "other.py": src("""\
            def h():
                import optional
            import tc_only
            """),
    })
    uncond = {m.name: m.unconditional for m in census.modules}
    assert uncond == {
        "sys": True, "typing": True, "in_class_body": True, "in_with": True, "tc_only": True,
        "in_function": False, "in_method": False, "optional": False, "fallback": False, "in_else": False,
        "in_finally": False, "in_loop": False, "in_while": False, "in_match": False, "in_async": False,
    }
    # tc_only: guarded in m.py but unconditional in other.py; first occurrence is in path order
    assert census.module("tc_only").first == "m.py:4"
    assert census.module("tc_only").files == 2
    assert census.module("optional").files == 2


def test_relative_imports_are_skipped():
    census = import_census({
        "pkg/__init__.py": src("from . import a\nfrom .a import b\nfrom ..up import c\nfrom .. import d\n"),
        "pkg/a.py": src("import re\n"),
    })
    assert census.names() == ["re"]


def test_syntax_errors_are_tolerated_and_recorded():
    census = import_census({
        "py2.py": b"import numpy\nprint 'hello'\n",
        "broken.py": b"def f(:\n",
        "ok.py": b"import scipy\n",
        "noimports_broken.py": b"x = (\n",
    })
    assert census.unparsable == ["broken.py", "noimports_broken.py", "py2.py"]
    assert census.names() == ["scipy"]
    assert "py2.py" in census.files  # read, only not parsed: pyright still looks at it


def test_large_and_undecodable_files_are_skipped():
    census = import_census(RepoFiles({
        "big.py": b"import huge\n" + b"#" * 200,
        "latin.py": "# -*- coding: latin-1 -*-\nimport caf\u00e9\n".encode("latin-1"),
        "bom.py": b"\xef\xbb\xbfimport bommed\n",
        "binary.py": b"import x\n\xff\xfe\x00garbage",
        "fine.py": b"import fine_mod\n",
        "README.md": b"import not_python\n",
    }, skipped=["huge_from_git.py"]), max_bytes=100)
    assert census.skipped == ["big.py", "binary.py", "huge_from_git.py"]
    assert census.names() == ["bommed", "caf\u00e9", "fine_mod"]
    assert "README.md" not in census.files


def test_census_round_trips_through_json():
    census = import_census({"a.py": b"import os\nimport numpy\n", "b.py": b"x = (\n"}, skipped=["c.py"])
    data = json.loads(json.dumps(census.to_dict()))
    assert data["total"] == 2 and data["third_party"] == 1 and data["stdlib"] == 1 and data["repo"] == 0
    assert Census.from_dict(data) == census


def test_files_in_dir_skips_environments(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import a\n")
    (tmp_path / "env" / "lib").mkdir(parents=True)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "env" / "lib" / "site.py").write_text("import b\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hook.py").write_text("import c\n")
    files = files_in_dir(tmp_path)
    assert sorted(files) == ["pkg/__init__.py"]


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_files_at_commit_reads_a_bare_repo(tmp_path):
    work = tmp_path / "work"
    (work / "src" / "mypkg").mkdir(parents=True)
    (work / "src" / "mypkg" / "__init__.py").write_text("import requests\nfrom . import x\n")
    (work / "main.py").write_text("import mypkg\nimport os\n")
    (work / "pyproject.toml").write_text("[project]\nname = 'm'\n")
    (work / "README.md").write_text("# hi\n")
    (work / "data.bin").write_bytes(b"\x00" * 10)
    (work / "big.py").write_text("import big\n" + "#" * 5000)
    (work / "sp ace ü.py").write_text("import spaced\n")
    (work / "link.py").symlink_to("main.py")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "one")
    first = _git(work, "rev-parse", "HEAD")
    (work / "main.py").write_text("import changed\n")
    _git(work, "commit", "-qam", "two")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)

    files = files_at_commit(bare, first, max_bytes=1000)
    assert sorted(files) == ["main.py", "pyproject.toml", "sp ace ü.py", "src/mypkg/__init__.py"]
    assert files["main.py"] == b"import mypkg\nimport os\n"
    assert files.skipped == ["big.py"]
    census = import_census(files)
    assert kinds(census) == {"mypkg": "repo", "os": "stdlib", "requests": "third_party", "spaced": "third_party"}
    assert census.skipped == ["big.py"]

    latest = files_at_commit(bare, "HEAD", max_bytes=1000)
    assert latest["main.py"] == b"import changed\n"
    with pytest.raises(RuntimeError):
        files_at_commit(bare, "0" * 40)
