"""OTLP/JSON lines as one protobuf ``ExportTraceServiceRequest``, built with the official classes.

The trace-file encoder (``FileSink``) is the one encoder of pptrace's spans; it writes OTLP/JSON.
A collector that is sent ``http/protobuf`` or ``grpc`` gets the same request in protobuf: each
line is one ``ExportTraceServiceRequest`` in the OTLP/JSON form, and ``request`` turns lines
into one request of ``opentelemetry.proto``'s classes, field by field as the OTLP
specification maps JSON to protobuf (ids in hex, 64-bit integers as strings, enums by name or
number). It is ``google.protobuf.json_format`` with the OTLP id rule, several times faster
(json_format walks descriptors in Python); ``tests/test_otlp_proto.py`` checks the two agree on
every kind of span the encoder writes. A field it does not know is a ``ValueError``, never
dropped quietly.

Most of a span's attributes repeat from span to span (rank, pid, thread, tensor names and
shapes), and building their messages again was most of the cost (about 140 µs a span of CPU
against 80 with this): each distinct ``KeyValue`` is encoded once by its class, kept as the
span's field 9, and a span's attributes are appended with ``Span.MergeFromString`` (the
encoding's rule: a repeated field's elements append, in order).

    body = request(lines).SerializeToString()     # Content-Type: application/x-protobuf
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

__all__ = ["CONTENT_TYPE", "request"]

CONTENT_TYPE = "application/x-protobuf"


def _int(raw: Any) -> int:
    """A 64-bit integer: OTLP/JSON writes it as a decimal string (a number is accepted too)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"not an integer: {raw!r}")
    return int(raw)


def _enum(raw: Any, by_name: Callable[[str], int]) -> int:
    return by_name(raw) if isinstance(raw, str) else _int(raw)


def _value(v: Mapping[str, Any]) -> AnyValue:
    if not v:
        return AnyValue()
    if len(v) != 1:
        raise ValueError(f"an AnyValue with more than one value: {sorted(v)}")
    ((kind, x),) = v.items()
    if kind == "stringValue":
        return AnyValue(string_value=x)
    if kind == "intValue":
        return AnyValue(int_value=_int(x))
    if kind == "boolValue":
        return AnyValue(bool_value=x)
    if kind == "doubleValue":
        return AnyValue(double_value=float(x))
    if kind == "arrayValue":
        return AnyValue(array_value=ArrayValue(values=[_value(i) for i in x.get("values", ())]))
    if kind == "kvlistValue":
        return AnyValue(kvlist_value=KeyValueList(values=_attributes(x.get("values", ()))))
    if kind == "bytesValue":
        import base64

        return AnyValue(bytes_value=base64.b64decode(x, validate=True))
    raise ValueError(f"unknown AnyValue kind {kind!r}")


def _attributes(items: Sequence[Mapping[str, Any]]) -> list[KeyValue]:
    return [KeyValue(key=kv["key"], value=_value(kv.get("value", {}))) for kv in items]


_SCALARS = frozenset({"stringValue", "intValue", "boolValue", "doubleValue"})
#: A span's attributes as the protobuf encoding of each KeyValue, framed as ``Span`` field 9:
#: most repeat from span to span (rank, pid, names, shapes), and building the message of each
#: again is most of the cost. Bounded: cleared when full.
_FRAMED: dict[tuple[str, str, Any], bytes] = {}
_FRAMED_MAX = 8192
_SPAN_ATTRIBUTES_TAG = b"\x4a"  # field 9, length-delimited (opentelemetry/proto/trace/v1)


#: One-byte varints, made once: most lengths and small integers.
_SMALL = tuple(bytes((i,)) for i in range(0x80))


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _span_attributes(items: Sequence[Mapping[str, Any]]) -> bytes:
    """The attributes as ``Span`` field 9, encoded (what ``Span.MergeFromString`` appends)."""
    parts = []
    for kv in items:
        value = kv.get("value", {})
        key: tuple[str, str, Any] | None = None
        if len(value) == 1:
            ((kind, x),) = value.items()
            if kind in _SCALARS and not isinstance(x, (list, dict)):
                key = (kv["key"], kind, x)
            elif kind == "arrayValue" and isinstance(x, dict) and x.keys() <= {"values"}:
                items_ = [next(iter(v.items())) for v in x.get("values", ()) if len(v) == 1]
                if len(items_) == len(x.get("values", ())) and all(
                        k in _SCALARS and not isinstance(i, (list, dict)) for k, i in items_):
                    key = (kv["key"], kind, tuple(items_))
        framed = _FRAMED.get(key) if key is not None else None
        if framed is None:
            body = KeyValue(key=kv["key"], value=_value(value)).SerializeToString()
            framed = _SPAN_ATTRIBUTES_TAG + _varint(len(body)) + body
            if key is not None:
                if len(_FRAMED) >= _FRAMED_MAX:
                    _FRAMED.clear()
                _FRAMED[key] = framed
        parts.append(framed)
    return b"".join(parts)


