"""Compressed traces (issue 17, item 2) read as the plain ones do.

pptrace's writer makes every flush one gzip member (or zstd frame) appended to the file; here
plain trace files (the golden run, and runs from pptrace's real exporter) are compressed the
same way, a few lines a member, and every reader path (the loader, its worker, ``pptrace
analyze``, ``view --follow``'s reloader, ``pptrace diff``) must give what the plain files give.
"""

from __future__ import annotations

import gzip
import importlib
import io
import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pptrace.cli.main import main
from pptrace.load import compressed
from pptrace.load import worker as load_worker
from pptrace.load.compressed import CompressedLines
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from pptrace.model.trace import Trace

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


def _gzip_members(data: bytes, lines_per_member: int = 2) -> bytes:
    """``data`` as pptrace's writer compresses it: a complete gzip member every few lines."""
    lines = data.splitlines(keepends=True)
    return b"".join(gzip.compress(b"".join(lines[i:i + lines_per_member]))
                    for i in range(0, len(lines), lines_per_member))


def _compress_dir(src: Path, dst: Path, per_member: int = 2) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for path in sorted(src.iterdir()):
        target = dst / (path.name + ".gz")
        target.write_bytes(_gzip_members(path.read_bytes(), per_member))
        out.append(target)
    return out


def _content(trace: Trace) -> list[Any]:
    """Everything of each process but the names of the files it came from."""
    return [(p.rank, p.events, p.stats) for p in trace.processes]


def test_gzip_files_load_to_the_same_events_and_stats_as_plain(tmp_path: Path) -> None:
    plain = load_paths([str(GOLDEN)])
    for per_member in (1, 3, 100):
        files = _compress_dir(GOLDEN, tmp_path / f"gz{per_member}", per_member)
        packed = load_paths([str(tmp_path / f"gz{per_member}")])  # a directory scan finds them
        assert _content(packed) == _content(plain)
        assert not packed.problems
        assert [list(p.sources) for p in packed.processes] == [[str(f)] for f in files]


def test_plain_and_compressed_files_mix(tmp_path: Path) -> None:
    first, second = sorted(GOLDEN.iterdir())
    shutil.copy(first, tmp_path / first.name)
    (tmp_path / (second.name + ".gz")).write_bytes(_gzip_members(second.read_bytes()))
    assert _content(load_paths([str(tmp_path)])) == _content(load_paths([str(GOLDEN)]))


def test_a_compressed_file_is_told_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    src = sorted(GOLDEN.iterdir())[0]
    odd = tmp_path / "rank0.jsonl"  # gzip inside, a plain name outside
    odd.write_bytes(_gzip_members(src.read_bytes()))
    assert _content(load_paths([str(odd)])) == _content(load_paths([str(src)]))


def test_a_torn_last_member_reads_to_the_last_whole_line(tmp_path: Path) -> None:
    src = sorted(GOLDEN.iterdir())[0]
    lines = src.read_bytes().splitlines(keepends=True)
    whole = b"".join(gzip.compress(line) for line in lines[:-1])
    last = gzip.compress(lines[-1])
    path = tmp_path / "pptrace-rank0-pid1000.otlp.jsonl.gz"
    path.write_bytes(whole + last[: len(last) // 2])  # killed in the middle of its last flush
    expected = tmp_path / "expected.jsonl"
    expected.write_bytes(b"".join(lines[:-1]))
    trace = load_paths([str(path)])
    assert _content(trace) == _content(load_paths([str(expected)]))
    (problem,) = trace.problems
    assert problem.source == str(path) and problem.line == len(lines)
    assert problem.message == ("the last gzip member is cut short (the writer stopped "
                               "mid-write?); read to its last whole line")


def test_damaged_data_keeps_what_came_before_it(tmp_path: Path) -> None:
    src = sorted(GOLDEN.iterdir())[0]
    lines = src.read_bytes().splitlines(keepends=True)
    good = gzip.compress(lines[0])
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(good + b"\x1f\x8b\x08\x00 this is no deflate stream" + b"\0" * 30)
    trace = load_paths([str(path)])
    assert trace.event_count > 0
    (problem,) = trace.problems
    assert problem.message.startswith(f"compressed data damaged in the gzip member at byte "
                                      f"{len(good):,} (")
    assert problem.message.endswith("); the rest of the file skipped")


def test_a_compressed_file_with_no_whole_line_is_an_error(tmp_path: Path) -> None:
    data = gzip.compress(sorted(GOLDEN.iterdir())[0].read_bytes())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[:40])
    with pytest.raises(TraceInputError, match="the last gzip member is cut short"):
        load_paths([str(path)])


def test_compressed_binary_is_refused_as_binary(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"\x00\x01\x02" * 100))
    with pytest.raises(TraceInputError, match="binary data, not a JSON trace"):
        load_paths([str(path)])


