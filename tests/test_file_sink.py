"""FileSink, the one trace-file encoder, writes the official OTLP/JSON encoding, byte for byte.

The oracle (``tests/otlp_oracle.py``): the same events as SDK spans (``SdkSpanSink`` on a
``TracerProvider``), encoded by the SDK's own ``encode_spans`` from the official protobuf
definitions and rendered by ``google.protobuf.json_format``. Every line FileSink writes is
compared with the oracle's line for the same spans, field by field and then byte for byte, the
random ids apart (the oracle's are rewritten from base64 to hex; both are checked for form).
Both of FileSink's paths are held to it: events given as ``Event`` records, and the recorder's
raw tuples through per-shape templates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pptrace.record.engine as engine
from pptrace.export.file_sink import SPANS_PER_LINE, FileSink
from pptrace.export.sinks import build_sink
from pptrace.export.spans import SPAN_LIMITS, SdkSpanSink, process_resource, scope_version
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.record.convert import RawEvents
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_recorder import Composite, drive, recorder, wrapped
from tests.otlp_oracle import official_line, without_ids

RANK = RankInfo(rank=3, world_size=4, pp_rank=3, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=42)


class Oracle:
    """A sink writing each chunk with FileSink (from raws and from records) and, as SDK spans,
    to memory, remembering how many spans each call made (FileSink's lines follow calls).

    Under a version 2 or 3 resource FileSink writes each line under the resource of its events'
    process (the given one, with the rank and run id they were recorded with, the main
    thread's name and id and the main device): the SDK spans go through one provider per such
    resource, and a new line starts where it changes, as FileSink's do. They are made as for a
    reader that keeps times in nanoseconds (``exact_times``), as a trace file's are.
    """

    def __init__(self, tmp: Path, resource: Resource) -> None:
        self.raw_path, self.records_path = tmp / "raw.jsonl", tmp / "records.jsonl"
        self.raw = FileSink(str(self.raw_path), resource, scope_version())
        self.records = FileSink(str(self.records_path), resource, scope_version())
        self.resource = resource
        self.version = resource.attributes.get(schema.VERSION)
        self.compact = self.version in (2, 3)
        self.main: tuple[str, int] | None = None
        self.device: str | None = None
        self.subject: str | None = None
        self.memory = InMemorySpanExporter()
        self.sdks: dict[tuple[RankInfo, str] | None, SdkSpanSink] = {}
        self.calls: list[int] = []

    def sdk(self, rank: RankInfo, run_id: str) -> SdkSpanSink:
        key = (rank, run_id) if self.compact else None
        if key not in self.sdks:
            resource = self.resource
            if self.compact:  # the events' constants, in place of the given resource's
                name, ident = self.main or (None, None)
                own = schema.resource_attributes(rank, run_id, self.version, name, ident,
                                                 self.device, self.subject)
                merged = {**resource.attributes, **own}
                for key in set(schema.RESOURCE_KEYS.values()) - set(own):
                    merged.pop(key, None)
                resource = Resource(merged, resource.schema_url)
            provider = TracerProvider(resource=resource, span_limits=SPAN_LIMITS)  # pptrace's
            provider.add_span_processor(SimpleSpanProcessor(self.memory))
            self.sdks[key] = SdkSpanSink(provider, exact_times=True)
        return self.sdks[key]

    def _count(self, call: Any) -> None:
        before = len(self.memory.get_finished_spans())
        call()
        self.calls.append(len(self.memory.get_finished_spans()) - before)

    def export(self, events: Sequence[Event]) -> None:
        if isinstance(events, RawEvents):
            self.raw.export(events)
        records = list(events)
        if not isinstance(events, RawEvents):
            self.raw.export(records)
        self.records.export(records)
        if records and self.compact:  # what FileSink learns from a call's first event
            known = (self.main, self.device, self.subject)
            if self.main is None:
                self.main = (records[0].thread_name, records[0].thread_id)
            if self.device is None:
                self.device = next((m.device for m in records[0].tensors if m.is_tensor), None)
            if self.subject is None:
                self.subject = records[0].subject_type
            if (self.main, self.device, self.subject) != known:
                self.sdks.clear()  # a new resource from here on
        for event in records:  # a call per run of events under one resource
            at = (event.rank, event.run_id) if self.compact else None
            if not self.calls or self.calls[-1] < 0 or self._at != at:
                self.calls.append(0)
                self._at = at
            self.sdk(event.rank, event.run_id).export([event])
            self.calls[-1] += 1
        self.calls.append(-1)  # the end of a call

    def export_stats(self, stats: RecorderStats) -> None:
        self.raw.export_stats(stats)
        self.records.export_stats(stats)
        self._count(lambda: self.sdk(stats.rank, stats.run_id).export_stats(stats))
        self.calls.append(-1)

    def shutdown(self, timeout: float) -> None:
        self.raw.shutdown(timeout)
        self.records.shutdown(timeout)
        for sdk in self.sdks.values():
            sdk.shutdown(timeout)

    def expected(self) -> list[str]:
        """The oracle's lines: each call's spans, cut every SPANS_PER_LINE as FileSink cuts."""
        spans = list(self.memory.get_finished_spans())
        lines, at = [], 0
        for n in (n for n in self.calls if n >= 0):
            for start in range(0, n, SPANS_PER_LINE):
                lines.append(official_line(spans[at + start:at + min(n, start + SPANS_PER_LINE)],
                                           self.compact))
            at += n
        return lines

    def check(self) -> list[str]:
        """Both files against the oracle; return the oracle's lines."""
        expected = self.expected()
        for path in (self.raw_path, self.records_path):
            assert_same_lines(path.read_text("ascii").splitlines(), expected)
        return expected

    _at: tuple[RankInfo, str] | None = None


def assert_same_lines(written: list[str], expected: list[str]) -> None:
    assert len(written) == len(expected)
    for got, want in zip(written, expected, strict=True):
        assert re.fullmatch(r'.*"traceId":"[0-9a-f]{32}","spanId":"[0-9a-f]{16}".*', got)
        # Field by field first (a readable difference), then the very bytes.
        assert json.loads(without_ids(got)) == json.loads(without_ids(want))
        assert without_ids(got) == without_ids(want)


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
                   keys_before=("a\x1b[31m", PREFIX + "a\u202e\u2028ü\"q\""),
                   keys_after=("a\x1b[31m",))
    empty_message = Event(direction=Direction.ATTACH, seq=1, rank=RANK, start_ns=3_000,
                          mono_ns=11, duration_ns=1, error_type="KeyError", error_message="")
    return [ok, failed, empty_message] * 3


def test_records_encode_as_the_official_encoder_does(tmp_path: Path) -> None:
    """Success, engine error, empty error message, escapes, fingerprints, extra tags, stats."""
    oracle = Oracle(tmp_path, process_resource(RANK, "r"))
    oracle.export(_events())
    oracle.export_stats(RecorderStats(rank=RANK, time_ns=9_000, recorded=9, exported=9,
                                      run_id="r"))
    oracle.shutdown(1.0)
    # Version 2: a line per run of events under one resource (the run id alternates: r, "", "")
    assert len(oracle.check()) == 7 and oracle.calls == [1, 2] * 3 + [-1, 1, -1]
    v1 = Oracle(tmp_path / "v1", process_resource(RANK, "r", version=1))
    v1.export(_events())
    v1.export_stats(RecorderStats(rank=RANK, time_ns=9_000, recorded=9, exported=9, run_id="r"))
    v1.shutdown(1.0)
    assert len(v1.check()) == 2 and v1.calls == [9, -1, 1, -1]


@pytest.mark.parametrize("version", [1, 2])
def test_a_resource_with_a_schema_url_and_any_attribute_kind(tmp_path: Path,
                                                             version: int) -> None:
    resource = Resource({"service.name": "x", "f": 0.25, "neg": -7, "on": True,
                         "u": "ü\u2028\"q\"", "list": ("a", "b"),
                         **({schema.VERSION: 2} if version == 2 else {})},
                        schema_url="https://schema/1")
    oracle = Oracle(tmp_path, resource)
    oracle.export(_events()[:2])
    oracle.shutdown(1.0)
    lines = oracle.check()
    assert len(lines) == version  # version 2: the second event's run id is another resource's
    assert all('"schemaUrl":"https://schema/1"' in ln and '"doubleValue":0.25' in ln
               for ln in lines)


def test_long_batches_split_into_lines_as_the_oracle_is_cut(tmp_path: Path) -> None:
    oracle = Oracle(tmp_path, process_resource(RANK))
    oracle.export(_events()[:1] * (SPANS_PER_LINE + 3))
    oracle.shutdown(1.0)
    lines = oracle.check()
    assert len(lines) == 2 and lines[1].count('"spanId"') == 3


def test_real_calls_through_the_recorder_encode_as_the_official_encoder_does(
    tmp_path: Path,
) -> None:
    """The wrapper's own records (raw tuples, templates at each shape's second sighting) for
    successes, every kind of engine error, non-tensor values, empty dicts and 0-d tensors."""
    oracle = Oracle(tmp_path, process_resource(RANK, "r"))
    rec = recorder(Config(run_id="r"), oracle)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5, n=3)
    for _ in range(3):
        tensors: dict[str, Any] = {"next_token_ids": torch.zeros(2), "lens": [1, 2]}
        out = Output(3)
        out.named["scalar"] = torch.tensor(1.5, dtype=torch.float64)
        attach(tensors, out)
        extract(tensors, Observer())
        for call, args in ((attach, ({"next_token_ids": [1]}, Composite())),
                           (attach, ({}, Output(0))),
                           (extract, ({PREFIX + "x": [1]}, Observer())),
                           (extract, ({PREFIX + "x": torch.ones(1)}, None))):
            with pytest.raises(RuntimeError):
                call(*args)
        attach({}, None)
        extract({}, None)
    rec.shutdown(timeout=5.0)
    assert (rec.dropped, rec.internal_errors) == (0, 0)
    lines = oracle.check()
    assert sum(line.count('"spanId"') for line in lines) == 10 + 3 * 8 + 1
    assert oracle.raw.templates_built >= 8


