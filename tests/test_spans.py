"""Real SDK spans from real calls: the whole attribute set of a success, of every engine error and
of a multi-tensor call, status and exception event on failure, and the way back from span
attributes to the very ``Event`` the recorder produced.

Each test drives pptrace's wrapped reference transport with a live ``Recorder`` whose sink is an
``SdkSpanSink`` on a ``TracerProvider`` built here (never a global one), exporting to
OpenTelemetry's own ``InMemorySpanExporter``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import pptrace.record.engine as engine
from pptrace.export.spans import SdkSpanSink
from pptrace.model import errors, schema
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record.wrapper import wrap_transport
from tests.doubles import NotPP
from tests.helpers_core import (
    RANK,
    BlockedObserver,
    BlockedOutput,
    CallLog,
    Observer,
    ObserverError,
    Output,
    TeeSink,
)
from tests.helpers_core import make_recorder as _make_recorder

RUN_ID = "run-spans"
IDS = torch.arange(4)
A = torch.zeros(2, 3)  # float32, 24 bytes
B = torch.arange(5)  # int64, 40 bytes


@dataclass
class Traced:
    """A wrapped transport whose recorder turns events into spans kept in memory."""

    attach: Callable[..., Any]
    extract: Callable[..., Any]
    exporter: InMemorySpanExporter
    sink: TeeSink
    recorder: Any

    def spans(self) -> list[ReadableSpan]:
        self.recorder.flush()
        return list(self.exporter.get_finished_spans())

    def event_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name != schema.SPAN_STATS]


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = TeeSink(SdkSpanSink(provider))
    rec = _make_recorder(sink, Config(exporters=("none",), run_id=RUN_ID))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    yield Traced(attach, extract, exporter, sink, rec)
    provider.shutdown()


def columns(*tensors: tuple[str, str, str, str, int, bool, bool]) -> dict[str, Any]:
    """Per-tensor attributes from (name, shape, dtype, device, nbytes, contiguous, is_tensor)."""
    return {
        "pptrace.tensor.count": len(tensors),
        "pptrace.tensor.total_bytes": sum(t[4] for t in tensors),
        "pptrace.tensor.names": tuple(t[0] for t in tensors),
        "pptrace.tensor.keys": tuple(PREFIX + t[0] for t in tensors),
        "pptrace.tensor.shapes": tuple(t[1] for t in tensors),
        "pptrace.tensor.dtypes": tuple(t[2] for t in tensors),
        "pptrace.tensor.devices": tuple(t[3] for t in tensors),
        "pptrace.tensor.nbytes": tuple(t[4] for t in tensors),
        "pptrace.tensor.contiguous": tuple(t[5] for t in tensors),
        "pptrace.tensor.is_tensor": tuple(t[6] for t in tensors),
    }


TA = ("a", "2,3", "float32", "cpu", 24, True, True)
TB = ("b", "5", "int64", "cpu", 40, True, True)


def expected_attributes(span: ReadableSpan, direction: str, subject: str, pp_capable: bool | None,
                        tensors: dict[str, Any], before: tuple[str, ...], after: tuple[str, ...],
                        returned_none: bool = True,
                        error: tuple[str, str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The whole attribute dict a span must carry; only the clock readings come from the span."""
    attrs = span.attributes or {}
    assert span.start_time is not None and span.end_time is not None
    duration = attrs["pptrace.duration_ns"]
    assert isinstance(duration, int) and duration == span.end_time - span.start_time >= 0
    assert isinstance(attrs["pptrace.mono_ns"], int)
    out: dict[str, Any] = {
        "pptrace.schema_version": 1,
        "pptrace.direction": direction,
        "pptrace.seq": 0,
        "pptrace.run_id": RUN_ID,
        "pptrace.rank": 3,
        "pptrace.world_size": 4,
        "pp_rank": 3,
        "pptrace.pp_size": 4,
        "tp_rank": 0,
        "pptrace.tp_size": 1,
        "pptrace.host": "testhost",
        "pptrace.pid": os.getpid(),
        "pptrace.thread.id": threading.get_ident(),
        "pptrace.thread.name": threading.current_thread().name,
        "pptrace.mono_ns": attrs["pptrace.mono_ns"],
        "pptrace.duration_ns": duration,
        "pptrace.subject.type": subject,
        **tensors,
        "pptrace.keys.before": before,
        "pptrace.keys.after": after,
        "pptrace.returned_none": returned_none,
        "pptrace.dropped_before": 0,
    }
    if pp_capable is not None:
        out["pptrace.subject.pp_capable"] = pp_capable
    if error is not None:
        out["pptrace.error.type"], out["pptrace.error.message"] = error[0], error[1]
        out["pptrace.error.inserted_keys"] = error[2]
    return out


