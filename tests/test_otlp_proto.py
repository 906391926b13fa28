"""OTLP/JSON lines as a protobuf request (``pptrace.export.otlp_proto``): the official mapping.

The shipper sends ``http/protobuf`` (and ``grpc``) as the same request the trace-file encoder
writes as JSON; what the collector gets must be what ``google.protobuf.json_format`` (the
official JSON mapping, with OTLP's hex ids) makes of the line, for every kind of span the
encoder writes: events with and without errors, message spans, stats spans, in the trace
file's compact version 2 and the version 1 the shipper posts.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from pptrace.export.file_sink import FileSink
from pptrace.export.otlp_proto import request
from pptrace.export.sinks import build_sink
from pptrace.export.spans import process_resource
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.engine import (
    add_auxiliary_output_to_pp_tensors,
    pop_auxiliary_output_from_pp_tensors,
)
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from pptrace.ship.reencode import Reencoder
from tests.doubles import NotPP, Observer, Output, RaisingObserver
from tests.test_messages_compact import FAILED, OUTPUT, PROXY
from tests.test_messages_compact import RANK as MESSAGE_RANK

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, pid=4242)


def _official(line: str) -> ExportTraceServiceRequest:
    """What json_format makes of an OTLP/JSON line (its ids turned from hex to base64)."""
    raw = json.loads(line)
    for rs in raw["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(raw, ExportTraceServiceRequest())


def _lines(tmp_path: Path) -> list[str]:
    """A trace file with every kind of span: events (some failing), messages, stats."""
    config = Config(trace_dir=str(tmp_path), flush_interval=3600)
    rec = Recorder(config, sink_factory=lambda r: build_sink(config, r),
                   rank_provider=lambda: (RANK, True))
    rec.start()
    attach, extract = wrap_transport(add_auxiliary_output_to_pp_tensors,
                                     pop_auxiliary_output_from_pp_tensors, rec)
    for i in range(20):
        tensors: dict[str, object] = {"i": i}
        attach(tensors, Output(3))
        extract(tensors, Observer())
    with pytest.raises(RuntimeError):
        attach({}, NotPP())
    with pytest.raises(ValueError):
        extract(_attached(), RaisingObserver(ValueError("observer failed")))
    rec.shutdown()
    messages = tmp_path / "messages.jsonl"
    sink = FileSink(str(messages), process_resource(MESSAGE_RANK, "run", 2), "1")
    sink.export_messages([PROXY, OUTPUT, FAILED], MESSAGE_RANK, "run")
    sink.shutdown(1.0)
    lines = [ln for p in sorted(tmp_path.glob("*.jsonl")) for ln in p.read_text().splitlines()]
    assert len(lines) >= 2
    return lines


def _attached() -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    add_auxiliary_output_to_pp_tensors(tensors, Output(1))
    return tensors


def test_each_line_becomes_what_the_official_json_mapping_makes_of_it(tmp_path: Path) -> None:
    file_lines = _lines(tmp_path)
    reencoder = Reencoder()
    posted = [v1 for line in file_lines for v1 in reencoder.line(line).lines]
    kinds: set[str] = set()
    for line in file_lines + posted:
        got = request([line])
        assert got == _official(line)
        spans = [s for rs in got.resource_spans for ss in rs.scope_spans for s in ss.spans]
        kinds |= {s.name for s in spans}
        kinds |= {"error" for s in spans if s.status.code == 2 and s.events}
    events = {schema.SPAN_ATTACH, schema.SPAN_EXTRACT, schema.SPAN_STATS, "error"}
    assert events <= kinds and len(kinds - events) >= 2  # message spans: sends, receives
    # Several lines make one request of all their resourceSpans, in order.
    together = request(posted)
    assert list(together.resource_spans) == [
        rs for line in posted for rs in _official(line).resource_spans]


@pytest.mark.parametrize("change", [
    lambda span: span.update(unknownField=1),
    lambda span: span.update(spanId="abcd"),
    lambda span: span.update(startTimeUnixNano=1.5),
    lambda span: span["attributes"][0].update(value={"noSuchValue": 1}),
])
def test_a_line_it_cannot_map_whole_is_refused(tmp_path: Path, change: Any) -> None:
    line = json.loads(_lines(tmp_path)[0])
    change(line["resourceSpans"][0]["scopeSpans"][0]["spans"][0])
    with pytest.raises(ValueError):
        request([json.dumps(line)])


def test_the_encoded_attributes_kept_are_bounded() -> None:
    from pptrace.export import otlp_proto

    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "s"}
    lines = [json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {**span, "attributes": [{"key": "seq", "value": {"intValue": str(i)}}]}]}]}]})
        for i in range(otlp_proto._FRAMED_MAX + 10)]
    got = request(lines)
    assert len(otlp_proto._FRAMED) <= otlp_proto._FRAMED_MAX
    seqs = [s.attributes[0].value.int_value
            for rs in got.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert seqs == list(range(otlp_proto._FRAMED_MAX + 10))