def _id(raw: str, size: int) -> bytes:
    out = bytes.fromhex(raw)
    if len(out) != size:
        raise ValueError(f"id {raw!r} is not {size} bytes")
    return out


_SPAN_KEYS = frozenset({
    "traceId", "spanId", "parentSpanId", "traceState", "name", "kind", "startTimeUnixNano",
    "endTimeUnixNano", "attributes", "droppedAttributesCount", "events", "droppedEventsCount",
    "links", "droppedLinksCount", "status", "flags"})


def _span(s: Mapping[str, Any]) -> Span:
    unknown = s.keys() - _SPAN_KEYS
    if unknown:
        raise ValueError(f"unknown span fields {sorted(unknown)}")
    span = Span(
        trace_id=_id(s["traceId"], 16), span_id=_id(s["spanId"], 8),
        parent_span_id=_id(s["parentSpanId"], 8) if s.get("parentSpanId") else b"",
        trace_state=s.get("traceState", ""), name=s.get("name", ""),
        kind=_enum(s.get("kind", 0), Span.SpanKind.Value),  # type: ignore[arg-type]
        start_time_unix_nano=_int(s.get("startTimeUnixNano", 0)),
        end_time_unix_nano=_int(s.get("endTimeUnixNano", 0)),
        dropped_attributes_count=_int(s.get("droppedAttributesCount", 0)),
        events=[Span.Event(time_unix_nano=_int(e.get("timeUnixNano", 0)), name=e.get("name", ""),
                           attributes=_attributes(e.get("attributes", ())),
                           dropped_attributes_count=_int(e.get("droppedAttributesCount", 0)))
                for e in s.get("events", ())],
        dropped_events_count=_int(s.get("droppedEventsCount", 0)),
        links=[Span.Link(trace_id=_id(link["traceId"], 16), span_id=_id(link["spanId"], 8),
                         trace_state=link.get("traceState", ""),
                         attributes=_attributes(link.get("attributes", ())),
                         dropped_attributes_count=_int(link.get("droppedAttributesCount", 0)),
                         flags=_int(link.get("flags", 0)))
               for link in s.get("links", ())],
        dropped_links_count=_int(s.get("droppedLinksCount", 0)),
        flags=_int(s.get("flags", 0)),
    )
    # Appended encoded: a repeated field's elements append, in order, as the encoding says.
    span.MergeFromString(_span_attributes(s.get("attributes", ())))
    status = s.get("status")
    if status is not None:  # an empty status is written too: a field present, as json_format
        span.status.CopyFrom(Status(
            message=status.get("message", ""),
            code=_enum(status.get("code", 0), Status.StatusCode.Value)))  # type: ignore[arg-type]
    return span


def _resource_spans(rs: Mapping[str, Any]) -> ResourceSpans:
    resource = rs.get("resource", {})
    return ResourceSpans(
        resource=Resource(attributes=_attributes(resource.get("attributes", ())),
                          dropped_attributes_count=_int(
                              resource.get("droppedAttributesCount", 0))),
        scope_spans=[ScopeSpans(
            scope=InstrumentationScope(name=ss.get("scope", {}).get("name", ""),
                                       version=ss.get("scope", {}).get("version", "")),
            spans=[_span(s) for s in ss.get("spans", ())],
            schema_url=ss.get("schemaUrl", ""))
            for ss in rs.get("scopeSpans", ())],
        schema_url=rs.get("schemaUrl", ""))


def request(lines: Sequence[str]) -> ExportTraceServiceRequest:
    """One request holding every line's resourceSpans (``ValueError`` on a malformed line)."""
    try:
        return ExportTraceServiceRequest(resource_spans=[
            _resource_spans(rs) for line in lines for rs in json.loads(line)["resourceSpans"]])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an OTLP/JSON request: {type(exc).__name__}: {exc}") from None