def only_span(traced: Traced) -> ReadableSpan:
    spans = traced.event_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def assert_round_trip(traced: Traced, span: ReadableSpan) -> None:
    """Span attributes decode back to exactly the event the recorder produced."""
    assert span.start_time is not None
    back = schema.attributes_to_event(span.attributes or {}, start_ns=span.start_time,
                                      end_ns=span.end_time)
    assert [back] == traced.sink.events


OUTPUT = "tests.helpers_core.Output"
OBSERVER = "tests.helpers_core.Observer"
NOT_PP = "tests.doubles.NotPP"


def test_success_span(traced: Traced) -> None:
    tensors: dict[str, Any] = {"next_token_ids": IDS}
    t0 = time.time_ns()
    traced.attach(tensors, Output(CallLog(), lambda: {"a": A}))
    t1 = time.time_ns()
    span = only_span(traced)
    assert span.name == "pptrace.attach"
    assert span.kind is SpanKind.INTERNAL and span.parent is None
    assert span.status.status_code is StatusCode.UNSET and list(span.events) == []
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "pptrace"
    assert span.start_time is not None and t0 <= span.start_time <= t1
    assert dict(span.attributes or {}) == expected_attributes(
        span, "attach", OUTPUT, True, columns(TA), ("next_token_ids",),
        ("next_token_ids", PREFIX + "a"))
    assert_round_trip(traced, span)


def test_multi_tensor_span(traced: Traced) -> None:
    """Several tensors of different kinds: parallel columns in dict order."""
    scalar = torch.tensor(2.5, dtype=torch.float64)
    strided = torch.arange(6, dtype=torch.int32).reshape(2, 3).t()
    flags = torch.ones(0, 4, dtype=torch.bool)
    named = {"a": A, "scalar": scalar, "strided": strided, "flags": flags, "b": B}
    tensors: dict[str, Any] = {"next_token_ids": IDS}
    traced.attach(tensors, Output(CallLog(), lambda: named))
    span = only_span(traced)
    expected_columns = columns(
        TA,
        ("scalar", "", "float64", "cpu", 8, True, True),
        ("strided", "3,2", "int32", "cpu", 24, False, True),
        ("flags", "0,4", "bool", "cpu", 0, True, True),
        TB,
    )
    assert dict(span.attributes or {}) == expected_attributes(
        span, "attach", OUTPUT, True, expected_columns, ("next_token_ids",),
        ("next_token_ids",) + tuple(PREFIX + n for n in named))
    assert_round_trip(traced, span)


def test_extract_success_span(traced: Traced) -> None:
    result = object()
    tensors: dict[str, Any] = {"next_token_ids": IDS, PREFIX + "a": A, PREFIX + "b": B}
    assert traced.extract(tensors, Observer(CallLog(), "return", result, ObserverError())) is result
    span = only_span(traced)
    assert span.name == "pptrace.extract"
    assert dict(span.attributes or {}) == expected_attributes(
        span, "extract", OBSERVER, True, columns(TA, TB),
        ("next_token_ids", PREFIX + "a", PREFIX + "b"), ("next_token_ids",), returned_none=False)
    assert_round_trip(traced, span)


NON_TENSOR_B = ("b", "", "list", "", 0, True, False)

