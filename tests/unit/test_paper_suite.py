"""The `paper` suite in benchmark.yaml: the ResearchEnvBench paper's 44 repos, pinned as published,
with the paper's tier applicability, so the denominators resenv derives equal the paper's."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from resenv.engine.spec import TEMPLATE_FIELDS, Entrypoint, GitSource, load_benchmark

from ..conftest import REPO_ROOT

PAPER_CSV = next((p for p in (REPO_ROOT / "shared" / "paper_repos.csv", REPO_ROOT.parent / "shared" / "paper_repos.csv")
                  if p.exists()), None)
# The paper's denominators (C2 is always applicable: every repo is scored for CUDA alignment).
PAPER_DENOMINATORS = {"C1": 29, "C2": 44, "C3": 43, "C4": 32}
TIER_OF = {"cpu": "C1", "single_gpu": "C3", "multi_gpu": "C4"}


@pytest.fixture(scope="module")
def bench():
    return load_benchmark(REPO_ROOT / "benchmark.yaml")


@pytest.fixture(scope="module")
def paper(bench):
    return bench.suite("paper")


def test_the_whole_catalog_validates(bench):
    assert {"starter", "paper"} <= set(bench.suites)


def test_paper_suite_has_44_pinned_git_repos(paper):
    assert len(paper.repos) == 44
    for repo in paper.repos:
        assert isinstance(repo.source, GitSource), repo.id
        assert len(repo.source.commit) == 40, repo.id


@pytest.mark.skipif(PAPER_CSV is None, reason="shared/paper_repos.csv is not in this checkout")
def test_paper_suite_matches_the_published_table(paper):
    rows = {row["url"]: row for row in csv.DictReader(Path(PAPER_CSV).open())}
    by_url = {repo.source.git: repo for repo in paper.repos}
    assert set(by_url) == set(rows)
    for url, row in rows.items():
        repo = by_url[url]
        assert repo.source.commit == row["commit"], url
        assert repo.category == row["category"], url
        tiers = repo.tiers()
        for tier, column in (("cpu", "supports_cpu"), ("single_gpu", "supports_single_gpu"),
                             ("multi_gpu", "supports_multi_gpu")):
            assert isinstance(tiers[tier], Entrypoint) == (row[column] == "yes"), (url, tier)


def test_denominators_equal_the_papers(paper):
    counts = {"C2": len(paper.repos)}
    for tier, code in TIER_OF.items():
        counts[code] = sum(isinstance(repo.tiers()[tier], Entrypoint) for repo in paper.repos)
    assert counts == PAPER_DENOMINATORS


def test_every_entrypoint_renders_and_multi_gpu_leases_two(paper):
    values = {name: f"/x/{name}" for name in TEMPLATE_FIELDS} | {"gpus": "0,1", "ngpus": "2"}
    for repo in paper.repos:
        for tier, target in repo.tiers().items():
            if isinstance(target, str):
                assert target.strip(), (repo.id, tier)
                continue
            rendered = " ".join(target.argv(values))
            assert not any("{" + name + "}" in rendered for name in TEMPLATE_FIELDS), (repo.id, tier, rendered)
            target.render_env(values)
            assert target.gpus == {"cpu": 0, "single_gpu": 1, "multi_gpu": 2}[tier], (repo.id, tier)


def test_the_evidence_file_covers_every_repo(paper):
    evidence = (REPO_ROOT / "docs" / "evidence" / "paper-suite" / "entrypoints.md").read_text()
    for repo in paper.repos:
        slug = repo.source.git.removeprefix("https://github.com/")
        assert f"## {slug} @ `{repo.source.commit}`" in evidence, repo.id


def test_the_check_output_is_current(paper):
    """docs/evidence/paper-suite/check-output.txt (check_suite.py run against the repos' git copies) shows
    every repo at its pinned commit and every entrypoint exactly as benchmark.yaml has it now, with no
    missing file or module: an entrypoint edited without re-running the check fails here."""
    output = (REPO_ROOT / "docs" / "evidence" / "paper-suite" / "check-output.txt").read_text()
    values = {name: f"/resenv/{name}" for name in TEMPLATE_FIELDS} | {"python": "PYTHON", "ngpus": "2", "gpus": "0,1"}
    for repo in paper.repos:
        slug = repo.source.git.removeprefix("https://github.com/")
        assert f"## {slug} @ {repo.source.commit} (id {repo.id})" in output, repo.id
        for tier, target in repo.tiers().items():
            if isinstance(target, Entrypoint):
                argv = target.argv(values)
                shown = argv[2] if argv[:2] == ["/bin/sh", "-c"] else " ".join(argv)
                assert f"\n  {tier}: {shown}\n" in output, (repo.id, tier)
    assert "\nmissing references: 0\n" in output
