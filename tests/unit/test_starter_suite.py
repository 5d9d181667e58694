"""The starter suite's catalog, docs and expected pyramid agree with each other."""

from __future__ import annotations

import re

import yaml

from resenv.engine.spec import load_benchmark

from ..conftest import REPO_ROOT

STARTER = REPO_ROOT / "suites" / "starter"
STATUSES = re.compile(r"^(pass|fail/[a-z_]+|skip/(not_applicable|insufficient_hardware)|error/[a-z_]+)$")


def test_every_starter_repo_is_documented_and_has_an_expected_pyramid():
    bench = load_benchmark(REPO_ROOT / "benchmark.yaml")
    assert bench.defaults.agent == "baseline" and bench.agent("baseline").kind == "baseline"
    repos = [repo.id for repo in bench.suite("starter").repos]
    assert len(repos) >= 6
    expected = yaml.safe_load((STARTER / "expected.yaml").read_text())
    assert sorted(expected["repos"]) == sorted(repos)
    table = (STARTER / "EXPECTED.md").read_text()
    for repo in bench.suite("starter").repos:
        readme = (STARTER / repo.id / "README.md").read_text()
        assert "Failure mode" in readme, repo.id
        want = expected["repos"][repo.id]
        for tier in ("C0", "C1", "C2", "C3", "C4", "C5"):
            assert STATUSES.match(want[tier]), (repo.id, tier, want[tier])
            if want[tier].startswith("fail"):
                assert want.get("why", {}).get(tier), f"{repo.id} {tier}: an expected failure needs a reason"
        row = next((line for line in table.splitlines() if line.startswith(f"| {repo.id} ")), None)
        assert row is not None, f"{repo.id} missing from EXPECTED.md"
        cells = [cell.strip() for cell in row.strip("|").split("|")][1:7]
        assert cells == [want[t] for t in ("C0", "C1", "C2", "C3", "C4", "C5")], (repo.id, cells)
        # GPU tiers: an entrypoint or a reason, never neither (the spec enforces it; the docs say it)
        tiers = repo.tiers()
        assert set(tiers) == {"cpu", "single_gpu", "multi_gpu"}
