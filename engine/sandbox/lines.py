"""Incremental line splitting for live process output.

Sandboxes read stdout/stderr in arbitrary chunks (binary-safe, never ``readline``), so lines must be
assembled across chunk boundaries here. The splitter keeps at most ``MAX_LINE_BYTES`` of any line, so
a 10 MB line (minified JSON, a base64 blob) costs 16 KiB of memory, while ``nbytes`` still reports how
long the line really was. Carriage returns are treated the way a terminal shows them: progress bars
(``10%\\r20%\\r30%\\n``) collapse to what was left on screen (``30%``), and CRLF endings are stripped.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_LINE_BYTES = 16384
"""Bytes of one line kept for ``on_line`` consumers; the raw log files always keep everything."""

_CR = 0x0D


class RawLine(NamedTuple):
    """One completed line as the splitter saw it, before decoding."""

    data: bytes  # the visible content (after \r overwrites), at most max_bytes long
    nbytes: int  # full raw length of the line, without its "\n" (or "\r\n")
    truncated: bool  # data was cut at max_bytes

    def text(self) -> str:
        """Decode for display; a cut inside a multibyte character becomes U+FFFD."""
        return self.data.decode("utf-8", errors="replace")


class LineSplitter:
    """Assemble lines from a byte stream fed in chunks of any size.

    Rules, per line (the bytes between two ``\\n``):

    * a trailing ``\\r`` is a CRLF ending and is not content;
    * ``\\r`` inside a line is a terminal overwrite: the line shows the last ``\\r``-separated segment
      that is non-empty (so ``"a\\rb\\r"`` shows ``"b"``, ``"a\\r\\r"`` shows ``"a"``);
    * at most ``max_bytes`` of the shown segment are kept; ``nbytes`` counts the whole raw line.

    Memory per line is bounded by ``max_bytes`` (plus the chunk being processed), whatever the
    line length.
    """

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self.max_bytes = max_bytes
        self._reset()

    def _reset(self) -> None:
        self._cur = bytearray()  # kept prefix of the segment after the latest \r
        self._cur_len = 0  # full length of that segment
        self._prev: bytes | None = None  # last non-empty finished segment (shown if _cur is empty)
        self._prev_truncated = False
        self._raw = 0  # raw bytes of this line so far (\r included, \n excluded)
        self._ends_cr = False  # the last raw byte seen for this line was \r

    @property
    def pending(self) -> bool:
        """True if bytes of an unterminated line are buffered."""
        return self._raw > 0

    def feed(self, chunk: bytes) -> list[RawLine]:
        """Consume a chunk; return the lines it completed, in order."""
        out: list[RawLine] = []
        pos = 0
        n = len(chunk)
        while pos < n:
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            if end > pos:
                self._consume(chunk[pos:end])
            if nl < 0:
                break
            out.append(self._finish())
            pos = nl + 1
        return out

    def flush(self) -> list[RawLine]:
        """End of stream: return the final unterminated line, if there is one."""
        if self._raw == 0:
            return []
        return [self._finish()]

    # -- internals -----------------------------------------------------------------------------

    def _consume(self, part: bytes) -> None:
        """Add bytes that contain no \\n to the current line."""
        self._raw += len(part)
        self._ends_cr = part[-1] == _CR
        if b"\r" not in part:
            self._append(part)
            return
        segs = part.split(b"\r")
        self._append(segs[0])
        self._carriage_return()
        # Of the segments fully enclosed by \r in this chunk only the last non-empty one can
        # still be shown, so skip the others without copying them into the line buffer.
        for seg in reversed(segs[1:-1]):
            if seg:
                self._append(seg)
                self._carriage_return()
                break
        self._append(segs[-1])

    def _append(self, seg: bytes) -> None:
        if not seg:
            return
        if self._cur_len == 0:
            # The new segment is non-empty, so it will be shown instead of the previous one.
            self._prev = None
            self._prev_truncated = False
        room = self.max_bytes - len(self._cur)
        if room > 0:
            self._cur += seg[:room]
        self._cur_len += len(seg)

    def _carriage_return(self) -> None:
        if self._cur_len == 0:
            return  # empty segment: whatever was shown before stays shown
        self._prev = bytes(self._cur)
        self._prev_truncated = self._cur_len > len(self._cur)
        self._cur = bytearray()
        self._cur_len = 0

    def _finish(self) -> RawLine:
        if self._cur_len > 0:
            data, truncated = bytes(self._cur), self._cur_len > len(self._cur)
        elif self._prev is not None:
            data, truncated = self._prev, self._prev_truncated
        else:
            data, truncated = b"", False
        nbytes = self._raw - (1 if self._ends_cr else 0)
        self._reset()
        return RawLine(data, nbytes, truncated)
