"""A trace file's lines as the recorder's writes make them, for the shipper's tests: shapes
repeated step after step, drops, errors, a negative duration, a rank and run id that change,
stats spans."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource, scope_version
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=7)


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


def trace_lines(tmp_path: Path) -> list[str]:
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