def test_a_str_subclass_key_costs_nothing(tmp_path: Path) -> None:
    # Any str is a legal dict key to the engine, a str subclass too; the file sink's encoder
    # takes exact types only, so the converter hands it plain characters. Before, such a key
    # made the sink refuse the whole chunk (every event in it counted as dropped).
    class Key(str):
        def startswith(self, *args: object) -> bool:
            return str.startswith(self, *args)  # type: ignore[arg-type]

        def __str__(self) -> str:
            raise AssertionError("the recorder called the key's own __str__")

    cfg = Config(trace_dir=str(tmp_path), run_id="r", flush_interval=3600, native=False)
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
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


@pytest.mark.parametrize("value", [2**63, float("nan"), b"bytes"])
def test_a_value_without_an_otlp_form_is_refused_with_a_clear_error(
    tmp_path: Path, value: object
) -> None:
    with pytest.raises(ValueError, match=r"attribute .* (int64|not finite|no OTLP form)"):
        FileSink(str(tmp_path / "t.jsonl"), Resource({"bad": value}))  # type: ignore[dict-item]
    sink = FileSink(str(tmp_path / "t.jsonl"), process_resource(RANK))
    with pytest.raises(ValueError, match="int64"):
        sink.export([_events()[0]._replace(thread_id=2**64 - 1)])
    assert not (tmp_path / "t.jsonl").exists()  # nothing half written


