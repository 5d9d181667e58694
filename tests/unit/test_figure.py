"""The pyramid figure: its numbers are the report's (checked against `resenv report --format json` and
the table `resenv report` prints), and each format is written as what its suffix claims."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from resenv.engine.cli.main import main
from resenv.engine.results.figure import figure_data
from resenv.engine.outcomes import errors_text
from resenv.engine.results.scoring import PYRAMID, score_run
from resenv.engine.store.db import StoreReader

from ..tui import fixture_db

RUN = fixture_db.LIVE_RUN
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-", ".svg": b"<?xml"}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The dashboard's fixture store, with an import census in every C0 result and one import missing
    in one job: the C0 import ratio (what the table prints) then differs from C0's job pass rate."""
    db = fixture_db.build(tmp_path / "fixture")
    conn = sqlite3.connect(db)
    census = json.dumps({"total": 40, "third_party": 4, "modules": [{"name": "numpy", "kind": "third_party"}]})
    conn.execute("UPDATE tier_results SET evidence_json = json_set(evidence_json, '$.census', json(?))"
                 " WHERE tier = 'C0'", (census,))
    conn.execute("UPDATE tier_results SET evidence_json = json_set(evidence_json, '$.missing', json('[\"numpy\"]'))"
                 " WHERE tier = 'C0' AND run_id = ? AND job_id = (SELECT id FROM jobs WHERE run_id = ?"
                 " AND repo_id = 'numpy-v1-api' AND agent = 'claude-code')", (RUN, RUN))
    conn.commit()
    conn.close()
    return db


def cli(db: Path, *args: str):
    return CliRunner().invoke(main, [*args, "--db", str(db)], catch_exceptions=False)


def table_cells(markdown: str, agent: str) -> dict[str, str]:
    """The Agents table row of `agent`, by column name, as `resenv report` prints it."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == agent:
            return dict(zip(header, cells))
    raise AssertionError(f"no row for {agent}")


def test_the_figure_shows_the_reports_numbers(store: Path) -> None:
    report = json.loads(cli(store, "report", RUN, "--format", "json").stdout)
    markdown = cli(store, "report", RUN).stdout
    reader = StoreReader(store)
    try:
        data = figure_data(score_run(reader, RUN))
    finally:
        reader.close()
    assert [funnel.agent for funnel in data.agents] == list(report["agents"]) == ["claude-code", "baseline"]
    # the run has not finished: the title says so, its numbers being partial
    assert data.title == f"suite starter · claude-code, baseline · 2026-01-01 · run {RUN} · running"
    assert data.subtitle == report["scoring"]["header"]
    for funnel in data.agents:
        entry, row = report["agents"][funnel.agent], table_cells(markdown, funnel.agent)
        assert [bar.tier for bar in funnel.bars] == list(PYRAMID)
        c0 = funnel.bars[0]
        assert (c0.passed, c0.denominator, c0.rate) == (
            entry["c0"]["total"] - entry["c0"]["missing"], entry["c0"]["total"], entry["c0"]["paper_ratio"])
        assert c0.text == row["C0 paper"]  # the very cell the table prints, `199/200 (99.5%)`
        for bar in funnel.bars[1:]:
            tally = entry["tiers"][bar.tier]
            assert (bar.passed, bar.denominator, bar.rate) == (tally["passed"], tally["denominator"], tally["rate"])
            assert row[bar.tier].startswith(bar.text)  # `3/5 (60.0%)`, then the table's skip notes
        assert funnel.hallucinations == {kind: entry["hallucinations"].get(kind, 0)
                                         for kind in ("path", "version", "capability")}
        assert (funnel.jobs, funnel.errors) == (entry["jobs"], errors_text(entry["errors"]["by_category"], say_outside=False))
    claude = data.agents[0]
    assert claude.bars[0].text == "199/200 (99.5%)"  # imports, not C0's job pass rate (5/5)
    assert report["agents"]["claude-code"]["tiers"]["C0"]["rate"] == 1.0
    assert claude.hallucinations["capability"] == 2
    assert claude.bars[2].note == "1 job without GPUs" and data.agents[1].bars[2].note == "3 jobs without GPUs"
    assert claude.bars[3].text == "0/0 (—)" and claude.bars[3].note == "not judged"


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_each_format_is_what_its_suffix_claims(store: Path, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / "out" / f"pyramid{suffix}"
    result = cli(store, "report", RUN, "--figure", str(path))
    assert result.exit_code == 0 and f"figure written to {path}" in result.stderr
    content = path.read_bytes()
    assert content.startswith(MAGIC[suffix])
    if suffix == ".svg":  # text stays text: the labels a reader sees
        text = content.decode()
        assert "<svg" in text
        for label in ("suite starter", "claude-code · 8 jobs", "1 infra error", "baseline · 8 jobs", "199/200 (99.5%)",
                      "3/5 (60.0%)", "C5 self-report hallucinations", "2 capability", "C4 multi-GPU"):
            assert label in text, label


def test_a_wrong_suffix_fails_in_one_line_before_anything_is_printed(store: Path, tmp_path: Path) -> None:
    result = cli(store, "report", RUN, "--figure", str(tmp_path / "pyramid.jpg"))
    assert result.exit_code == 2 and result.stdout == ""
    assert "must end in .png, .svg or .pdf" in result.stderr
    assert not (tmp_path / "pyramid.jpg").exists()
