"""Rotation within a budget (issue 17, item 3): numbered segments, the oldest deleted, counted.

Real recorders write real attach/extract calls through ``build_sink`` with a small segment size
and budget. After every flush the directory is measured: never more than the budget plus one
write, segments numbered in order with the oldest gone, each a whole OTLP/JSON document per line
(or a whole gzip member per write). The last stats span counts what was deleted, so that
recorded = written + rotated + dropped, and pptrace's loader reads the kept segments as one
process. The directory-safety rules hold for every segment.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace.record.engine as engine
from pptrace.export.segments import TraceSegments, segment_name
from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import TraceFileRefused
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

RANK = RankInfo(rank=2, world_size=4, pp_rank=2, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=os.getpid())
STEM = f"pptrace-rank2-pid{os.getpid()}"
SEGMENT, BUDGET = 20_000, 100_000


class Output:
    def to_pp_tensors(self) -> dict[str, torch.Tensor]:
        return {"scores": torch.ones(2, 3), "ids": torch.arange(2)}


class Observer:
    def from_pp_tensors(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)


def segments(trace_dir: Path) -> list[str]:
    return sorted(n for n in os.listdir(trace_dir) if n.startswith(STEM))


def disk(trace_dir: Path) -> int:
    return sum((trace_dir / n).stat().st_size for n in os.listdir(trace_dir))


def record(trace_dir: Path, flushes: int, pairs: int = 8, **config: Any) -> tuple[Recorder,
                                                                                   list[int]]:
    """Record ``flushes`` flushes of ``pairs`` pairs; return the recorder and the bytes on disk
    after each flush."""
    cfg = Config(trace_dir=str(trace_dir), flush_interval=3600, native=False, run_id="r",
                 **config)
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
                   rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    sizes = []
    for _ in range(flushes):
        for _ in range(pairs):
            tensors: dict[str, Any] = {"next_token_ids": torch.arange(4)}
            assert attach(tensors, Output()) is None
            assert sorted(extract(tensors, Observer())) == ["ids", "scores"]
            assert list(tensors) == ["next_token_ids"]
        rec.flush()
        sizes.append(disk(trace_dir))
    rec.shutdown(timeout=10.0)
    sizes.append(disk(trace_dir))
    assert (rec.dropped, rec.internal_errors, rec.export_errors) == (0, 0, 0)
    return rec, sizes


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).splitlines()


def spans(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in lines_of(path):
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out.extend(ss["spans"])
    return out


def last_stats(trace_dir: Path) -> dict[str, Any]:
    last = segments(trace_dir)[-1]
    (stats,) = [s for s in spans(trace_dir / last) if s["name"] == schema.SPAN_STATS][-1:]
    return {a["key"]: next(iter(a["value"].values())) for a in stats["attributes"]}


@pytest.mark.parametrize("compress", ["none", "gzip"])
def test_the_budget_is_kept_and_every_deleted_event_counted(tmp_path: Path,
                                                            compress: str) -> None:
    trace_dir = tmp_path / "t"
    pairs = 8 if compress == "none" else 120  # compressed, more events fill a segment
    rec, sizes = record(trace_dir, flushes=40, pairs=pairs, compress=compress,
                        rotate_mb=SEGMENT / 1e6, max_mb=BUDGET / 1e6)
    # Never above the budget plus one write (a write here is far smaller than a segment).
    assert max(sizes) <= BUDGET + SEGMENT
    names = segments(trace_dir)
    suffix = ".gz" if compress == "gzip" else ""
    indexes = [int(re.fullmatch(re.escape(STEM) + r"\.(\d{6})\.otlp\.jsonl" + re.escape(suffix),
                                n).group(1)) for n in names]  # type: ignore[union-attr]
    assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))  # the newest kept
    assert indexes[0] > 1 and len(names) >= 3
    # Every segment starts and ends with whole lines: each parses on its own.
    kept = sum(s["name"] != schema.SPAN_STATS for n in names for s in spans(trace_dir / n))
    stats = last_stats(trace_dir)
    assert stats[schema.S_FINAL] is True
    rotated = int(stats[schema.S_ROTATED])
    assert int(stats[schema.S_ROTATED_SEGMENTS]) == indexes[0] - 1
    assert rec.recorded == kept + rotated + rec.dropped and rotated > 0
    # The loader reads the kept segments as one process, and learns what rotation took.
    (proc,) = load_paths([str(trace_dir)]).processes
    assert len(proc.events) == kept
    assert proc.stats is not None and proc.stats.rotated == rotated
    assert proc.stats.rotated_segments == indexes[0] - 1


def test_a_write_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    out = TraceSegments(str(tmp_path / "p.otlp.jsonl"), "none", 100, 1_000)
    for n in (30, 500, 30, 30, 900):
        out.write_lines(["x" * n], events=1)
    out.close()
    # 31 | 501 | 31 31 | 901: the last write would take the process to 1495 bytes, so the two
    # oldest segments go; the third one's 62 bytes fit beside it.
    names = sorted(os.listdir(tmp_path))
    assert names == ["p.000003.otlp.jsonl", "p.000004.otlp.jsonl"]
    assert [len(line) for n in names for line in lines_of(tmp_path / n)] == [30, 30, 900]
    assert (out.rotated, out.rotated_segments) == (2, 2)
    assert out.on_disk() == disk(tmp_path) == 62 + 901


def test_an_earlier_activation_s_segments_count_in_the_budget(tmp_path: Path) -> None:
    trace_dir = tmp_path / "t"
    first, _ = record(trace_dir, flushes=3, rotate_mb=SEGMENT / 1e6, max_mb=BUDGET / 1e6)
    first_rotated = int(last_stats(trace_dir).get(schema.S_ROTATED, 0))
    before = segments(trace_dir)
    second, sizes = record(trace_dir, flushes=40, rotate_mb=SEGMENT / 1e6,
                           max_mb=BUDGET / 1e6)
    assert max(sizes) <= BUDGET + SEGMENT
    after = segments(trace_dir)
    assert not set(before) & set(after)  # the oldest, the earlier activation's, went first
    assert after[0] > before[-1]
    stats = last_stats(trace_dir)
    kept = sum(s["name"] != schema.SPAN_STATS for n in after for s in spans(trace_dir / n))
    # What this activation counts as rotated includes the earlier one's segments it deleted.
    assert first.recorded + second.recorded == kept + first_rotated + int(
        stats[schema.S_ROTATED])


def test_a_symlink_planted_under_the_next_segment_s_name_is_never_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pptrace")
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    base = str(tmp_path / "t" / f"{STEM}.otlp.jsonl")
    out = TraceSegments(base, "none", 100, 1_000)
    out.write_lines(["x" * 60], events=1)
    os.symlink(victim, segment_name(base, 2))
    with pytest.raises(TraceFileRefused, match="cannot be opened safely"):
        out.write_lines(["y" * 60], events=1)
    with pytest.raises(TraceFileRefused):  # final: nothing is tried again
        out.write_lines(["z"], events=1)
    out.close()
    assert victim.read_text() == "root only\n"


def test_what_is_planted_under_an_old_segment_s_name_is_neither_read_nor_deleted(
    tmp_path: Path,
) -> None:
    """At its first write a process adopts its earlier segments: only regular files of its own
    with one link; a FIFO there cannot block it, a symlink is not followed, nor removed."""
    trace_dir = tmp_path / "t"
    trace_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text('"name":"pptrace.attach"\n')
    base = str(trace_dir / f"{STEM}.otlp.jsonl")
    os.mkfifo(segment_name(base, 1))
    os.symlink(victim, segment_name(base, 2))
    rec, sizes = record(trace_dir, flushes=30, rotate_mb=SEGMENT / 1e6, max_mb=BUDGET / 1e6)
    assert max(sizes) <= BUDGET + SEGMENT + 2 * 4096
    assert victim.read_text() == '"name":"pptrace.attach"\n'
    names = segments(trace_dir)
    assert names[:2] == [os.path.basename(segment_name(base, i)) for i in (1, 2)]
    kept = sum(s["name"] != schema.SPAN_STATS for n in names[2:] for s in spans(trace_dir / n))
    assert rec.recorded == kept + int(last_stats(trace_dir).get(schema.S_ROTATED, 0))


@pytest.mark.parametrize(("env", "segment", "budget"), [
    ({}, 0, 0),
    ({"PPTRACE_MAX_MB": "8"}, 800_000, 8_000_000),
    ({"PPTRACE_MAX_MB": "5000"}, 100_000_000, 5_000_000_000),
    ({"PPTRACE_ROTATE_MB": "0.5"}, 500_000, 50_000_000),
    ({"PPTRACE_ROTATE_MB": "1", "PPTRACE_MAX_MB": "8"}, 1_000_000, 8_000_000),
])
def test_the_defaults(env: dict[str, str], segment: int, budget: int) -> None:
    cfg = Config.from_env(env)
    assert (cfg.segment_bytes, cfg.max_bytes if segment else 0) == (segment, budget)


_LINE = b'{"name":"pptrace.attach","x":1}\n{"name":"pptrace.extract","x":2}\n'


@pytest.mark.parametrize("compress", ["none", "gzip", "zstd"])
def test_an_earlier_segment_s_events_are_counted_a_chunk_at_a_time(
        tmp_path: Path, compress: str) -> None:
    """Counted across chunk boundaries (50,000 lines: about 3 MB, three chunks), whole gzip
    members only (a torn last member left out)."""
    from pptrace.export.segments import _events_in

    body = _LINE * 25_000
    path = tmp_path / ("seg.000001.otlp.jsonl" + {"none": "", "gzip": ".gz",
                                                   "zstd": ".zst"}[compress])
    if compress == "gzip":
        torn = gzip.compress(_LINE * 10)[:-12]
        path.write_bytes(gzip.compress(body[:1_000_003]) + gzip.compress(body[1_000_003:]) + torn)
    elif compress == "zstd":
        zstandard = pytest.importorskip("zstandard")
        path.write_bytes(zstandard.ZstdCompressor().compress(body))
    else:
        path.write_bytes(body)
    assert _events_in(str(path)) == 50_000


def test_a_compressed_bomb_in_an_earlier_segment_s_place_is_counted_within_a_limit(
        tmp_path: Path) -> None:
    """64 MB of newlines in a 64 KB member, then events: counting stops at the limit with what
    it found (the events past it are not this process's writing), reading a chunk at a time."""
    from pptrace.export.segments import _events_in

    path = tmp_path / "seg.000001.otlp.jsonl.gz"
    path.write_bytes(gzip.compress(_LINE * 4) + gzip.compress(b"\n" * (64 << 20))
                     + gzip.compress(_LINE))
    assert _events_in(str(path), limit=8 << 20) == 8  # the first member's, whole; no more
    assert _events_in(str(path), limit=128 << 20) == 10  # within a larger limit: all of it
