"""The direct OTLP/JSON encoder writes exactly what the protobuf path writes, byte for byte."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from helpers_recorder import RANK, Composite, Observer, Output
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import pptrace.record.engine as engine
from pptrace.export import otlp_json
from pptrace.export import spans as export
from pptrace.export.spans import SpanSink, rank_resource
from pptrace.model.config import Config
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport


def _reference(spans: Sequence[ReadableSpan], monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(otlp_json, "encode_json_line", lambda _spans: None)
        return export.encode_json_line(spans)


def _provider(resource: Resource) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _pptrace_spans() -> list[ReadableSpan]:
    """Real event and stats spans: success, errors, non-tensors, empty dicts, 0-d tensors."""
    provider, memory = _provider(rank_resource(RANK, "run-1"))
    rec = Recorder(Config(run_id="run-1"), sink_factory=lambda _r: SpanSink(provider),
                   rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    tensors: dict[str, Any] = {"next_token_ids": torch.zeros(2), "lens": [1, 2]}
    out = Output(3)
    out.named["scalar"] = torch.tensor(1.5, dtype=torch.float64)
    attach(tensors, out)
    extract(tensors, Observer())
    for call, args in ((attach, ({}, Composite())), (attach, ({}, Output(0))),
                       (extract, ({"__sampling_observer_output__.x": [1]}, Observer())),
                       (extract, ({"__sampling_observer_output__.x": torch.ones(1)}, None))):
        with pytest.raises(RuntimeError):
            call(*args)
    attach({}, None)
    extract({}, None)
    rec.flush()
    return list(memory.get_finished_spans())


def test_pptrace_spans_encode_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = _pptrace_spans()
    assert len(spans) == 9  # 8 events and a stats span
    fast = otlp_json.encode_json_line(spans)
    assert fast is not None
    assert fast == _reference(spans, monkeypatch)
    for span in spans:  # and one at a time, as small flushes write them
        assert otlp_json.encode_json_line([span]) == _reference([span], monkeypatch)


def test_other_span_features_encode_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, memory = _provider(Resource.create({"service.name": "x", "f": 0.25},
                                                 schema_url="https://schema/1"))
    tracer = provider.get_tracer("lib", "2.0", schema_url="https://schema/2")
    other = provider.get_tracer("other")
    with tracer.start_as_current_span("parent", kind=trace_api.SpanKind.SERVER,
                                      attributes={"empty": [], "floats": [1.5, -2.0],
                                                  "u": "ü\u2028\"q\"", "neg": -7}) as parent:
        parent.add_event("e", {"b": False}, timestamp=123)
        parent.add_event("no-attrs")
        with other.start_as_current_span("child", kind=trace_api.SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.OK))
    spans = list(memory.get_finished_spans())
    fast = otlp_json.encode_json_line(spans)
    assert fast is not None and '"parentSpanId"' in fast and '"schemaUrl"' in fast
    assert fast == _reference(spans, monkeypatch)


def test_what_it_does_not_know_goes_to_the_protobuf_path(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, memory = _provider(Resource.create({}))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("a") as a:
        a.set_attribute("huge", 2**70)  # beyond int64: protobuf leaves it out
    with tracer.start_as_current_span("b", links=[trace_api.Link(a.get_span_context())]):
        pass
    with tracer.start_as_current_span("c") as c:
        c.set_attribute("nan", float("nan"))
    for span in memory.get_finished_spans():
        assert otlp_json.encode_json_line([span]) is None
        assert export.encode_json_line([span]) == _reference([span], monkeypatch)


def test_equal_resources_in_distinct_objects_group_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    pair = [_provider(Resource.create({"service.name": "same"})) for _ in range(2)]
    spans: list[ReadableSpan] = []
    for i, name in enumerate("abcd"):  # alternate between two providers with equal resources
        provider, memory = pair[i % 2]
        with provider.get_tracer("t").start_as_current_span(name):
            pass
        spans.append(memory.get_finished_spans()[-1])
    assert spans[0].resource is not spans[1].resource and spans[0].resource == spans[1].resource
    fast = otlp_json.encode_json_line(spans)
    assert fast is not None and fast.count('"resource"') == 1
    assert fast == _reference(spans, monkeypatch)
