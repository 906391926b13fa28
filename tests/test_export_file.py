"""The default sink's files are plain OTLP/JSON: any protobuf JSON reader gets every span back.

A trace is written the way a rank writes it (a ``Recorder`` whose sink is ``build_sink``'s file
exporter), then each line is read with nothing but ``google.protobuf.json_format.Parse`` into the
official ``TracesData`` message, and every span, attribute and resource field is compared with the
events the recorder produced.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status, TracesData

import pptrace.record.engine as engine
from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import trace_file_name
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import PREFIX
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.helpers_core import RANK, CallLog, Observer, ObserverError, Output, TeeSink

HEX_IDS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def hex_ids_to_base64(node: Any, seen: dict[str, list[str]]) -> None:
    """OTLP/JSON (the spec) writes trace and span ids as hex; protobuf's generic JSON mapping reads
    ``bytes`` fields as base64. Converting the ids is the one adaptation a plain protobuf reader
    needs (OTLP receivers do the same); the hex form itself is checked separately."""
    if isinstance(node, dict):
        for key in HEX_IDS:
            if isinstance(node.get(key), str):
                seen.setdefault(key, []).append(node[key])
                node[key] = base64.b64encode(bytes.fromhex(node[key])).decode("ascii")
        for value in node.values():
            hex_ids_to_base64(value, seen)
    elif isinstance(node, list):
        for value in node:
            hex_ids_to_base64(value, seen)


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind is None:
        return None
    return getattr(value, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def otel_form(attrs: dict[str, Any]) -> dict[str, Any]:
    """Sequences as tuples, the way the SDK and the protobuf reader both hand them back."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


def write_trace(trace_dir: Path) -> tuple[TeeSink, Config]:
    config = Config(trace_dir=str(trace_dir), run_id="run-file", exporters=("file",))
    sinks: list[TeeSink] = []

    def factory(rank: Any) -> TeeSink:
        sinks.append(TeeSink(build_sink(config, rank)))
        return sinks[-1]

    rec = Recorder(config, sink_factory=factory, rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    a, b = torch.zeros(2, 3), torch.arange(5)
    tensors: dict[str, Any] = {"next_token_ids": torch.arange(4)}
    attach(tensors, Output(CallLog(), lambda: {"a": a, "b": b}))
    try:
        attach(tensors, Output(CallLog(), lambda: {"a": a}))
    except RuntimeError:
        pass
    rec.flush()  # one line of event spans, one line with the stats span
    extract(tensors, Observer(CallLog(), "return", object(), ObserverError()))
    try:
        extract({PREFIX + "a": a}, None)
    except RuntimeError:
        pass
    rec.shutdown(timeout=10)  # the exit path: final flush, final stats, file closed
    assert len(sinks) == 1
    return sinks[0], config


def test_a_written_trace_reads_back_with_the_plain_protobuf_parser(tmp_path: Path) -> None:
    tee, config = write_trace(tmp_path / "traces")
    assert os.listdir(config.trace_dir) == [trace_file_name(RANK)]
    assert trace_file_name(RANK) == f"pptrace-rank3-pid{os.getpid()}.otlp.jsonl"
    lines = (Path(config.trace_dir) / trace_file_name(RANK)).read_text("ascii").splitlines()
    assert len(lines) == 4  # events, stats, events, stats

    spans: list[Span] = []
    ids: dict[str, list[str]] = {}
    for number, line in enumerate(lines, 1):
        doc = json.loads(line)
        hex_ids_to_base64(doc, ids)
        data = json_format.Parse(json.dumps(doc), TracesData())  # unknown fields would fail here
        assert len(data.resource_spans) == 1, f"line {number}"
        resource_spans = data.resource_spans[0]
        resource = attributes(resource_spans.resource.attributes)
        assert resource["service.name"] == "pptrace"
        assert resource["host.name"] == "testhost"
        assert resource["process.pid"] == os.getpid()
        assert resource["pptrace.run_id"] == "run-file"
        assert (resource["pptrace.rank"], resource["pp_rank"], resource["tp_rank"]) == (3, 3, 0)
        assert resource[schema.VERSION] == schema.SCHEMA_VERSION
        assert resource[schema.R_THREAD_MAIN_NAME]
        for scope_spans in resource_spans.scope_spans:
            assert scope_spans.scope.name == "pptrace"
            spans.extend(scope_spans.spans)

    # Ids: lowercase hex of the right length, never all zero; every span is a root.
    for key, values in ids.items():
        assert all(re.fullmatch(f"[0-9a-f]{{{HEX_IDS[key]}}}", v) for v in values), key
        assert all(set(v) != {"0"} for v in values), key
    assert "parentSpanId" not in ids
    assert len(ids["spanId"]) == len(set(ids["spanId"])) == len(spans)
    assert [s.span_id.hex() for s in spans] == ids["spanId"]
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)

    events = [s for s in spans if s.name != schema.SPAN_STATS]
    stats = [s for s in spans if s.name == schema.SPAN_STATS]
    assert [s.name for s in events] == ["pptrace.attach"] * 2 + ["pptrace.extract"] * 2
    assert len(events) == len(tee.events) == 4
    assert len(stats) == len(tee.stats) == 2
    for span, event in zip(events, tee.events, strict=True):
        attrs = attributes(span.attributes)
        # Version 2: the span says only what its resource does not (the constants are there).
        assert attrs == otel_form(schema.event_to_attributes(event, resource, exact_times=True))
        assert not {schema.RUN_ID, schema.RANK, schema.HOST, schema.PID, schema.VERSION,
                    schema.T_KEYS, schema.KEYS_AFTER} & set(attrs)
        assert (span.start_time_unix_nano, span.end_time_unix_nano) == (event.start_ns,
                                                                         event.end_ns)
        assert schema.attributes_to_event(attrs, span.start_time_unix_nano,
                                          span.end_time_unix_nano, resource=resource,
                                          name=span.name) == event
        if event.ok:
            assert span.status.code == Status.STATUS_CODE_UNSET and not span.events
        else:
            assert span.status.code == Status.STATUS_CODE_ERROR
            assert span.status.message == event.error_message
            assert [(e.name, attributes(e.attributes)) for e in span.events] == [
                ("exception", {"exception.type": event.error_type,
                               "exception.message": event.error_message})]
    for span, recorded in zip(stats, tee.stats, strict=True):
        assert schema.attributes_to_stats(attributes(span.attributes),
                                          resource=resource) == recorded
    assert tee.stats[-1].recorded == tee.stats[-1].exported == 4
    assert tee.stats[-1].dropped == 0


def test_hex_ids_are_not_base64(tmp_path: Path) -> None:
    """Why the reader above converts ids: read as base64, a 32-hex-digit trace id silently turns
    into 24 bytes instead of 16. The file follows OTLP/JSON, not protobuf's generic mapping."""
    _, config = write_trace(tmp_path / "traces")
    line = (Path(config.trace_dir) / trace_file_name(RANK)).read_text("ascii").splitlines()[0]
    data = json_format.Parse(line, TracesData())
    span = data.resource_spans[0].scope_spans[0].spans[0]
    assert len(span.trace_id) == 24 and len(span.span_id) == 12
