"""C0 gives pyright the census's import roots (probes.localroots): a module the census counts as the
repo's own is resolved inside the repo, never counted missing (Depth-Anything-V2's shapes)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from resenv.probes.c0 import run_c0, write_config
from resenv.probes.census import files_in_dir, import_census

TREE = {
    # Depth-Anything-V2: `dataset` is a namespace folder beside the script, used from inside itself
    "metric_depth/train.py": "from dataset.hypersim import Hypersim\nfrom util.loss import loss\n",
    "metric_depth/dataset/hypersim.py": "from dataset.transform import Resize\nHypersim = 1\n",
    "metric_depth/dataset/transform.py": "Resize = 1\n",
    "metric_depth/util/loss.py": "loss = 1\n",
    # a static sys.path target: only this file sees vendor/
    "tools/run.py": textwrap.dedent("""\
        import os, sys
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'vendor'))
        import vendored
        """),
    "vendor/vendored.py": "",
    # a declared source root
    "setup.cfg": "[options.packages.find]\nwhere = lib\n",
    "lib/corelib/__init__.py": "",
    "app.py": "import corelib\nimport resenv_surely_absent_pkg\n",
}


def make_repo(root: Path) -> Path:
    for name, text in TREE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_config_carries_the_census_roots(tmp_path):
    repo = make_repo(tmp_path / "repo")
    census = import_census(files_in_dir(repo))
    config_path = write_config(repo, census.files, tmp_path / "c0", [], census)
    environments = json.loads(config_path.read_text())["executionEnvironments"]
    # the file with a sys.path target first, rooted at itself; the repo's default environment last
    assert [env["root"] for env in environments] == [str(repo / "tools/run.py"), str(repo)]
    assert environments[0]["extraPaths"] == [str(repo / "tools"), str(repo), str(repo / "lib"), str(repo / "vendor")]
    assert environments[1]["extraPaths"] == [str(repo / "lib")]


def test_without_a_census_the_config_is_the_plain_one(tmp_path):
    repo = make_repo(tmp_path / "repo")
    config_path = write_config(repo, ["app.py"], tmp_path / "c0", [])
    assert json.loads(config_path.read_text())["executionEnvironments"] == [{"root": str(repo), "extraPaths": []}]


@pytest.mark.timeout(300)
async def test_pyright_finds_every_module_the_census_counts_as_the_repos(tmp_path):
    """The real pinned pyright, the interpreter running the tests: the only module missing is the
    one no root provides; ``dataset``, ``util``, ``vendored`` and ``corelib`` are never missing."""
    repo = make_repo(tmp_path / "repo")
    census = import_census(files_in_dir(repo))
    kinds = {m.name: m.kind for m in census.modules}
    assert {name for name, kind in kinds.items() if kind == "repo"} == {"dataset", "util", "vendored", "corelib"}
    result = await run_c0(sys.executable, repo, census, work_dir=tmp_path / "c0", timeout=240)
    assert result.missing == ["resenv_surely_absent_pkg"], result.log_tail
