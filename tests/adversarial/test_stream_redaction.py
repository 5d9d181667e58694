"""Attacks on the streaming redactor every sandbox's output goes through (`secrets.StreamRedactor` in
`sandbox.common.OutputSink`): a key written one byte at a time, split at every offset, its JSON-escaped
and URL-quoted spellings split too, a key at the very end of a stream without a newline, secrets that
overlap or are prefixes of one another. The rule each test checks: what comes out equals
`Redactor.redact_bytes` of the whole stream, whatever the chunking, and no prefix of the output ever
holds a registered secret; ordinary output is never held back."""

from __future__ import annotations

import io
import json
import random
import urllib.parse

import pytest

from resenv.engine import secrets as secrets_module
from resenv.engine.sandbox.common import OutputSink
from resenv.engine.secrets import Redactor

KEY = "sk-ant-api03-Stream/Key+With=Odd\"Chars-0123456789"
PLAIN = "sk-proj-plainkey-ABCDEFGHIJKLMNOP"


def feed_all(redactor: Redactor, chunks: list[bytes]) -> tuple[bytes, list[bytes]]:
    """The redacted stream, and what had come out after each chunk."""
    stream = redactor.stream()
    out = b""
    seen = []
    for chunk in chunks:
        out += stream.feed(chunk)
        seen.append(out)
    out += stream.flush()
    seen.append(out)
    return out, seen


def assert_clean(redactor: Redactor, seen: list[bytes]) -> None:
    for out in seen:
        assert not redactor.contains(out), out[-200:]


def spellings(value: str) -> list[bytes]:
    return [value.encode(), json.dumps(value)[1:-1].encode(), urllib.parse.quote(value, safe="").encode(),
            urllib.parse.quote_plus(value, safe="").encode()]


@pytest.mark.parametrize("spelling", range(4))
def test_a_key_one_byte_at_a_time(spelling: int) -> None:
    redactor = Redactor({"K": KEY})
    data = b"start " + spellings(KEY)[spelling] + b" end\n"
    out, seen = feed_all(redactor, [data[i:i + 1] for i in range(len(data))])
    assert out == redactor.redact_bytes(data) == b"start [REDACTED:K] end\n"
    assert_clean(redactor, seen)


@pytest.mark.parametrize("spelling", range(4))
def test_a_key_split_at_every_offset_and_every_pair_of_offsets(spelling: int) -> None:
    redactor = Redactor({"K": KEY})
    secret = spellings(KEY)[spelling]
    data = b"line one\nprefix:" + secret + b":suffix\n"
    expected = redactor.redact_bytes(data)
    assert secret not in expected
    for cut in range(1, len(data)):
        out, seen = feed_all(redactor, [data[:cut], data[cut:]])
        assert out == expected
        assert_clean(redactor, seen)
    start = data.index(secret)
    for a in range(start - 2, start + len(secret) + 2):
        for b in range(a + 1, start + len(secret) + 3):
            out, seen = feed_all(redactor, [data[:a], data[a:b], data[b:]])
            assert out == expected, (a, b)
            assert_clean(redactor, seen)


def test_random_chunkings_of_a_long_stream_equal_the_whole_redaction() -> None:
    redactor = Redactor({"K": KEY, "P": PLAIN})
    rng = random.Random(11)
    pieces = [b"noise sk-ant sk- s %s\n" % str(i).encode() for i in range(200)]
    for i in range(0, 200, 7):
        pieces[i] += rng.choice(spellings(KEY) + spellings(PLAIN))
    data = b"".join(pieces)
    expected = redactor.redact_bytes(data)
    for _ in range(30):
        chunks, pos = [], 0
        while pos < len(data):
            step = rng.choice([1, 2, 3, 7, 64, 500])
            chunks.append(data[pos:pos + step])
            pos += step
        out, seen = feed_all(redactor, chunks)
        assert out == expected
        assert_clean(redactor, seen[::50] + seen[-1:])