def test_a_compressed_single_document_is_read_whole(tmp_path: Path) -> None:
    docs = [json.loads(line) for f in sorted(GOLDEN.iterdir())
            for line in f.read_text().splitlines() if line.strip()]
    merged = {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(json.dumps(merged, indent=2).encode()))
    assert _content(load_paths([str(path)])) == _content(load_paths([str(GOLDEN)]))


def test_decompression_streams(tmp_path: Path) -> None:
    """Lines come out while the file is still being read, from reads of a bounded size."""
    rng = random.Random(17)
    lines = [b'{"x": "%032x"}\n' % rng.getrandbits(128) for _ in range(100_000)]
    path = tmp_path / "big.jsonl.gz"  # 4.3 MB inside, 2 MB outside, in 10 members
    path.write_bytes(b"".join(gzip.compress(b"".join(lines[i:i + 10_000]))
                              for i in range(0, len(lines), 10_000)))
    reads: list[int] = []

    class Spy(io.FileIO):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            reads.append(len(data))
            return data

    with Spy(str(path)) as f:
        reader = CompressedLines(f, "gzip", str(path))
        it = iter(reader)
        assert next(it) == lines[0]
        assert f.tell() < path.stat().st_size / 4  # the first line long before the last byte
        rest = list(it)
    assert rest == lines[1:] and reader.problem is None
    assert max(reads) <= 1 << 18


@pytest.mark.parametrize("bound", [77, 1000, 1 << 16])
def test_members_larger_than_one_decompress_call_stay_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """A member whose output takes several calls, ending where the next member begins."""
    monkeypatch.setattr(compressed, "_OUT", bound)
    monkeypatch.setattr(compressed, "_CHUNK", 4096)
    rng = random.Random(bound)
    lines = [b"%x\n" % rng.getrandbits(rng.choice((8, 64, 4000))) for _ in range(3000)]
    cuts = sorted(rng.sample(range(1, len(lines)), 40))
    members = [b"".join(lines[a:b]) for a, b in zip([0, *cuts], [*cuts, len(lines)],
                                                    strict=True)]
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(b"".join(gzip.compress(m, compresslevel=1) for m in members))
    with path.open("rb") as f:
        reader = CompressedLines(f, "gzip", str(path))
        assert list(reader) == lines
    assert reader.problem is None


def test_gzip_dc_gives_the_plain_lines(tmp_path: Path) -> None:
    """docs/schema.md's one command for tools that cannot read gzip: ``gzip -dc FILE``."""
    gz = shutil.which("gzip")
    assert gz is not None, "gzip(1) is part of every system this runs on"
    src = sorted(GOLDEN.iterdir())[0]
    (packed,) = _compress_dir(GOLDEN, tmp_path / "gz")[:1]
    out = subprocess.run([gz, "-dc", str(packed)], check=True, capture_output=True).stdout
    assert out == src.read_bytes()


