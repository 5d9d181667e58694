"""The repo's own modules (probes.localroots) and the census classifying with them: the shapes that
made the baseline install PyPI's ``dataset`` for Depth-Anything-V2's ``metric_depth/dataset`` folder."""

from __future__ import annotations

import ast
import textwrap

import pytest

from resenv.probes import localroots
from resenv.probes.census import Census, import_census


def src(text: str) -> bytes:
    return textwrap.dedent(text).encode()


def kinds(census: Census) -> dict[str, str]:
    return {m.name: m.kind for m in census.modules}


# A synthetic tree of Depth-Anything-V2's shape: `dataset` and `util` are namespace folders beside
# the training script, imported from that script and from inside `dataset` itself.
DEPTH_ANYTHING = {
    "app.py": src("import gradio\nfrom depth_anything_v2.dpt import DepthAnythingV2\n"),
    "depth_anything_v2/__init__.py": b"",
    "depth_anything_v2/dpt.py": src("import torch\n"),
    "metric_depth/train.py": src("""\
        from dataset.hypersim import Hypersim
        from util.loss import SiLogLoss
        import torch
        """),
    "metric_depth/dataset/hypersim.py": src("from dataset.transform import Resize\nimport h5py\n"),
    "metric_depth/dataset/transform.py": src("import cv2\n"),
    "metric_depth/util/loss.py": src("import torch\n"),
}


def test_a_namespace_folder_used_beside_a_script_and_from_inside_itself_is_the_repos():
    found = kinds(import_census(DEPTH_ANYTHING))
    assert found["dataset"] == "repo"  # hypersim.py resolves it from metric_depth/, its parent
    assert found["util"] == "repo"
    assert found["depth_anything_v2"] == "repo"
    assert {name for name, kind in found.items() if kind == "third_party"} == {"gradio", "torch", "h5py", "cv2"}


def test_an_import_must_resolve_as_far_as_it_names_a_module():
    tree = {**DEPTH_ANYTHING, "metric_depth/eval.py": src("from dataset.kitti import KITTI\n")}
    # metric_depth/dataset/ exists but has no kitti: this occurrence needs an installed `dataset`
    assert kinds(import_census(tree))["dataset"] == "third_party"


def test_a_name_imported_locally_in_one_place_and_from_nowhere_elsewhere_is_third_party():
    tree = {**DEPTH_ANYTHING, "tools/export.py": src("import dataset\nfrom util import loss\n")}
    found = kinds(import_census(tree))
    # tools/ has no dataset and no util beside it or above it: both need an installed package
    assert found["dataset"] == "third_party" and found["util"] == "third_party"


def test_an_ancestor_is_a_root_only_where_a_script_there_imports_the_name():
    """rllm's shape: a file deep in a package imports Hugging Face's ``datasets``; ``rllm/datasets/``
    two levels up is the repo's own package, but nothing run from ``rllm/`` puts it on sys.path."""
    tree = {
        "rllm/__init__.py": b"",
        "rllm/datasets/__init__.py": b"",
        "rllm/llm/__init__.py": b"",
        "rllm/llm/finetune/finetuner.py": src("from datasets import Dataset, load_from_disk\n"),
        # LettuceDetect's shape: an integration folder named after the package it integrates
        "lettucedetect/__init__.py": b"",
        "lettucedetect/integrations/__init__.py": b"",
        "lettucedetect/integrations/elysia/__init__.py": b"",
        "lettucedetect/integrations/elysia/tools.py": src("from elysia import tool\n"),
    }
    found = kinds(import_census(tree))
    assert found["datasets"] == "third_party" and found["elysia"] == "third_party"


def test_a_namespace_folder_named_like_a_real_package_is_not_the_repos():
    census = import_census({
        "examples/torch/run.py": src("import torch.nn\nimport torch\n"),
        "examples/torch/helpers.py": b"",
        "examples/jax/run.py": src("from jax import numpy\n"),
        "examples/jax/util.py": b"",
    })
    found = kinds(census)
    assert found["torch"] == "third_party"  # examples/torch has no nn, and a bare namespace is no module
    assert found["jax"] == "third_party"    # examples/jax has no numpy submodule


