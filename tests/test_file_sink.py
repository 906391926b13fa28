"""FileSink writes, from events, exactly what the SDK span path writes (ids apart)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from pptrace.export.file_sink import SPANS_PER_LINE, FileSink
from pptrace.export.spans import (
    OtlpJsonFileExporter,
    SpanSink,
    _BatchToExporter,
    _version,
    rank_resource,
)
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta

RANK = RankInfo(rank=3, world_size=4, pp_rank=3, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=42)


def _events() -> list[Event]:
    tensors = tuple(
        TensorMeta(name=n, key=PREFIX + n, shape=(8, 5), dtype="float32", device="cpu",
                   nbytes=160, fingerprint="b2:00ff" if n == "b" else None)
        for n in ("a", "b")
    )
    ok = Event(direction=Direction.ATTACH, seq=0, rank=RANK, start_ns=1_000, mono_ns=5,
               duration_ns=700, thread_id=1, thread_name="MainThread", subject_type="m.Out",
               subject_pp_capable=True, tensors=tensors, keys_before=("next_token_ids",),
               keys_after=("next_token_ids", PREFIX + "a", PREFIX + "b"), run_id="r",
               extra=(("note", "x"),))
    failed = Event(direction=Direction.EXTRACT, seq=0, rank=RANK, start_ns=2_000, mono_ns=9,
                   duration_ns=50, subject_type="NoneType", tensors=tensors[:1],
                   error_type="RuntimeError",
                   error_message="received auxiliary PP output without a sampling observer",
                   keys_before=("a\x1b[31m", PREFIX + "a"), keys_after=("a\x1b[31m",))
    empty_message = Event(direction=Direction.ATTACH, seq=1, rank=RANK, start_ns=3_000,
                          mono_ns=11, duration_ns=1, error_type="KeyError", error_message="")
    return [ok, failed, empty_message] * 3


def _without_ids(path: Path) -> list[object]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    spans = []
    for doc in lines:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    assert len(span.pop("traceId")) == 32 and len(span.pop("spanId")) == 16
                    spans.append((rs["resource"], ss["scope"], span))
    return spans


def test_file_sink_writes_what_the_sdk_path_writes(tmp_path: Path) -> None:
    resource = rank_resource(RANK, "r")
    stats = RecorderStats(rank=RANK, time_ns=9_000, recorded=9, exported=9, run_id="r")

    sdk_path = tmp_path / "sdk.jsonl"
    provider = TracerProvider(resource=resource, span_limits=SpanLimits(
        max_span_attributes=256, max_attribute_length=None))
    direct = _BatchToExporter(OtlpJsonFileExporter(str(sdk_path)))
    provider.add_span_processor(direct)
    sdk = SpanSink(provider, [direct])
    sdk.export(_events())
    sdk.export_stats(stats)
    sdk.shutdown(1.0)

    file_path = tmp_path / "file.jsonl"
    sink = FileSink(str(file_path), resource, _version())
    sink.export(_events())
    sink.export_stats(stats)
    sink.shutdown(1.0)

    expected, written = _without_ids(sdk_path), _without_ids(file_path)
    assert len(written) == 10
    assert written == expected


def test_file_sink_splits_long_batches_into_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    sink = FileSink(str(path), rank_resource(RANK))
    events = _events()[:1] * (SPANS_PER_LINE + 3)
    sink.export(events)
    sink.shutdown(1.0)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert len(_without_ids(path)) == SPANS_PER_LINE + 3


def test_file_sink_from_raw_tuples_writes_what_the_sdk_path_writes(tmp_path: Path) -> None:
    """The template path (raws through per-shape templates) against the SDK, end to end."""
    from helpers_recorder import Composite, Output, drive, recorder, wrapped

    from pptrace.model.config import Config

    resource = rank_resource(RANK, "r")
    sdk_path, file_path = tmp_path / "sdk.jsonl", tmp_path / "file.jsonl"
    provider = TracerProvider(resource=resource, span_limits=SpanLimits(
        max_span_attributes=256, max_attribute_length=None))
    direct = _BatchToExporter(OtlpJsonFileExporter(str(sdk_path)))
    provider.add_span_processor(direct)
    sdk = SpanSink(provider, [direct])
    files = FileSink(str(file_path), resource, _version())

    class Both:
        def export(self, events: Sequence[Event]) -> None:
            files.export(events)
            sdk.export(list(events))

        def export_stats(self, stats: RecorderStats) -> None:
            files.export_stats(stats)
            sdk.export_stats(stats)

        def shutdown(self, timeout: float) -> None:
            files.shutdown(timeout)
            sdk.shutdown(timeout)

    rec = recorder(Config(run_id="r"), Both())
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5, n=3)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            attach({"next_token_ids": [1]}, Composite())
    attach({}, Output(1))
    rec.shutdown(timeout=5.0)
    assert files.templates_built == 3
    written = _without_ids(file_path)
    assert len(written) == 14 + 1 and written == _without_ids(sdk_path)


def test_a_str_subclass_key_costs_nothing(tmp_path: Path) -> None:
    # Any str is a legal dict key to the engine, a str subclass too; the file sink's encoder
    # takes exact types only, so the converter hands it plain characters. Before, such a key
    # made the sink refuse the whole chunk (every event in it counted as dropped).
    import torch
    from helpers_recorder import RANK, Observer

    import pptrace.record.engine as engine
    from pptrace.export.spans import build_provider
    from pptrace.load.loader import load_paths
    from pptrace.model.config import Config
    from pptrace.record.recorder import Recorder
    from pptrace.record.wrapper import wrap_transport

    class Key(str):
        def startswith(self, *args: object) -> bool:
            return str.startswith(self, *args)  # type: ignore[arg-type]

        def __str__(self) -> str:
            raise AssertionError("the recorder called the key's own __str__")

    cfg = Config(trace_dir=str(tmp_path), run_id="r", flush_interval=3600, native=False)
    rec = Recorder(cfg, sink_factory=lambda rank: build_provider(cfg, rank),
                   rank_provider=lambda: (RANK, True))
    _, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                engine.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(3):
        extract({Key("engine.key"): 1, Key(PREFIX + "a"): torch.zeros(2)}, Observer())
    rec.shutdown(5.0)
    assert (rec.dropped, rec.export_errors, rec.internal_errors) == (0, 0, 0)
    (proc,) = load_paths([str(tmp_path)]).processes
    assert [(e.keys_before, e.names) for e in proc.events] == [
        (("engine.key", PREFIX + "a"), ("a",))] * 3