def test_a_key_at_the_very_end_of_a_stream_without_newline() -> None:
    redactor = Redactor({"K": KEY})
    data = b"no newline after the key: " + KEY.encode()
    for cut in range(len(data) - len(KEY), len(data)):
        out, seen = feed_all(redactor, [data[:cut], data[cut:]])
        assert out == b"no newline after the key: [REDACTED:K]"
        assert_clean(redactor, seen)
    # the unfinished start of a key at the end is let out when the stream ends: it is no secret
    out, _ = feed_all(redactor, [b"almost: " + KEY.encode()[:-1]])
    assert out == b"almost: " + KEY.encode()[:-1]


def test_overlapping_secrets_and_a_secret_that_is_a_prefix_of_another() -> None:
    first, second = "AAAAbbbbCCCCdddd", "CCCCddddEEEEffff"  # the end of one is the start of the other
    short, long = "prefix-secret-1", "prefix-secret-1-and-more"  # one is a prefix of the other
    redactor = Redactor({"F": first, "S": second, "SHORT": short, "LONG": long})
    data = (f"x {first}EEEEffff y {second} z {short} w {long} v {short}-and-m end\n").encode()
    expected = redactor.redact_bytes(data)
    assert b"[REDACTED:LONG]" in expected and expected.count(b"[REDACTED:SHORT]") == 2
    for cut in range(1, len(data)):
        out, seen = feed_all(redactor, [data[:cut], data[cut:]])
        assert out == expected, cut
        assert_clean(redactor, seen)
    out, seen = feed_all(redactor, [data[i:i + 1] for i in range(len(data))])
    assert out == expected
    assert_clean(redactor, seen)


def test_ordinary_output_is_not_held_back() -> None:
    redactor = Redactor({"K": KEY})
    stream = redactor.stream()
    for line in (b"hello world\n", b"a progress bar 10%\r", b"no newline yet", b"ends with sk-an"):
        out = stream.feed(line)
        if line.endswith(b"sk-an"):
            assert out == line[:-len(b"sk-an")] and stream.held == len(b"sk-an")
        else:
            assert out == line and stream.held == 0
    assert stream.feed(b"x then more\n") == b"sk-anx then more\n" and stream.held == 0
    # a start byte of the key that cannot begin it any more (too far back) is not held either
    assert stream.feed(b"s" + b"y" * 100) == b"s" + b"y" * 100 and stream.held == 0


def test_without_secrets_a_stream_passes_chunks_through_untouched() -> None:
    stream = Redactor().stream()
    chunk = b"sk-ant-api03 anything\n"
    assert stream.feed(chunk) is chunk and stream.flush() == b""


def test_output_sink_writes_and_splits_only_redacted_bytes() -> None:
    """The raw file and the lines see the same bytes: a key split over 1-byte writes is never in the
    file, not even half of it while the rest is on its way, and line sizes are those of the file."""
    secrets_module.reset_registry()
    try:
        secrets_module.register({"K": KEY})
        f = io.BytesIO()
        lines = []
        sink = OutputSink(f, "stdout", lines.append)
        data = f"first {KEY} line\nsecond line\nthe last: {KEY}".encode()
        for i in range(len(data)):
            sink.write(data[i:i + 1])
            assert KEY.encode()[:12] not in f.getvalue()  # the start of the key is held, never written
        assert f.getvalue().endswith(b"the last: [REDACTED:K]")  # complete: replaced at once, no newline needed
        sink.close()
        assert f.getvalue() == b"first [REDACTED:K] line\nsecond line\nthe last: [REDACTED:K]"
        assert [line.text for line in lines] == ["first [REDACTED:K] line", "second line", "the last: [REDACTED:K]"]
        assert sum(line.nbytes + 1 for line in lines) - 1 == len(f.getvalue())
    finally:
        secrets_module.reset_registry()