def test_a_trace_files_envelope_is_compact_and_what_a_collector_gets_is_whole(
        tmp_path: Path) -> None:
    """A compact (version 2) file writes the kind as its number and leaves out an empty status
    and the flags (43 bytes a span); the loader reads the same events, and the shipper's
    re-encoding posts whole spans: the kind by name, the status and the flags (what Jaeger
    got before)."""
    from pptrace.ship.reencode import Reencoder

    events = _events()
    compact, whole = tmp_path / "v2.jsonl", tmp_path / "v1.jsonl"
    for path, version in ((compact, 2), (whole, 1)):
        sink = FileSink(str(path), process_resource(RANK, "r", version=version),
                        scope_version())
        sink.export(events)
        sink.shutdown(1.0)
    text = compact.read_text("ascii")
    spans = [s for line in text.splitlines()
             for s in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert spans and all(s["kind"] == 1 and "flags" not in s for s in spans)
    assert all("status" not in s for s in spans if "events" not in s)
    assert all(s["status"]["code"] == "STATUS_CODE_ERROR" for s in spans if "events" in s)
    assert load_paths([str(compact)]).processes[0].events == load_paths(
        [str(whole)]).processes[0].events
    posted = [s for line in text.splitlines() for out in Reencoder().line(line).lines
              for s in json.loads(out)["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert len(posted) == len(spans)
    assert all(s["kind"] == "SPAN_KIND_INTERNAL" and s["flags"] == 256 and "status" in s
               for s in posted)
