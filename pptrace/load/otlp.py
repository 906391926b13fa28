"""Readers for OTLP/JSON: a ``TracesData`` object, and Jaeger's v3 API ``{"result": ...}``.

Both carry ``resourceSpans -> scopeSpans -> spans``; this module walks them and hands every span
to a ``SpanSink`` as (name, attributes, start, end, ids, service, the resource's attributes:
schema version 2 keeps a process's constants there). OTLP/JSON attribute values
are wrapped (``{"stringValue": ...}``, ``{"intValue": "123"}`` with int64 as a string,
``{"arrayValue": {"values": [...]}}``...); ids are hex, but base64 (protobuf's own JSON
mapping, which some tools emit) is accepted too.

    for_each_otlp_span(document, sink)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "BadShape",
    "SpanSink",
    "any_value",
    "attributes",
    "for_each_otlp_span",
    "norm_id",
    "otlp_span",
    "resource_attributes",
    "service_of",
    "to_int",
]


class BadShape(ValueError):
    """A JSON value has the wrong structure for the format; the message says what was expected."""


class SpanSink(Protocol):
    """Receives every span a reader finds (pptrace's own and other tools')."""

    def span(
        self,
        name: str,
        attrs: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
        trace_id: str,
        span_id: str,
        service: str,
        resource: Mapping[str, Any],
    ) -> None: ...


def to_int(value: Any, what: str) -> int:
    """An int64 as OTLP/JSON writes it: a JSON number or a decimal string."""
    if isinstance(value, bool):
        raise BadShape(f"{what} should be an integer, found bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise BadShape(f"{what} should be an integer, found {type(value).__name__} {value!r:.40}")


def _double(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # "NaN", "Infinity", "-Infinity" in proto3 JSON
        try:
            return float(value)
        except ValueError:
            pass
    raise BadShape(f"doubleValue should be a number, found {value!r:.40}")


def any_value(value: Any) -> Any:
    """Unwrap one OTLP/JSON ``AnyValue`` into a plain Python value (None when empty)."""
    if not isinstance(value, dict):
        raise BadShape(f"attribute value should be an object, found {type(value).__name__}")
    for kind, inner in value.items():
        if kind == "stringValue":
            if not isinstance(inner, str):
                raise BadShape(f"stringValue should be a string, found {type(inner).__name__}")
            return inner
        if kind == "intValue":
            return to_int(inner, "intValue")
        if kind == "boolValue":
            if not isinstance(inner, bool):
                raise BadShape(f"boolValue should be true or false, found {inner!r:.40}")
            return inner
        if kind == "arrayValue":
            items = inner.get("values", []) if isinstance(inner, dict) else None
            if not isinstance(items, list):
                raise BadShape("arrayValue should hold a 'values' list")
            return [any_value(v) for v in items]
        if kind == "doubleValue":
            return _double(inner)
        if kind == "kvlistValue":
            items = inner.get("values", []) if isinstance(inner, dict) else None
            if not isinstance(items, list):
                raise BadShape("kvlistValue should hold a 'values' list")
            return attributes(items)
        if kind == "bytesValue":
            return inner if isinstance(inner, str) else ""
    return None


def attributes(items: Any) -> dict[str, Any]:
    """Turn an OTLP/JSON ``KeyValue`` list into a dict."""
    if not isinstance(items, list):
        raise BadShape(f"attributes should be a list, found {type(items).__name__}")
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise BadShape("each attribute should be an object with a string 'key'")
        out[item["key"]] = any_value(item.get("value", {}))
    return out


def norm_id(value: Any) -> str:
    """A trace or span id as lowercase hex, from hex (OTLP/JSON) or base64 (protobuf JSON)."""
    if not isinstance(value, str) or not value:
        return ""
    if len(value) in (16, 32):
        try:
            int(value, 16)
            return value.lower()
        except ValueError:
            pass
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value


def _list(node: Mapping[str, Any], *keys: str) -> list[Any]:
    for key in keys:
        value = node.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise BadShape(f"'{key}' should be a list, found {type(value).__name__}")
        return value
    return []


def otlp_span(span: Any, service: str, resource: Mapping[str, Any], sink: SpanSink) -> None:
    """Hand one OTLP/JSON span object of a resource (its attributes, its service) to ``sink``."""
    if not isinstance(span, dict):
        raise BadShape("each span should be an object")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise BadShape(f"span name should be a string, found {type(name).__name__}")
    start = to_int(span.get("startTimeUnixNano", 0), "startTimeUnixNano")
    end = to_int(span.get("endTimeUnixNano", start), "endTimeUnixNano")
    sink.span(
        name,
        attributes(span.get("attributes", [])),
        start,
        end,
        norm_id(span.get("traceId")),
        norm_id(span.get("spanId")),
        service,
        resource,
    )


def resource_attributes(rs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of a resourceSpans item's resource ({} when absent)."""
    resource = rs.get("resource") or {}
    return attributes(resource.get("attributes", [])) if isinstance(resource, dict) else {}


def service_of(resource: Mapping[str, Any]) -> str:
    """The ``service.name`` of a resource's attributes ("" when absent)."""
    service = resource.get("service.name")
    return service if isinstance(service, str) else ""



def for_each_otlp_span(document: Mapping[str, Any], sink: SpanSink) -> int:
    """Hand every span of a ``TracesData`` object to ``sink``; return how many there were."""
    count = 0
    for rs in _list(document, "resourceSpans", "resource_spans"):
        if not isinstance(rs, dict):
            raise BadShape("each resourceSpans item should be an object")
        resource = resource_attributes(rs)
        service = service_of(resource)
        # "instrumentationLibrarySpans" is the pre-1.0 name of scopeSpans.
        for ss in _list(rs, "scopeSpans", "scope_spans", "instrumentationLibrarySpans"):
            if not isinstance(ss, dict):
                raise BadShape("each scopeSpans item should be an object")
            for span in _list(ss, "spans"):
                otlp_span(span, service, resource, sink)
                count += 1
    return count
