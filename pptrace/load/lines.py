"""Whole lines out of a stream of data pieces, never holding more than one bounded line.

Every line reader (plain files, gzip, zstd) hands its data here a piece at a time. A line
longer than ``limit`` is never put together: it is yielded as ``OVERLONG`` once, at its
number, and the rest of it is passed over. A run of blank lines is passed over at C speed
(a file of gigabytes of newlines costs a scan, not a Python loop a line). A NUL byte (binary
data, a sparse file's hole) ends the lines at once as ``BINARY``: nothing after it is read.

    for number, line in Lines(pieces, limit):   # line: bytes, OVERLONG or BINARY
        ...

Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from enum import Enum

__all__ = ["BINARY", "OVERLONG", "Lines", "Marker"]


class Marker(Enum):
    """What the splitter yields instead of a line's bytes."""

    OVERLONG = "a line longer than the limit, passed over unread"
    BINARY = "a NUL byte: binary data, the end of the lines"


OVERLONG = Marker.OVERLONG
BINARY = Marker.BINARY
_BLANK = re.compile(rb"[ \t\r\n]+")


class Lines:
    """The lines of ``pieces`` as (1-based line number, bytes with its newline, or a Marker)."""

    def __init__(self, pieces: Iterable[bytes], limit: int,
                 keep_last: Callable[[], bool] = lambda: True) -> None:
        # keep_last: asked at the end whether a last line without its newline is one (not
        # when the data was cut off, as a damaged compressed member is)
        self.pieces, self.limit, self.keep_last = pieces, limit, keep_last
        #: Set once iteration ends: the number of the line after the last one read.
        self.next_line = 1

    def __iter__(self) -> Iterator[tuple[int, bytes | Marker]]:
        parts: list[bytes] = []  # the current line's pieces so far
        size = 0
        skipping = False  # inside an over-long line, looking for its end
        line = 1
        limit = self.limit
        blank = _BLANK.match
        for piece in self.pieces:
            nul = piece.find(b"\0")
            end = len(piece) if nul < 0 else nul
            start = 0
            while start < end:
                if not parts and not skipping:
                    m = blank(piece, start, end)
                    if m is not None:
                        line += piece.count(b"\n", start, m.end())
                        start = m.end()
                        continue
                nl = piece.find(b"\n", start, end)
                stop = end if nl < 0 else nl + 1
                if skipping:
                    if nl >= 0:
                        skipping = False
                        line += 1
                    start = stop
                    continue
                if size + stop - start > limit:
                    parts, size = [], 0
                    self.next_line = line
                    yield line, OVERLONG
                    if nl >= 0:
                        line += 1
                    else:
                        skipping = True
                    start = stop
                    continue
                if nl < 0:
                    parts.append(piece[start:end])
                    size += end - start
                    break
                if parts:
                    parts.append(piece[start:stop])
                    raw = b"".join(parts)
                    parts, size = [], 0
                else:
                    raw = piece[start:stop]
                yield line, raw
                line += 1
                start = stop
            if nul >= 0:
                self.next_line = line
                yield line, BINARY
                return
        if parts and self.keep_last():
            yield line, b"".join(parts)  # a last line without its newline
            line += 1
        self.next_line = line
