"""Secrets: loading (env_from, env_file) and redaction by value from text, objects, streams, files."""

from __future__ import annotations

import json
import os
import random
import time
import urllib.parse

import pytest

from resenv.engine import secrets as secrets_module
from resenv.engine.secrets import MIN_SECRET_CHARS, Redactor, load_secrets, parse_env_file

KEY = "sk-ant-api03-Secret/Value+With=Odd\"Chars-0123456789"


def test_env_file_parsing() -> None:
    values, problems = parse_env_file(
        "# comment\n\nexport A=1\nB = 'two words'\nC=\"line\\nbreak\"\nD=plain # trailing comment\nbad line\n"
        "E=\n9X=1\n")
    assert values == {"A": "1", "B": "two words", "C": "line\nbreak", "D": "plain", "E": ""}
    assert problems == ["line 7: expected NAME=value", "line 9: expected NAME=value"]


def test_load_secrets_from_environment_and_file(tmp_path) -> None:
    env_file = tmp_path / "agent.env"
    env_file.write_text("ANTHROPIC_BASE_URL=http://127.0.0.1:9/\nFROM_FILE=file-secret-value\n")
    loaded = load_secrets(["ANTHROPIC_API_KEY", "MISSING_ONE"], env_file,
                          environ={"ANTHROPIC_API_KEY": KEY, "OTHER": "not passed"})
    assert loaded.env == {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/", "FROM_FILE": "file-secret-value",
                          "ANTHROPIC_API_KEY": KEY}
    assert loaded.problems == ["env_from MISSING_ONE: not set in the engine's environment"]
    missing = load_secrets([], tmp_path / "nope.env", environ={})
    assert missing.problems and "nope.env" in missing.problems[0]


def test_text_and_objects_are_redacted_with_every_spelling() -> None:
    redactor = Redactor({"ANTHROPIC_API_KEY": KEY, "SHORT": "abc1234"})  # 7 chars: never redacted
    text = f"key={KEY} json={json.dumps(KEY)} url={urllib.parse.quote(KEY, safe='')} short=abc1234"
    out = redactor.redact_text(text)
    assert KEY not in out and json.dumps(KEY)[1:-1] not in out and urllib.parse.quote(KEY, safe="") not in out
    assert out.count("[REDACTED:ANTHROPIC_API_KEY]") == 3 and "abc1234" in out
    obj = {"a": [1, {"b": f"x{KEY}y"}], KEY: "key as key", "n": None}
    red = redactor.redact_obj(obj)
    assert KEY not in json.dumps(red) and red["a"][0] == 1 and red["n"] is None
    untouched = {"a": ["nothing here"]}
    assert redactor.redact_obj(untouched) is untouched


def test_stream_redaction_catches_secrets_split_across_chunks() -> None:
    redactor = Redactor({"K": KEY})
    rng = random.Random(7)
    data = (b"noise " * 50 + KEY.encode() + b"\n") * 20 + KEY.encode()
    for _ in range(50):
        stream = redactor.stream()
        out = b""
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 40)
            out += stream.feed(data[pos:pos + step])
            pos += step
        out += stream.flush()
        assert KEY.encode() not in out
        assert out.count(b"[REDACTED:K]") == 21
        assert out.count(b"\n") == data.count(b"\n")


def test_files_are_rewritten_or_masked_in_place(tmp_path) -> None:
    redactor = Redactor({"K": KEY})
    log = tmp_path / "agent.stdout"
    big = b"a" * (3 << 20)
    log.write_bytes(big + KEY.encode() + b"\n" + big[:100] + KEY.encode())
    assert redactor.redact_file(log) is True
    assert KEY.encode() not in log.read_bytes() and log.read_bytes().count(b"[REDACTED:K]") == 2
    assert redactor.redact_file(log) is False
    binary = tmp_path / "lib.so"
    payload = os.urandom(1 << 20) + KEY.encode() + os.urandom(100)
    binary.write_bytes(payload)
    size = binary.stat().st_size
    assert redactor.mask_file_in_place(binary) is True
    after = binary.read_bytes()
    assert len(after) == size and KEY.encode() not in after
    assert after[: 1 << 20] == payload[: 1 << 20] and after[-100:] == payload[-100:]


def test_scrub_tree_masks_only_files_changed_since(tmp_path) -> None:
    redactor = Redactor({"K": KEY})
    old = tmp_path / "repo" / "old.txt"
    old.parent.mkdir()
    old.write_text(f"old {KEY}")
    past = time.time() - 3600
    os.utime(old, (past, past))
    since = time.time() - 1
    new = tmp_path / "home" / ".tool" / "config.json"
    new.parent.mkdir(parents=True)
    new.write_text(json.dumps({"key": KEY}))
    link = tmp_path / "link"
    link.symlink_to(old)
    # ctime of `old` is recent too (utime changes it): only mtime AND ctime before `since` skip a file
    changed = redactor.scrub_tree(tmp_path, since=since)
    assert new in changed and KEY not in new.read_text()
    assert link.is_symlink()


def test_registry_is_process_wide() -> None:
    secrets_module.reset_registry()
    try:
        assert secrets_module.redact_obj({"a": KEY}) == {"a": KEY}
        secrets_module.register({"K": KEY, "TINY": "x" * (MIN_SECRET_CHARS - 1)})
        assert secrets_module.redact_obj({"a": KEY}) == {"a": "[REDACTED:K]"}
        assert secrets_module.redact_text("x" * (MIN_SECRET_CHARS - 1)) == "x" * (MIN_SECRET_CHARS - 1)
    finally:
        secrets_module.reset_registry()


@pytest.mark.parametrize("value", ["a\nmulti-line\nsecret value", "spaces in the secret value"])
def test_line_counts_survive_redaction(value: str) -> None:
    redactor = Redactor({"V": value})
    text = f"before\n{value}\nafter\n"
    assert redactor.redact_text(text).count("\n") == text.count("\n")
