"""Scrubbing a crashed attempt's dir on resume (`secrets.scrub_attempt`): raw logs rewritten with
markers and their line count kept, files the attempt wrote masked in place, nothing else read."""

from __future__ import annotations

import time

import pytest

from resenv.engine import secrets

KEY = "sk-scrub-unit-6c2d9f1e0a7b"


@pytest.fixture(autouse=True)
def registered():
    secrets.reset_registry()
    secrets.register({"UNIT_KEY": KEY})
    yield
    secrets.reset_registry()


def test_logs_get_markers_and_work_files_written_since_the_start_are_masked(tmp_path):
    attempt = tmp_path / "attempt-1"
    (attempt / "logs").mkdir(parents=True)
    (attempt / "work" / "home").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text(KEY)
    started = time.time() - 60
    (attempt / "logs" / "agent.stdout").write_bytes(f"a {KEY}\nmulti {KEY}\n".encode() + b"tail")
    (attempt / "work" / "report.json").write_text(f'{{"notes": "{KEY}"}}')
    (attempt / "work" / "home" / "bin.dat").write_bytes(b"\0" * 10 + KEY.encode() + b"\0")
    (attempt / "work" / "link").symlink_to(outside)
    (attempt / "checkout-epoch").write_text("1.0")

    changed = secrets.scrub_attempt(attempt, started)

    log = (attempt / "logs" / "agent.stdout").read_text()
    assert log == "a [REDACTED:UNIT_KEY]\nmulti [REDACTED:UNIT_KEY]\ntail"
    assert KEY not in (attempt / "work" / "report.json").read_text()
    blob = (attempt / "work" / "home" / "bin.dat").read_bytes()
    assert len(blob) == 11 + len(KEY) and KEY.encode() not in blob
    assert outside.read_text() == KEY, "a symlink is never followed out of the attempt"
    assert sorted(p.name for p in changed) == ["agent.stdout", "bin.dat", "report.json"]


def test_files_older_than_the_attempt_are_left_alone_but_its_logs_never_are(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "logs" / "agent.stderr").write_text(KEY + "\n")
    (tmp_path / "work" / "kept.txt").write_text(KEY)
    # an attempt that started after every file was written (a tier re-run over a kept state, say)
    changed = secrets.scrub_attempt(tmp_path, time.time() + 3600)
    assert [p.name for p in changed] == ["agent.stderr"]
    assert (tmp_path / "logs" / "agent.stderr").read_text() == "[REDACTED:UNIT_KEY]\n"
    assert (tmp_path / "work" / "kept.txt").read_text() == KEY


def test_without_registered_secrets_nothing_is_touched(tmp_path):
    secrets.reset_registry()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "x.stdout").write_text(KEY)
    assert secrets.scrub_attempt(tmp_path, None) == []
    assert (tmp_path / "logs" / "x.stdout").read_text() == KEY
