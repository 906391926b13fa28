"""Decompression bombs and other oversized trace files, built cheaply in a temporary folder.

A bomb's data is a few small compressed members (gzip) or frames (zstd) written over and over:
concatenated members are one valid stream, so a 2 GB line costs a few MB of disk and no time to
build. A sparse file's hole costs nothing on disk.

    path = gzip_one_line(tmp_path, 2 << 30)     # a .jsonl.gz holding one 2 GB line
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "data" / "golden-pp2" / "pptrace-rank0-pid1000.otlp.jsonl"
_UNIT = 16 << 20  # uncompressed bytes in each repeated member


def first_trace_line() -> bytes:
    """A real line of pptrace's (one flush of the golden trace), with its newline."""
    with GOLDEN.open("rb") as f:
        return f.readline()


def _repeat(path: Path, head: bytes, member: bytes, times: int, tail: bytes = b"") -> Path:
    with path.open("wb") as f:
        f.write(head)
        for _ in range(times):
            f.write(member)
        f.write(tail)
    return path


def gzip_one_line(tmp: Path, size: int) -> Path:
    """A ``.jsonl.gz`` whose data is one line of ``size`` bytes (no newline until its end)."""
    member = gzip.compress(b"a" * _UNIT, compresslevel=9)
    return _repeat(tmp / "one-line.jsonl.gz", gzip.compress(b'{"x":"'), member, size // _UNIT,
                   gzip.compress(b'"}\n'))


def gzip_document(tmp: Path, size: int) -> Path:
    """A ``.json.gz`` holding one multi-line JSON document of about ``size`` bytes."""
    body = b'{"resource":{},"scopeSpans":[]},\n' * (_UNIT // 33)
    return _repeat(tmp / "doc.json.gz", gzip.compress(b'{\n"resourceSpans": [\n'),
                   gzip.compress(body, compresslevel=9), size // len(body),
                   gzip.compress(b'{"resource":{},"scopeSpans":[]}\n]\n}\n'))


def gzip_empty_documents(tmp: Path, size: int) -> Path:
    """A ``.jsonl.gz`` of ``{}`` lines, about ``size`` bytes of them."""
    unit = b"{}\n" * (_UNIT // 3)
    return _repeat(tmp / "empty-docs.jsonl.gz", b"", gzip.compress(unit, compresslevel=9),
                   max(1, size // len(unit)))


def zstd_repeated(tmp: Path, name: str, byte: bytes, size: int) -> Path:
    """A ``.jsonl.zst`` of ``size`` bytes of ``byte`` (frames of 64 MB each)."""
    import zstandard

    unit = 64 << 20
    frame = zstandard.ZstdCompressor(level=19).compress(byte * unit)
    return _repeat(tmp / name, b"", frame, size // unit)


def zstd_one_frame(tmp: Path, name: str, byte: bytes, size: int) -> Path:
    """A ``.jsonl.zst`` of ``size`` bytes of ``byte`` in one zstd frame (a few seconds)."""
    import zstandard

    unit = 64 << 20
    block = byte * unit
    c = zstandard.ZstdCompressor(level=1).compressobj()
    with (tmp / name).open("wb") as f:
        for _ in range(size // unit):
            f.write(c.compress(block))
        f.write(c.flush())
    return tmp / name


def sparse_after_line(tmp: Path, size: int, pad: int = 0) -> Path:
    """A plain ``.jsonl`` file: a real trace line (``pad`` spaces longer: a line longer than
    the first bytes the loader checks), then a hole (NUL bytes) to ``size``."""
    path = tmp / "sparse.jsonl"
    with path.open("wb") as f:
        f.write(first_trace_line()[:-1] + b" " * pad + b"\n")
        f.truncate(size)
    assert os.path.getsize(path) == size
    return path
