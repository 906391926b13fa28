"""Compressed trace files: gzip (the standard library) and zstd (the ``zstandard`` package).

pptrace's writer (``PPTRACE_COMPRESS``) makes every flush a complete gzip member or zstd frame
appended to the file, so that a writer killed mid-write loses at most its last flush. Here a
file is decompressed a chunk at a time, member after member (never the whole file in memory,
and never more than a few MB of output from one chunk: a small file that decompresses to
gigabytes costs time, not memory), and split into lines exactly as the uncompressed file's
lines would be (``pptrace.load.lines``). The kind of file comes from its first bytes, whatever
its name. A file that decompresses to more than ``ReadLimits.decompressed_cap`` of what was read
of it (a compression bomb) is read to there, and the rest skipped and said in ``problem``.

A member cut short at the end of the file (the writer stopped mid-write) gives the whole lines
before the cut; what follows the last whole line is skipped and said in ``problem``, as a torn
last line of a plain file is. Damaged data (not a member where one should start, a bad CRC)
ends the reading there, said the same way.

    kind = compression_of(head)               # "gzip", "zstd" or None
    lines = CompressedLines(f, kind, path, tick)   # tick(compressed bytes read)
    for piece in lines.pieces(): ...              # decompressed, a bounded piece at a time
    for line in lines: ...                        # or its lines
    lines.problem                             # None, or what was wrong at the end
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from pptrace.load.limits import RATIO_ENV, ReadLimits
from pptrace.load.lines import Lines
from pptrace.model.errors import TraceInputError

__all__ = ["COMPRESSED_SUFFIXES", "CompressedLines", "compression_of", "expansion",
           "strip_compression"]

GZIP, ZSTD = "gzip", "zstd"
_MAGIC = ((b"\x1f\x8b", GZIP), (b"\x28\xb5\x2f\xfd", ZSTD))
#: File name endings of compressed traces (a directory scan looks for ``*.jsonl`` + these).
COMPRESSED_SUFFIXES = (".gz", ".zst")
_CHUNK = 1 << 18  # compressed bytes read at a time
_OUT = 4 << 20  # most output of one decompress call (gzip)
# zstd's decompressor has no bound on its output, only its input: a zstd block of 4 bytes can
# stand for 128 KiB, so 512 bytes in give at most about 16 MiB out.
_ZSTD_CHUNK = 512
_SAMPLE_OUT = 1 << 20  # the sampler stops once this much is decompressed


def compression_of(head: bytes) -> str | None:
    """"gzip" or "zstd" when ``head`` (a file's first bytes) starts like one, else None."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None


def expansion(head: bytes) -> float | None:
    """About how many times its size a compressed file's data is, judged from its first bytes
    (``head``); None when it is not compressed or that cannot be told. At most about 1 MiB
    (plus one bounded call) is decompressed, whatever ``head`` expands to."""
    kind = compression_of(head)
    if kind is None:
        return None
    try:
        d: _Zlib | _Zstd = _Zlib() if kind == GZIP else _Zstd(importlib.import_module("zstandard"))
        out = used = 0
        data: bytes | memoryview = head
        while data and out < _SAMPLE_OUT and not d.eof:
            piece, rest = d.feed(data)
            used += len(data) - len(rest)
            out += len(piece)
            data = rest
    except Exception:  # damaged, or zstd without zstandard: the reader will say so
        return None
    return out / used if out and used > 0 else None


def strip_compression(path: str) -> str:
    """``path`` without a compressed file's ending (``a.jsonl.gz`` -> ``a.jsonl``)."""
    for suffix in COMPRESSED_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


class _Zlib:
    """One gzip member's decompressor, behind the interface ``CompressedLines`` uses."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip header and trailer

    def feed(self, data: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
        """(output, input left: for this member, or after its end) with at most ``_OUT``
        bytes of output."""
        out = self._d.decompress(data, _OUT)
        # At the end of the member the rest is in unused_data alone (unconsumed_tail may still
        # hold a stale copy of it when an earlier call was cut at _OUT).
        return out, self._d.unused_data if self._d.eof else self._d.unconsumed_tail

    @property
    def eof(self) -> bool:
        return self._d.eof


class _Zstd:
    """One zstd frame's decompressor (``zstandard``), fed at most ``_ZSTD_CHUNK`` at a time."""

    def __init__(self, module: Any) -> None:
        self._d = module.ZstdDecompressor().decompressobj()

    def feed(self, data: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
        """(output of at most ``_ZSTD_CHUNK`` input, input left) as ``_Zlib.feed``."""
        out: bytes = self._d.decompress(data[:_ZSTD_CHUNK])
        if self._d.eof:
            return out, bytes(self._d.unused_data) + data[_ZSTD_CHUNK:]
        return out, data[_ZSTD_CHUNK:]

    @property
    def eof(self) -> bool:
        return bool(self._d.eof)


def _zstd_module(path: str) -> Any:
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        raise TraceInputError(
            "zstd-compressed, and the 'zstandard' package that reads it is not installed "
            "(pip install zstandard; or decompress it: zstd -dc FILE > FILE.jsonl)",
            path=path) from None


class CompressedLines:
    """The lines of a compressed file (gzip members or zstd frames, one after another)."""

    def __init__(self, f: IO[bytes], kind: str, path: str,
                 tick: Callable[[int], None] = lambda n: None,
                 first: Callable[[bytes], None] = lambda head: None,
                 limits: ReadLimits | None = None) -> None:
        self.f, self.kind, self.path, self.tick, self.first = f, kind, path, tick, first
        self.limits = limits if limits is not None else ReadLimits()
        self._zstd = _zstd_module(path) if kind == ZSTD else None
        #: Set once the lines are read: what was wrong at the end of the data, if anything.
        self.problem: str | None = None
        self.capped = False  # whether reading stopped at ``limits`` (the problem says so)

    def _decompressor(self) -> _Zlib | _Zstd:
        return _Zlib() if self._zstd is None else _Zstd(self._zstd)

    def pieces(self) -> Iterator[bytes]:
        """Decompressed data, a bounded piece at a time; sets ``problem`` for a cut or damaged
        end, or for data that expands beyond ``limits``."""
        d = self._decompressor()
        started = False  # has the current member had input?
        offset = 0  # compressed bytes read before this chunk
        member = 0  # where the current member starts in the file
        total = 0  # decompressed bytes handed out
        what = "gzip member" if self._zstd is None else "zstd frame"
        cap = self.limits.decompressed_cap
        first = True
        while True:
            chunk = self.f.read(_CHUNK)
            if not chunk:
                break
            self.tick(len(chunk))
            data = memoryview(chunk)  # (slices of it copy nothing)
            while data:
                if d.eof or not started:  # the member ended: the rest starts the next one
                    if started:
                        d = self._decompressor()
                    member = offset + len(chunk) - len(data)
                    started = True
                try:
                    out, rest = d.feed(data)
                except Exception as exc:  # zlib.error, zstandard.ZstdError: damaged data
                    self.problem = (f"compressed data damaged in the {what} at byte {member:,} "
                                    f"({exc}); the rest of the file skipped")
                    return
                data = memoryview(rest)
                if out:
                    total += len(out)
                    read = offset + len(chunk) - len(data)
                    if total > cap(read):
                        self.problem = _bomb(self.limits, read)
                        self.capped = True
                        return
                    if first:
                        first = False
                        self.first(out[: 1 << 16])
                    yield out
            offset += len(chunk)
        if started and not d.eof:
            self.problem = (f"the last {what} is cut short (the writer stopped mid-write?); "
                            "read to its last whole line")

    def lines(self) -> Lines:
        """The whole lines of ``pieces`` (a line cut off by a damaged, cut or capped end is not
        one), each at most ``limits.line_bytes``."""
        return Lines(self.pieces(), self.limits.line_bytes, keep_last=lambda: self.problem is None)

    def __iter__(self) -> Iterator[bytes]:
        """The lines' bytes (over-long lines and what follows a NUL left out)."""
        for _, line in self.lines():
            if isinstance(line, bytes):
                yield line


def _bomb(limits: ReadLimits, read: int) -> str:
    return (f"decompresses to more than {limits.floor >> 20} MB + {limits.expansion} times its "
            f"compressed size (a compression bomb?): read to compressed byte {read:,}, the rest "
            f"skipped ({RATIO_ENV} raises the bound)")
