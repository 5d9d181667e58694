"""LineSplitter: chunk boundaries anywhere, CR/CRLF handling, bounded memory for huge lines."""

from __future__ import annotations

import random

import pytest

from resenv.engine.sandbox.lines import MAX_LINE_BYTES, LineSplitter, RawLine


def split_all(data: bytes, cuts: list[int], max_bytes: int = MAX_LINE_BYTES) -> list[RawLine]:
    """Feed ``data`` cut at the given offsets, then flush."""
    sp = LineSplitter(max_bytes)
    out: list[RawLine] = []
    prev = 0
    for c in sorted(cuts) + [len(data)]:
        out += sp.feed(data[prev:c])
        prev = c
    out += sp.flush()
    return out


def texts(lines: list[RawLine]) -> list[bytes]:
    return [line.data for line in lines]


def test_plain_lines_and_final_unterminated_line() -> None:
    lines = split_all(b"one\ntwo\n\nlast", [])
    assert texts(lines) == [b"one", b"two", b"", b"last"]
    assert [line.nbytes for line in lines] == [3, 3, 0, 4]
    assert not any(line.truncated for line in lines)


def test_no_phantom_line_after_trailing_newline() -> None:
    sp = LineSplitter()
    assert texts(sp.feed(b"a\nb\n")) == [b"a", b"b"]
    assert sp.flush() == []
    assert not sp.pending


def test_crlf_stripped_and_counted_without_terminator() -> None:
    lines = split_all(b"abc\r\ndef\r\n", [])
    assert texts(lines) == [b"abc", b"def"]
    assert [line.nbytes for line in lines] == [3, 3]


@pytest.mark.parametrize("cut", range(0, 11))
def test_crlf_split_across_chunks_at_every_offset(cut: int) -> None:
    data = b"abc\r\ndef\r\n"
    assert texts(split_all(data, [cut])) == [b"abc", b"def"]


def test_progress_bar_keeps_last_overwrite() -> None:
    assert texts(split_all(b"10%\r20%\r30%\n", [])) == [b"30%"]


def test_progress_bar_line_nbytes_counts_raw_bytes() -> None:
    (line,) = split_all(b"10%\r20%\r30%\n", [])
    assert line.nbytes == len(b"10%\r20%\r30%")


def test_trailing_cr_before_newline_keeps_last_nonempty_segment() -> None:
    # tqdm-style: each update ends with \r, the final newline comes after it.
    assert texts(split_all(b"10%\r20%\r\n", [])) == [b"20%"]
    assert texts(split_all(b"a\r\r\n", [])) == [b"a"]
    assert texts(split_all(b"\r\r\n", [])) == [b""]


def test_progress_bar_unterminated_at_eof() -> None:
    assert texts(split_all(b"done\n50%\r60%\r", [])) == [b"done", b"60%"]


def test_every_chunking_gives_the_same_lines() -> None:
    data = b"x\r\nprogress 1\rprogress 22\rprogress 3\n\xff\xfe binary\r\n\rlead\ntail\r"
    expected = split_all(data, [])
    assert texts(expected) == [b"x", b"progress 3", b"\xff\xfe binary", b"lead", b"tail"]
    # every single cut point, and every pair of cut points
    for i in range(len(data) + 1):
        assert split_all(data, [i]) == expected, i
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            assert split_all(data, [i, j]) == expected, (i, j)
    # byte-at-a-time
    assert split_all(data, list(range(len(data)))) == expected


def test_random_chunkings_match_reference() -> None:
    rng = random.Random(1234)
    alphabet = [b"a", b"b", b"\r", b"\n", b"\r\n", b"\xc3\xa9"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.randint(0, len(data)) for _ in range(rng.randint(0, 6)))
        assert split_all(data, cuts, max_bytes=3) == reference(data, max_bytes=3), (data, cuts)


def reference(data: bytes, max_bytes: int) -> list[RawLine]:
    """Straightforward whole-buffer implementation of the same rules."""
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    out = []
    for raw in parts:
        body = raw[:-1] if raw.endswith(b"\r") else raw
        shown = next((seg for seg in reversed(raw.split(b"\r")) if seg), b"")
        out.append(RawLine(shown[:max_bytes], len(body), len(shown) > max_bytes))
    return out


def test_long_line_is_capped_but_counted() -> None:
    sp = LineSplitter(max_bytes=10)
    out = sp.feed(b"0123456789abcdef")
    assert out == []
    out = sp.feed(b"ghij\nshort\n")
    assert out == [RawLine(b"0123456789", 20, True), RawLine(b"short", 5, False)]


def test_exactly_max_bytes_is_not_truncated() -> None:
    assert split_all(b"0123456789\n", [3], max_bytes=10) == [RawLine(b"0123456789", 10, False)]


def test_huge_line_uses_bounded_memory() -> None:
    sp = LineSplitter()
    chunk = b"z" * 65536
    total = 10 * 2**20
    for _ in range(total // len(chunk)):
        assert sp.feed(chunk) == []
        # the splitter never holds more than the cap for the pending line
        assert len(sp._cur) <= MAX_LINE_BYTES
    (line,) = sp.feed(b"\n")
    assert line.nbytes == total
    assert line.truncated
    assert line.data == b"z" * MAX_LINE_BYTES


def test_truncated_overwrite_segment_reports_truncation() -> None:
    lines = split_all(b"0123456789ab\rxy\r\n", [], max_bytes=5)
    assert lines == [RawLine(b"xy", 15, False)]
    lines = split_all(b"xy\r0123456789ab\r\n", [], max_bytes=5)
    assert lines == [RawLine(b"01234", 15, True)]


def test_text_decodes_with_replacement() -> None:
    # a cap falling inside a multibyte character must not raise
    (line,) = split_all("é".encode() * 4 + b"\n", [], max_bytes=3)
    assert line.truncated
    assert line.text() == "é\ufffd"
    (line,) = split_all(b"\xff\xfeok\n", [])
    assert line.text() == "\ufffd\ufffdok"