# (direction, tensors dict, subject factory, subject type, pp_capable, message, columns,
#  keys after, inserted keys)
ERROR_CASES = [
    pytest.param("attach", {}, lambda: NotPP(), NOT_PP, False, errors.ATTACH_NOT_PP, (), (), (),
                 id="attach-not-pp"),
    pytest.param("attach", {}, lambda: BlockedOutput(), "tests.helpers_core.BlockedOutput", False,
                 errors.ATTACH_NOT_PP, (), (), (), id="attach-blocked-protocol"),
    pytest.param("attach", {}, lambda: Output(CallLog(), dict), OUTPUT, True, errors.ATTACH_EMPTY,
                 (), (), (), id="attach-empty"),
    pytest.param("attach", {}, lambda: Output(CallLog(), lambda: {"a": A, 3: B}), OUTPUT, True,
                 errors.ATTACH_BAD_NAME, (TA,), (PREFIX + "a",), (PREFIX + "a",),
                 id="attach-bad-name"),
    pytest.param("attach", {}, lambda: Output(CallLog(), lambda: {"a": A, "b": [1]}), OUTPUT,
                 True, "auxiliary PP output 'b' is not a tensor", (TA,), (PREFIX + "a",),
                 (PREFIX + "a",), id="attach-not-tensor"),
    pytest.param("attach", {PREFIX + "a": A}, lambda: Output(CallLog(), lambda: {"a": B}),
                 OUTPUT, True, "duplicate auxiliary PP tensor 'a'", (), (PREFIX + "a",), (),
                 id="attach-duplicate"),
    pytest.param("extract", {PREFIX + "a": A}, lambda: None, "NoneType", None,
                 errors.EXTRACT_NO_OBSERVER, (TA,), (PREFIX + "a",), (), id="extract-no-observer"),
    pytest.param("extract", {PREFIX + "a": A}, lambda: NotPP(), NOT_PP, False,
                 errors.EXTRACT_NOT_PP, (TA,), (PREFIX + "a",), (), id="extract-not-pp"),
    pytest.param("extract", {PREFIX + "a": A}, lambda: BlockedObserver(),
                 "tests.helpers_core.BlockedObserver", False, errors.EXTRACT_NOT_PP, (TA,),
                 (PREFIX + "a",), (), id="extract-blocked-protocol"),
    pytest.param("extract", {PREFIX + "a": A, PREFIX + "b": [1]},
                 lambda: Observer(CallLog(), "return", object(), ObserverError()), OBSERVER, True,
                 errors.EXTRACT_NOT_TENSOR, (TA, NON_TENSOR_B), (PREFIX + "a", PREFIX + "b"), (),
                 id="extract-non-tensor"),
    pytest.param("extract", {PREFIX + "a": A},
                 lambda: Observer(CallLog(), "none", object(), ObserverError()), OBSERVER, True,
                 errors.EXTRACT_NOT_RECONSTRUCTED, (TA,), (PREFIX + "a",), (),
                 id="extract-not-reconstructed"),
]


@pytest.mark.parametrize(
    ("direction", "initial", "subject", "subject_type", "pp_capable", "message", "cols", "after",
     "inserted"),
    ERROR_CASES,
)
def test_engine_error_span(
    traced: Traced, direction: str, initial: dict[str, Any], subject: Callable[[], Any],
    subject_type: str, pp_capable: bool | None, message: str,
    cols: tuple[tuple[Any, ...], ...], after: tuple[str, ...], inserted: tuple[str, ...],
) -> None:
    fn = traced.attach if direction == "attach" else traced.extract
    tensors = dict(initial)
    with pytest.raises(RuntimeError) as info:
        fn(tensors, subject())
    assert str(info.value) == message
    span = only_span(traced)
    assert span.name == f"pptrace.{direction}"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == message
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("exception", {"exception.type": "RuntimeError", "exception.message": message})]
    assert span.events[0].timestamp == span.end_time
    assert dict(span.attributes or {}) == expected_attributes(
        span, direction, subject_type, pp_capable, columns(*cols), tuple(initial), after,
        error=("RuntimeError", message, inserted))
    assert_round_trip(traced, span)


def test_user_exception_span(traced: Traced) -> None:
    """An observer's own exception is recorded with its qualified type and exact message."""
    exc = ObserverError("observer lost its vocabulary")
    with pytest.raises(ObserverError):
        traced.extract({PREFIX + "a": A}, Observer(CallLog(), "raise", None, exc))
    span = only_span(traced)
    attrs = span.attributes or {}
    assert attrs["pptrace.error.type"] == "tests.helpers_core.ObserverError"
    assert attrs["pptrace.error.message"] == "observer lost its vocabulary"
    assert [dict(e.attributes or {}) for e in span.events] == [
        {"exception.type": "tests.helpers_core.ObserverError",
         "exception.message": "observer lost its vocabulary"}]
    assert_round_trip(traced, span)


