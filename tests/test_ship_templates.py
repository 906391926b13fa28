"""The shipper's re-encoding from templates writes what the long way writes, ids aside.

``pptrace.ship.reencode`` writes a trace-file line whose every span has a template without
decoding it (what keeps the shipper's CPU down: ``benchmarks/bench_engine_cost.py`` prints it).
These tests hold that path to the long one (decode each span, encode it again) over lines of
every kind the writer makes: shapes repeated step after step, drops, errors, a negative
duration, a rank and run id that change, stats spans, and lines damaged by hand.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource, scope_version
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.ship.reencode import Reencoded, Reencoder

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=7)
_IDS = re.compile(r'"(traceId|spanId)":"[0-9a-f]+"')


def _step(seq: int, rank: RankInfo = RANK, run_id: str = "r") -> list[Event]:
    """One step's events: a pair, with a drop now and then, an error, a negative duration."""
    tensors = tuple(TensorMeta(name=n, key=PREFIX + n, shape=(8, 4), dtype="float32",
                               device="cpu", nbytes=128) for n in ("a", "b"))
    start = 1_700_000_000_000_000_000 + seq * 1_000_000
    attach = Event(direction=Direction.ATTACH, seq=seq, rank=rank, start_ns=start,
                   mono_ns=50_000 + seq * 997, duration_ns=700 + seq % 5, thread_id=1,
                   thread_name="MainThread", subject_type="m.Out", subject_pp_capable=True,
                   tensors=tensors, keys_before=("next_token_ids",),
                   keys_after=("next_token_ids", PREFIX + "a", PREFIX + "b"), run_id=run_id,
                   dropped_before=seq % 3 and seq // 3)
    extract = attach._replace(direction=Direction.EXTRACT, start_ns=start + 5_000,
                              mono_ns=attach.mono_ns + 5_000, keys_before=attach.keys_after,
                              keys_after=("next_token_ids",), dropped_before=0,
                              duration_ns=-3 if seq % 7 == 0 else 40 + seq)
    events = [attach, extract]
    if seq % 40 == 0:  # (an error span's exception event repeats its time: the long way)
        events.append(extract._replace(seq=seq + 10_000, error_type="KeyError",
                                       error_message="missing"))
    return events


def _lines(tmp_path: Path) -> list[str]:
    """A trace file's lines, as the recorder's writes make them."""
    path = tmp_path / "t.otlp.jsonl"
    sink = FileSink(str(path), process_resource(RANK, "r"), scope_version())
    other = dataclasses.replace(RANK, rank=0, pp_rank=0)
    for seq in range(60):
        if seq == 30:  # the rank learnt late, a new run id: a new resource
            sink.export([e for s in range(30, 33) for e in _step(s, other, "r2")])
        sink.export([e for s in range(seq * 3, seq * 3 + 3) for e in _step(s)])
        if seq % 10 == 9:
            sink.export_stats(RecorderStats(rank=RANK, time_ns=seq, recorded=seq, exported=seq,
                                            run_id="r"))
    sink.shutdown(1.0)
    return [line for line in path.read_text("ascii").splitlines() if line]


def _same(long_way: Reencoder, fast: Reencoder, line: str) -> None:
    """Both write the same lines and counts, or both refuse the line (``ValueError``)."""
    outs: list[Reencoded | type[BaseException]] = []
    for reencoder in (long_way, fast):
        try:
            outs.append(reencoder.line(line))
        except ValueError as exc:
            outs.append(type(exc))
    a, b = outs
    if not isinstance(a, Reencoded) or not isinstance(b, Reencoded):
        assert a == b
        return
    assert [_IDS.sub("", x) for x in a.lines] == [_IDS.sub("", x) for x in b.lines]
    assert (a.events, a.messages, a.stats, a.skipped, a.final) == (
        b.events, b.messages, b.stats, b.skipped, b.final)


def test_lines_written_from_templates_are_the_long_ways_lines(tmp_path: Path) -> None:
    lines = _lines(tmp_path)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in lines:
        _same(long_way, fast, line)
    assert long_way.fast_lines == 0
    # The shapes repeat (a step's drops and errors with them): most lines took no decoding.
    events = [line for line in lines if "pptrace.stats" not in line]
    assert fast.fast_lines >= len(events) // 2


def test_a_damaged_value_goes_the_long_way(tmp_path: Path) -> None:
    """A value that is no number (the long way refuses the line), or one that names a drop of 0
    where a template holds drops: as the long way has it."""
    lines = [line for line in _lines(tmp_path) if "pptrace.stats" not in line]
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in lines:  # every template made
        fast.line(line)
    before = fast.fast_lines
    seq = '{"key":"pptrace.seq","value":{"intValue":"'
    drops = '{"key":"pptrace.dropped_before","value":{"intValue":"'
    damaged = [lines[-1].replace(seq + "1", seq + "x1", 1),
               re.sub(re.escape(drops) + r"\d+", drops + "0", lines[-1], count=1)]
    assert all(d != lines[-1] for d in damaged)
    for line in damaged:
        _same(long_way, fast, line)
    assert fast.fast_lines == before


def test_the_templates_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past ``_KEY_LIMIT`` start the reencoder again with none (a file whose spans never
    repeat costs memory for none of them), and it still writes what the long way writes."""
    import pptrace.ship.reencode as reencode

    monkeypatch.setattr(reencode, "_KEY_LIMIT", 8)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in _lines(tmp_path):
        _same(long_way, fast, line)
        assert len(fast._templates or {}) <= 8


def test_a_key_first_seen_with_a_drop_of_0_makes_no_template(tmp_path: Path) -> None:
    """A writer names a drop only when there was one: a line by hand that names 0 must not
    teach a template without a hole for it, or the next real drop would be written as 0."""
    drops = '{"key":"pptrace.dropped_before","value":{"intValue":"'
    line = next(line for line in _lines(tmp_path) if drops in line and "exception" not in line)
    zero = re.sub(re.escape(drops) + r"\d+", drops + "0", line)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for text in (zero, zero, line, line):
        _same(long_way, fast, text)
