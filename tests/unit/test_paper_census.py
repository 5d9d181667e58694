"""suites/paper/census.json: resenv's C0 import census of each paper repo at its pinned commit, kept as
data because CI cannot reach the code hosts (docs/evidence/paper-suite/check_suite.py computes it).

It must describe exactly the `paper` suite of benchmark.yaml (same repos, same pinned commits), its
numbers must add up, and where the git copies are on this machine it must equal a fresh census."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from resenv.engine.spec import GitSource, load_benchmark
from resenv.probes.census import KINDS, files_at_commit, import_census

from ..conftest import REPO_ROOT

CENSUS = REPO_ROOT / "suites" / "paper" / "census.json"
PAPER_CSV = next((p for p in (REPO_ROOT / "shared" / "paper_repos.csv", REPO_ROOT.parent / "shared" / "paper_repos.csv")
                  if p.exists()), None)
PAPER_PUBLISHED_TOTAL = 2858
MIRROR = Path("/work/.mirror")


@pytest.fixture(scope="module")
def census() -> dict[str, Any]:
    return json.loads(CENSUS.read_text())


@pytest.fixture(scope="module")
def records(census: dict[str, Any]) -> list[dict[str, Any]]:
    return census["repos"]


def test_one_record_per_paper_repo_with_the_same_pinned_commit(records: list[dict[str, Any]]) -> None:
    suite = load_benchmark(REPO_ROOT / "benchmark.yaml").suite("paper")
    expected = []
    for repo in suite.repos:
        assert isinstance(repo.source, GitSource)
        expected.append((repo.id, repo.source.git.removeprefix("https://github.com/"), repo.source.commit))
    assert [(r["id"], r["slug"], r["commit"]) for r in records] == expected


def test_counted_totals_add_up(records: list[dict[str, Any]]) -> None:
    for record in records:
        if not record["counted"]:
            continue
        modules = record["modules"]
        assert set(modules) == set(KINDS), record["id"]
        assert len(modules["stdlib"]) == record["stdlib"], record["id"]
        assert len(modules["repo"]) == record["repo"], record["id"]
        assert len(modules["third_party"]) == record["third_party_total"], record["id"]
        assert record["paper_compatible_total"] == record["stdlib"] + record["repo"] + record["third_party_total"]
        names = [name for kind in KINDS for name in modules[kind]]
        assert len(names) == len(set(names)), f"{record['id']}: a module is in two kinds"
        for kind in KINDS:
            assert modules[kind] == sorted(modules[kind]), (record["id"], kind)


def test_uncounted_repos_say_why_and_carry_no_numbers(records: list[dict[str, Any]]) -> None:
    for record in records:
        if record["counted"]:
            continue
        assert record["why_not_counted"].strip(), record["id"]
        assert "paper_compatible_total" not in record and "third_party_total" not in record, record["id"]


def test_the_suite_totals_are_the_sums_of_the_records(census: dict[str, Any], records: list[dict[str, Any]]) -> None:
    counted = [r for r in records if r["counted"]]
    totals = census["totals"]
    assert totals["repos"] == len(records) == 44
    assert totals["counted_repos"] == len(counted)
    assert totals["paper_compatible_total"] == sum(r["paper_compatible_total"] for r in counted)
    assert totals["third_party_total"] == sum(r["third_party_total"] for r in counted)
    assert totals["paper_total_of_counted_repos"] == sum(r["paper_total"] for r in counted)
    assert totals["paper_total"] == sum(r["paper_total"] for r in records) == PAPER_PUBLISHED_TOTAL


@pytest.mark.skipif(PAPER_CSV is None, reason="shared/paper_repos.csv is not in this checkout")
def test_paper_totals_are_the_published_ones(records: list[dict[str, Any]]) -> None:
    assert PAPER_CSV is not None
    with Path(PAPER_CSV).open() as handle:
        published = {row["repo"]: int(row["paper_c0_import_total"]) for row in csv.DictReader(handle)}
    assert {r["slug"]: r["paper_total"] for r in records} == published


def _mirror_git_dir(slug: str) -> Path | None:
    base = MIRROR / slug.replace("/", "+") / "repo"
    return base if (base / "objects").is_dir() else None


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")  # the repos' own escapes
@pytest.mark.parametrize("repo_id", ["VisionMamba", "T-GATE", "nano-vllm", "Depth-Anything-V2", "SocialED"])
def test_a_fresh_census_equals_the_stored_one_where_the_copy_is_here(records: list[dict[str, Any]], repo_id: str) -> None:
    """Only on machines that keep the git copies (the development machine); CI skips it."""
    record = next(r for r in records if r["id"] == repo_id)
    git_dir = _mirror_git_dir(record["slug"])
    if git_dir is None or not record["counted"]:
        pytest.skip(f"no git copy of {record['slug']} at its pinned commit here")
    probe = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "-e", record["commit"] + "^{commit}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"the copy of {record['slug']} lacks the pinned commit")
    fresh = import_census(files_at_commit(git_dir, record["commit"]))
    assert {kind: fresh.names(kind) for kind in KINDS} == record["modules"]
    assert fresh.total == record["paper_compatible_total"]
