"""The repo task's `assets:` list: pinned Hugging Face repos and sha256-checked URLs, validated, and
shown in the dry-run plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from resenv.engine.assets import AssetCache
from resenv.engine.dryrun import plan_jobs, render_plan
from resenv.engine.runs import RunPlan
from resenv.engine.spec import HfAsset, SpecError, UrlAsset, loads_benchmark

SHA = "a" * 40
SUM = "b" * 64


def bench(assets: str):
    text = f"""\
version: 1
defaults: {{suite: s, agent: a}}
agents: {{a: {{kind: command, command: ["true"]}}}}
hosts: {{local: {{kind: local, gpus: 1}}}}
suites:
  s:
    repos:
      - id: r
        source: {{git: https://example.org/r, commit: "{SHA}"}}
        entrypoints: {{single_gpu: {{command: "{{python}} run.py"}}}}
        not_applicable: {{cpu: none, multi_gpu: none}}
        assets:
{assets}
"""
    return loads_benchmark(text, Path("."))


def test_assets_validate_and_show_in_the_plan(tmp_path: Path):
    b = bench(f"""\
          - {{kind: hf, repo: org/model, revision: "{SHA.upper()}", size: 104857600, files: [w.pth], dest: checkpoints}}
          - {{kind: url, url: https://example.org/x.bin, sha256: "{SUM}", size: 2048}}
""")
    hf, url = b.suite("s").repo("r").assets
    assert isinstance(hf, HfAsset) and hf.revision == SHA and hf.files == ("w.pth",)
    assert isinstance(url, UrlAsset) and url.dest is None
    plan = RunPlan(suite="s", agents=["a"], hosts=["local"])
    text = render_plan(plan_jobs(b, plan, AssetCache(tmp_path)))
    assert ("    asset hf:org/model@aaaaaaaaaaaa (100.0 MiB) [not cached]\n"
            "    asset url:https://example.org/x.bin (2.0 KiB) [not cached]\n") in text
    assert "r/a  tiers C0,C2,C3,C5  gpus 1" in text


@pytest.mark.parametrize("asset, message", [
    ('{kind: hf, repo: org/m, revision: main, size: 1}', "40-hex revision"),
    (f'{{kind: url, url: https://e.org/x, sha256: "{SUM[:10]}", size: 1}}', "64-hex sha256"),
    (f'{{kind: hf, repo: org/m, revision: "{SHA}", size: 0}}', "size"),
    (f'{{kind: hf, repo: org/m, revision: "{SHA}", size: 1, dest: /abs}}', "relative to the repo checkout"),
    (f'{{kind: hf, repo: org/m, revision: "{SHA}", size: 1, dest: ../up}}', "relative to the repo checkout"),
    ('{kind: ftp, url: x}', "known asset kinds: hf, url"),
    (f'{{kind: url, url: https://e.org/x, sha256: "{SUM}"}}', "size"),
])
def test_bad_assets_are_refused_with_their_field(asset: str, message: str):
    with pytest.raises(SpecError) as caught:
        bench(f"          - {asset}\n")
    text = str(caught.value)
    assert message in text and "assets" in text, text