def _hide_zstandard(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def fake(name: str, package: str | None = None) -> Any:
        if name == "zstandard":
            raise ImportError("No module named 'zstandard'")
        return real(name, package)

    monkeypatch.setattr(compressed.importlib, "import_module", fake)


ZSTD_FRAME = b"\x28\xb5\x2f\xfd" + b"\0" * 20  # a zstd magic number is enough to be told apart


def test_zstd_without_zstandard_is_one_line_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hide_zstandard(monkeypatch)
    path = tmp_path / "t.jsonl.zst"
    path.write_bytes(ZSTD_FRAME)
    with pytest.raises(TraceInputError) as info:
        load_paths([str(path)])
    message = str(info.value)
    assert message.startswith(f"{path}: zstd-compressed, and the 'zstandard' package")
    assert "\n" not in message
    # Among readable files it is one problem, and the others are read.
    shutil.copy(sorted(GOLDEN.iterdir())[0], tmp_path)
    trace = load_paths([str(tmp_path)])
    assert trace.event_count > 0
    assert [p.message.split(",")[0] for p in trace.problems] == [
        "file skipped: zstd-compressed"]


def test_zstd_frames_read_as_gzip_members_do(tmp_path: Path) -> None:
    # zstandard is in the zstd and dev extras; without it, see the test above.
    zstandard = importlib.import_module("zstandard")
    for src in sorted(GOLDEN.iterdir()):
        lines = src.read_bytes().splitlines(keepends=True)
        c = zstandard.ZstdCompressor()
        data = b"".join(c.compress(line) for line in lines)
        (tmp_path / (src.name + ".zst")).write_bytes(data)
    assert _content(load_paths([str(tmp_path)])) == _content(load_paths([str(GOLDEN)]))
    torn = sorted(tmp_path.iterdir())[0]
    torn.write_bytes(torn.read_bytes()[:-5])
    assert [p.message for p in load_paths([str(tmp_path)]).problems] == [
        "the last zstd frame is cut short (the writer stopped mid-write?); "
        "read to its last whole line"]


def test_the_worker_reads_compressed_files_as_this_process_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):  # the golden run three times over, as three hosts
        for src in sorted(GOLDEN.iterdir()):
            text = src.read_bytes().replace(b'"golden-host"', b'"host-%d"' % i)
            (tmp_path / f"h{i}-{src.name}.gz").write_bytes(_gzip_members(text))
    taken: list[int] = []
    real_take = load_worker.take

    def take_spy(builder: Any, result: Any, rows: bytes) -> Any:
        taken.append(len(rows))
        return real_take(builder, result, rows)

    monkeypatch.setattr(load_worker, "take", take_spy)
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    parallel = load_paths([str(tmp_path)])
    assert taken, "the worker's result was taken"
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    assert parallel == load_paths([str(tmp_path)])


def test_the_workers_share_is_judged_by_uncompressed_size(tmp_path: Path) -> None:
    """A compressed file counts as about its uncompressed size, so that the split between this
    process and the worker is the plain files' split."""
    rng = random.Random(3)
    sizes = {}
    for i, repeat in enumerate((1, 4, 16)):  # three ratios of compression
        lines = [b'{"x": "%016x"}\n' % rng.getrandbits(64) * repeat for _ in range(20_000)]
        plain = b"".join(lines)
        path = tmp_path / f"f{i}.jsonl.gz"
        path.write_bytes(_gzip_members(plain, lines_per_member=2000))
        sizes[str(path)] = (path.stat().st_size, len(plain))
    copy = tmp_path / "plain.jsonl"
    copy.write_bytes(b"x" * 1000)
    work = load_worker.work_sizes({**{f: n for f, (n, _) in sizes.items()}, str(copy): 1000})
    assert work[str(copy)] == 1000
    for f, (_, plain_size) in sizes.items():
        assert 0.8 * plain_size < work[f] < 1.25 * plain_size, (f, work[f], plain_size)


def test_analyze_and_diff_report_compressed_traces_as_plain_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gz = tmp_path / "gz"
    _compress_dir(GOLDEN, gz)
    reports = []
    for directory in (GOLDEN, gz):
        status = main(["analyze", "--no-progress", "--format", "json", str(directory)])
        report = json.loads(capsys.readouterr().out)
        for proc in report["processes"]:
            proc.pop("sources")
        report.pop("sources")
        reports.append((status, report))
    assert reports[0] == reports[1] and reports[0][0] == 1
    assert main(["diff", "--no-progress", str(GOLDEN), str(gz)]) == 0
    assert "\n0 differences.\n" in capsys.readouterr().out


def test_follows_reloader_reads_compressed_traces(tmp_path: Path) -> None:
    from pptrace.cli.view import _reloader

    _compress_dir(GOLDEN, tmp_path)
    trace, findings = _reloader([str(tmp_path)], follow=True)(lambda phase: None)
    assert _content(trace) == _content(load_paths([str(GOLDEN)])) and findings