def test_a_namespace_folder_with_the_named_submodule_is_the_repos():
    census = import_census({
        "scripts/run.py": src("from tasks import segment\n"),
        "scripts/tasks/segment.py": b"",
    })
    assert kinds(census)["tasks"] == "repo"


@pytest.mark.parametrize("insert", [
    "sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'third_party'))",
    "sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), '../third_party')))",
    "sys.path.append(str(Path(__file__).parent.parent / 'third_party'))",
    "sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'third_party'))",
    "sys.path.append('third_party')",          # relative to the repo root, where it is run from
    "sys.path.append('../third_party')",       # relative to the script's own directory
])
def test_static_sys_path_targets_are_import_roots(insert):
    census = import_census({
        "tools/run.py": src(f"import os, sys\nfrom pathlib import Path\n{insert}\nimport vendored_mod\n"),
        "third_party/vendored_mod.py": b"",
    })
    assert kinds(census)["vendored_mod"] == "repo"
    assert "third_party" in census.path_targets["tools/run.py"]


@pytest.mark.parametrize("insert", [
    "sys.path.insert(0, os.environ['EXTRA'])",  # dynamic
    "sys.path.insert(0, '/opt/third_party')",  # outside the repo
    "sys.path.append(os.path.join(os.path.dirname(__file__), '..', '..', 'third_party'))",  # above the root
    "paths.append('third_party')",             # not sys.path
])
def test_dynamic_or_outside_sys_path_calls_are_ignored(insert):
    census = import_census({
        "tools/run.py": src(f"import os, sys\npaths = []\n{insert}\nimport vendored_mod\n"),
        "third_party/vendored_mod.py": b"",
    })
    assert kinds(census)["vendored_mod"] == "third_party"
    assert "tools/run.py" not in census.path_targets


def test_a_sys_path_target_counts_only_for_the_file_that_adds_it():
    census = import_census({
        "tools/run.py": src("import sys\nsys.path.insert(0, 'third_party')\nimport vendored_mod\n"),
        "tools/other.py": src("import vendored_mod\n"),
        "third_party/vendored_mod.py": b"",
    })
    assert kinds(census)["vendored_mod"] == "third_party"


def test_path_targets_read_the_forms_statically():
    source = textwrap.dedent("""\
        import os, sys
        from pathlib import Path
        ROOT = Path(__file__).parent
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        sys.path.append(os.path.join(os.getcwd(), 'lib'))
        sys.path.insert(0, str(ROOT))  # a variable: dynamic, ignored
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..'))  # leaves the repo
        """)
    assert localroots.path_targets(ast.parse(source), "a/b/run.py") == ["a", "a/b/lib", "lib"]


def test_search_roots_are_the_files_dir_its_ancestors_the_source_roots_and_its_targets():
    repo = localroots.layout(["lib/x/__init__.py"], {"setup.cfg": b"[options.packages.find]\nwhere = lib\n"})
    assert localroots.search_roots(repo.roots, "a/b/run.py", ["vendor"]) == ["a/b", "a", "", "lib", "src", "vendor"]


def test_declared_names_and_roots_are_local_everywhere():
    repo = localroots.layout(["python/core/__init__.py", "lib/__init__.py", "third_party/fast/fast/__init__.py"],
                             {"pyproject.toml": src("""\
                                 [tool.setuptools.package-dir]
                                 mylib = "lib"
                                 [tool.setuptools.packages.find]
                                 where = ["python"]
                                 """)})
    assert {"core", "mylib", "fast"} <= repo.names
    assert localroots.is_local(repo, "core", [("anywhere/deep/x.py", "core.sub", ())])
    assert not localroots.is_local(repo, "torch", [])  # no occurrence, no evidence
