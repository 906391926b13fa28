"""Every reader is bounded in memory and time per line and per file, whatever the compression.

Each bomb of issue 24 is built cheaply (repeated compressed members, a sparse hole) and read by
``pptrace analyze`` in a child process under an address-space limit (``RLIMIT_AS``): before
these bounds each of them needed 2 to 4 GB (or minutes) and died of ``MemoryError`` there.
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pptrace.load import compressed
from pptrace.load.lines import BINARY, OVERLONG, Lines
from tests import helpers_bombs as bombs

GB = 1 << 30
_AS_LIMIT = 1 * GB  # the reader's whole address space: Python, pptrace, and what it reads


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT, _AS_LIMIT))


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pptrace", *args], capture_output=True, text=True, timeout=240,
        preexec_fn=_limited, env={**os.environ, "PPTRACE_LOAD_WORKERS": "0", **(env or {})})


def _analyze(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _run("analyze", "--no-progress", str(path), env=env)


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("pptrace: error: ")
    return proc.stderr[len("pptrace: error: "):].rstrip("\n")


_BOMB = ("decompresses to more than 64 MB + 500 times its compressed size (a compression bomb?): "
         "read to compressed byte {at}, the rest skipped (PPTRACE_READ_MAX_EXPANSION raises the "
         "bound)")


@pytest.mark.slow
def test_gzip_one_line_of_2_gb(tmp_path: Path) -> None:
    """A 2 MB .jsonl.gz holding one 2 GB line (4.1 GB resident before)."""
    path = bombs.gzip_one_line(tmp_path, 2 * GB)
    assert path.stat().st_size < 3 << 20
    err = _error(_analyze(path))
    assert err.startswith(f"{path}:1: decompresses to more than 64 MB + 500 times"), err


@pytest.mark.slow
def test_gzip_document_through_the_whole_document_fallback(tmp_path: Path) -> None:
    """A .json.gz document of 2 GB: the fallback holds at most the 256 MB document bound."""
    path = bombs.gzip_document(tmp_path, 2 * GB)
    assert _error(_analyze(path)) == (
        f"{path}: one JSON document larger than the 256 MB that pptrace holds in memory "
        "(PPTRACE_READ_MAX_LINE_MB raises the bound; or write it as JSON lines)")


@pytest.mark.slow
@pytest.mark.parametrize("byte", [b"a", b"\n"], ids=["one-line", "newlines"])
def test_zstd_of_2_gb(tmp_path: Path, byte: bytes) -> None:
    """A 64 KB .zst of 2 GB (of one line, or of newlines: minutes before)."""
    pytest.importorskip("zstandard")
    path = bombs.zstd_repeated(tmp_path, "bomb.jsonl.zst", byte, 2 * GB)
    assert path.stat().st_size < 100_000
    err = _error(_analyze(path))
    line = 1 if byte == b"a" else (64 << 20) + 1  # the newlines before the cut are lines
    assert err == f"{path}:{line}: " + _BOMB.format(at="2,578"), err


@pytest.mark.slow
def test_gzip_of_empty_documents(tmp_path: Path) -> None:
    """A 512 KB gzip of ``{}`` lines (over 200 s before): the line bound stops it."""
    path = bombs.gzip_empty_documents(tmp_path, 512 << 20)
    assert path.stat().st_size < 600_000
    assert _error(_analyze(path)) == (
        f"{path}:1000001: more than 1,000,000 lines in one file (PPTRACE_READ_MAX_LINES raises "
        "the bound)")


def test_line_bound_is_a_setting(tmp_path: Path) -> None:
    """The same stop, at a bound set by its variable (a file with spans keeps them)."""
    line = bombs.first_trace_line()
    path = tmp_path / "t.jsonl"
    path.write_bytes(line + b"{}\n" * 20)
    proc = _analyze(path, {"PPTRACE_READ_MAX_LINES": "5"})
    assert f"{path}:6: more than 5 lines in one file (PPTRACE_READ_MAX_LINES raises the " \
           "bound): the rest of the file skipped (the lines before it were read)" in proc.stdout
    assert "6 pptrace events" in proc.stdout


@pytest.mark.parametrize("pad", [0, 100_000], ids=["short line", "line over 64 KiB"])
def test_sparse_file_keeps_its_lines_and_stops_at_the_hole(tmp_path: Path, pad: int) -> None:
    """A 2 GB sparse file: a real trace line, then a hole (with a line longer than the 64 KiB
    checked first: 54 s and 4.3 GB before; either way the line was discarded)."""
    path = bombs.sparse_after_line(tmp_path, 2 * GB, pad)
    proc = _analyze(path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "1 process, 6 pptrace events" in proc.stdout, proc.stdout
    assert (f"  {path}:2: binary data, not a JSON trace: the rest of the file skipped (the lines "
            "before it were read)\n") in proc.stdout


def test_overlong_line_is_skipped_unread_and_named(tmp_path: Path) -> None:
    """A line over the bound is one counted skip naming file:line; the lines around it count."""
    line = bombs.first_trace_line()
    path = tmp_path / "t.jsonl"
    path.write_bytes(line + b'{"x":"' + b"y" * (3 << 20) + b'"}\n' + line.replace(
        b'"intValue":"1000"', b'"intValue":"1001"'))
    proc = _analyze(path, {"PPTRACE_READ_MAX_LINE_MB": "1"})
    assert (f"  {path}:2: line longer than the 1 MB that pptrace holds in memory; skipped unread "
            "(PPTRACE_READ_MAX_LINE_MB raises the bound)\n") in proc.stdout, proc.stdout
    assert "2 processes, 12 pptrace events" in proc.stdout, proc.stdout


def test_bad_bound_setting_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(bombs.first_trace_line())
    assert _error(_analyze(path, {"PPTRACE_READ_MAX_LINES": "lots"})) == (
        "PPTRACE_READ_MAX_LINES='lots': expected a number of at least 1")


@pytest.mark.slow
def test_work_size_sampler_reads_a_bounded_prefix(tmp_path: Path) -> None:
    """The sampler judged a 64 KB zstd of 2 GB of newlines by decompressing all of its head
    (2 GB and 4.4 s a file, on every load): it stops after about 1 MB now."""
    pytest.importorskip("zstandard")
    path = bombs.zstd_one_frame(tmp_path, "nl.jsonl.zst", b"\n", 2 * GB)
    code = ("from pptrace.load.worker import work_sizes; "
            f"print(work_sizes({{{str(path)!r}: 1000}})[{str(path)!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, preexec_fn=_limited)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) > 1000 * 1000  # judged to expand a lot: the ratio of the prefix it read


def test_zstd_pieces_are_bounded(tmp_path: Path) -> None:
    """One zstd call on 512 bytes gives at most about 16 MB, whatever the frame holds."""
    pytest.importorskip("zstandard")
    path = bombs.zstd_repeated(tmp_path, "a.jsonl.zst", b"a", 256 << 20)
    biggest = 0
    with path.open("rb") as f:
        reader = compressed.CompressedLines(f, "zstd", str(path))
        for piece in reader.pieces():
            biggest = max(biggest, len(piece))
    assert 0 < biggest <= 17 << 20
    assert reader.problem is not None and reader.capped


def _reference(data: bytes, limit: int) -> list[tuple[int, bytes | object]]:
    """What the splitter should give, the simple way: every non-blank line with its number."""
    out: list[tuple[int, bytes | object]] = []
    body = data.split(b"\0", 1)[0]
    pieces = body.split(b"\n")
    for i, text in enumerate(pieces, start=1):
        last = i == len(pieces)
        raw = text if last else text + b"\n"
        if b"\0" in data and last:  # the NUL's line: over-long first if its start already is
            if len(raw.lstrip(b" \t\r\n")) > limit:
                out.append((i, OVERLONG))
            out.append((i, BINARY))
            break
        if not raw.strip():
            continue
        # (leading blanks are passed over with the blank lines before them)
        kept = raw[len(raw) - len(raw.lstrip(b" \t\r\n")):]
        out.append((i, OVERLONG if len(kept) > limit else kept))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_lines_match_a_simple_split_however_the_pieces_fall(seed: int) -> None:
    rng = random.Random(seed)
    words = [b"a", b"bb", b"{}", b" ", b"\n", b"\n\n", b"\t", b"x" * 30, b"\r\n"]
    data = b"".join(rng.choice(words) for _ in range(rng.randint(0, 200)))
    if rng.random() < 0.3:
        data += b"q\0" + b"z\n" * 3
    limit = rng.choice((5, 20, 1000))
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 20))))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]
    assert list(Lines(pieces, limit)) == _reference(data, limit)