def test_sequence_numbers_per_direction(traced: Traced) -> None:
    tensors: dict[str, Any] = {}
    for _ in range(3):
        traced.attach(tensors, Output(CallLog(), lambda: {"a": A}))
        traced.extract(tensors, Observer(CallLog(), "return", object(), ObserverError()))
    spans = traced.event_spans()
    seqs = [(s.name, (s.attributes or {})["pptrace.seq"]) for s in spans]
    assert seqs == [("pptrace.attach", 0), ("pptrace.extract", 0), ("pptrace.attach", 1),
                    ("pptrace.extract", 1), ("pptrace.attach", 2), ("pptrace.extract", 2)]
    decoded = [schema.attributes_to_event(s.attributes or {}, s.start_time or 0, s.end_time)
               for s in spans]
    assert decoded == traced.sink.events
    assert [e.direction for e in decoded] == [Direction.ATTACH, Direction.EXTRACT] * 3


def test_stats_span_round_trip(traced: Traced) -> None:
    traced.attach({}, Output(CallLog(), lambda: {"a": A}))
    stats_spans = [s for s in traced.spans() if s.name == schema.SPAN_STATS]
    assert len(stats_spans) == 1 and len(traced.sink.stats) == 1
    span, stats = stats_spans[0], traced.sink.stats[0]
    assert stats.recorded == 1 and stats.exported == 1 and stats.rank == RANK
    assert span.start_time == span.end_time == stats.time_ns
    assert schema.attributes_to_stats(span.attributes or {}) == stats


# --- fingerprints (opt-in) ----------------------------------------------------------------------


def fingerprinted(config: Config) -> Traced:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = TeeSink(SdkSpanSink(provider))
    rec = _make_recorder(sink, config)
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    return Traced(attach, extract, exporter, sink, rec)


FP_CONFIG = Config(exporters=("none",), run_id=RUN_ID, fingerprint=True)


def test_fingerprints_tell_changed_contents_apart() -> None:
    traced = fingerprinted(FP_CONFIG)
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tensors: dict[str, Any] = {}
    traced.attach(tensors, Output(CallLog(), lambda: {"a": a, "b": B}))
    a[0, 0] = 100.0  # changed between attach and extract, as by an overwritten buffer
    traced.extract(tensors, Observer(CallLog(), "return", object(), ObserverError()))
    attach_span, extract_span = traced.event_spans()
    sent = (attach_span.attributes or {})["pptrace.tensor.fingerprints"]
    received = (extract_span.attributes or {})["pptrace.tensor.fingerprints"]
    assert isinstance(sent, tuple) and isinstance(received, tuple)
    assert all(str(f).startswith("b2:") and len(str(f)) == 3 + 16 for f in sent + received)
    assert sent[0] != received[0] and sent[1] == received[1]
    assert traced.recorder.internal_errors == 0
    for span in (attach_span, extract_span):
        assert_round_trip_of(traced, span)


def assert_round_trip_of(traced: Traced, span: ReadableSpan) -> None:
    back = schema.attributes_to_event(span.attributes or {}, span.start_time or 0, span.end_time)
    assert back in traced.sink.events


def test_tensors_without_contents_record_no_fingerprint() -> None:
    """Meta tensors (no data) and non-tensors get no fingerprint, and the event is still whole."""
    traced = fingerprinted(FP_CONFIG)
    named = {"meta": torch.empty(3, 2, device="meta"), "none": torch.empty(0, device="meta")}
    traced.attach({}, Output(CallLog(), lambda: named))
    span = only_span(traced)
    assert "pptrace.tensor.fingerprints" not in (span.attributes or {})
    assert (span.attributes or {})["pptrace.tensor.devices"] == ("meta", "meta")
    assert traced.recorder.internal_errors == 0


def test_a_tensor_that_cannot_be_fingerprinted_costs_only_its_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pptrace.record.fingerprint

    real_start = pptrace.record.fingerprint.start

    def start(tensor: torch.Tensor) -> Any:
        if tensor is B:
            raise RuntimeError("cannot hash this one")
        return real_start(tensor)

    monkeypatch.setattr(pptrace.record.fingerprint, "start", start)
    traced = fingerprinted(FP_CONFIG)
    traced.attach({}, Output(CallLog(), lambda: {"a": A, "b": B}))
    span = only_span(traced)
    fps = (span.attributes or {})["pptrace.tensor.fingerprints"]
    assert isinstance(fps, tuple) and str(fps[0]).startswith("b2:") and fps[1] == ""
    assert traced.recorder.internal_errors == 1
