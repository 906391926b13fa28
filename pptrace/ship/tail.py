"""Read a trace file that is still being written, from a position, whole lines only.

A ``Position`` is where the next line to ship starts: a byte offset where a line begins (a plain
file) or where a compressed member begins (``.gz``: each flush is one whole gzip member; ``.zst``:
one zstd frame), and how many lines of the text from there were already taken (always 0 in a
plain file; the lines of a member shipped so far in a compressed one). A torn tail (a line or
member the writer has not finished) is left for the next read; what the file holds before it
is read in pieces of at most ``CHUNK`` bytes, so memory stays bounded however far behind the
reader is. A damaged member or an overlong line is a ``Damaged`` error: the file is not read
further (its writer's lines always end whole, so this is not a file pptrace is writing).

    taken = read_lines(path, Position(0))       # [(line, position after it), ...]
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = ["CHUNK", "MAX_LINE", "Damaged", "Position", "read_lines"]

#: Bytes read from the file at a time.
CHUNK = 1 << 20
#: The longest line or decompressed member accepted (pptrace writes lines of 64 spans, about
#: 200 kB, and members of one flush).
MAX_LINE = 64 << 20


class Damaged(ValueError):
    """The file holds something its writer never writes: read no further."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where the next line to take starts (see the module docstring)."""

    offset: int = 0
    lines: int = 0


def _open(path: str) -> Any:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    return os.fdopen(os.open(path, flags | getattr(os, "O_CLOEXEC", 0)), "rb")


def read_lines(path: str, pos: Position, want: int = 8) -> list[tuple[str, Position]]:
    """About ``want`` whole lines from ``pos`` (more when a compressed member holds more),
    each with the position after it; [] when none is complete yet."""
    with _open(path) as f:
        f.seek(pos.offset)
        if path.endswith(".gz"):
            return _members(f, pos, want, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS))
        if path.endswith(".zst"):
            import zstandard

            return _members(f, pos, want, lambda: zstandard.ZstdDecompressor().decompressobj())
        return _plain(f, pos, want)


def _plain(f: Any, pos: Position, want: int) -> list[tuple[str, Position]]:
    out: list[tuple[str, Position]] = []
    at, pending = pos.offset, b""
    while len(out) < want:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        data = pending + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE:
                raise Damaged(f"a line longer than {MAX_LINE} bytes at byte {at}")
            pending = data
            continue
        for piece in data[:cut].split(b"\n"):
            at += len(piece) + 1
            if piece.strip():
                out.append((piece.decode("ascii", "replace"), Position(at)))
            elif out:  # an empty line: moves the position, holds nothing
                out[-1] = (out[-1][0], Position(at))
        pending = data[cut + 1:]
    return out


def _members(f: Any, pos: Position, want: int, new: Any) -> list[tuple[str, Position]]:
    out: list[tuple[str, Position]] = []
    start, skip = pos.offset, pos.lines  # the member being read starts at ``start``
    d, used, text, buf = new(), 0, [], b""
    while len(out) < want:
        if not buf:
            buf = f.read(CHUNK)
            if not buf:
                break  # a torn member (still being written): the next read takes it
        try:
            text.append(d.decompress(buf))
        except Exception as exc:  # zlib.error, zstd.ZstdError
            raise Damaged(f"a damaged compressed member at byte {start}: {exc}") from None
        if sum(map(len, text)) > MAX_LINE:
            raise Damaged(f"a compressed member over {MAX_LINE} bytes at byte {start}")
        if not d.eof:
            used += len(buf)
            buf = b""
            continue
        rest = d.unused_data
        end = start + used + len(buf) - len(rest)
        lines = [ln for ln in b"".join(text).split(b"\n") if ln.strip()]
        for i in range(skip, len(lines)):
            after = Position(start, i + 1) if i + 1 < len(lines) else Position(end)
            out.append((lines[i].decode("ascii", "replace"), after))
        start, skip, d, used, text, buf = end, 0, new(), 0, [], rest
    return out
