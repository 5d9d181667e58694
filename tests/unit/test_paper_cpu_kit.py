"""The paper-cpu evidence kit's benchmark file stays the paper suite's own: the same 17 repos with
the same pinned sources, categories and entrypoints, so its evidence speaks for the suite as
published, and its mirror rewrite changes where a repo is cloned from, never what is judged."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from resenv.engine.spec import load_benchmark

from ..conftest import REPO_ROOT

KIT = REPO_ROOT / "docs" / "evidence" / "paper-cpu"


def load_kit_script(name: str):
    """One of the kit's scripts (not a package module) loaded by path."""
    spec = importlib.util.spec_from_file_location(f"paper_cpu_{name}", KIT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def suite_tool():
    return load_kit_script("suite")


def test_kit_file_is_what_the_generator_makes(suite_tool):
    assert (KIT / "benchmark.yaml").read_text() == suite_tool.render(suite_tool.kit_document(suite_tool.catalog()))


def test_kit_repos_equal_the_paper_suites(suite_tool):
    paper = {repo.id: repo for repo in load_benchmark(REPO_ROOT / "benchmark.yaml").suite("paper").repos}
    kit = load_benchmark(KIT / "benchmark.yaml")
    repos = kit.suite(suite_tool.SUITE).repos
    assert [repo.id for repo in repos] == list(suite_tool.REPOS)
    assert len(repos) == len(suite_tool.REPOS) == 17
    for repo in repos:
        theirs = paper[repo.id]
        assert repo.source.git == theirs.source.git, repo.id
        assert repo.source.commit == theirs.source.commit, repo.id
        assert repo.category == theirs.category, repo.id
        assert repo.tiers() == theirs.tiers(), repo.id
    assert set(kit.agents) == {"baseline"}


def test_mirror_copy_keeps_commits_and_points_at_bare_copies(suite_tool, tmp_path):
    import yaml

    document = yaml.safe_load((KIT / "benchmark.yaml").read_text())
    for entry in document["suites"][suite_tool.SUITE]["repos"]:
        suite_tool.mirror_path(entry["source"]["git"], tmp_path).mkdir(parents=True)
    out = tmp_path / "local.yaml"
    assert suite_tool.main(["mirror", str(tmp_path), str(out), "--repo", "VisionMamba", "--repo", "rllm"]) == 0
    local = load_benchmark(out).suite(suite_tool.SUITE).repos
    paper = {repo.id: repo for repo in load_benchmark(REPO_ROOT / "benchmark.yaml").suite("paper").repos}
    assert [repo.id for repo in local] == ["VisionMamba", "rllm"]
    for repo in local:
        assert repo.source.git == str(tmp_path.resolve() / "kyegomez+VisionMamba" / "repo") if repo.id == "VisionMamba" \
            else repo.source.git.endswith("rllm-team+rllm/repo")
        assert repo.source.commit == paper[repo.id].source.commit
        assert repo.tiers() == paper[repo.id].tiers()


@pytest.fixture(scope="module")
def table_tool():
    return load_kit_script("table")


def test_baseline_summary_reads_new_fields_and_tolerates_their_absence(table_tool):
    today = table_tool.baseline_summary({"baseline": {"final": True, "failures": [
        {"step": "verify", "category": "runtime", "message": "boom"}]}})
    assert today["failures"][0]["step"] == "verify"
    assert today["pip_check"] is None and today["imports_missing"] is None and today["conflicts"] is None
    full = table_tool.baseline_summary({"baseline": {
        "pip_check": {"ok": False, "problems": ["a 1 has requirement b<2"]}, "imports_missing": ["zeta"],
        "conflicts": [{"package": "numpy", "for_import": "numpy", "reason": "pinned <2 by x"}], "failures": []}})
    assert full["pip_check"] == {"ok": False, "problems": ["a 1 has requirement b<2"]}
    assert full["imports_missing"] == ["zeta"] and full["conflicts"][0]["package"] == "numpy"
    for hostile in (None, [], {"baseline": "x"}, {"baseline": {"pip_check": "yes", "conflicts": {}}}):
        summary = table_tool.baseline_summary(hostile)
        assert summary["pip_check"] is None and summary["conflicts"] is None


def test_last_meaningful_line_skips_blank_and_index_noise(table_tool, tmp_path):
    log = tmp_path / "C1.stderr"
    log.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n\n"
                   "WARNING: Location 'file:///somewhere/simple/x/' is ignored: it is neither a file nor a directory.\n")
    assert table_tool.last_meaningful_line(str(log)) == "ModuleNotFoundError: No module named 'x'"
    assert table_tool.last_meaningful_line(str(tmp_path / "absent")).startswith("(unreadable")
