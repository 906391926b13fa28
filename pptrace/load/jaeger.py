"""Reader for Jaeger's JSON model: ``{"data": [trace, ...]}``, what its UI downloads and its
``/api/traces`` endpoint returns.

Jaeger spans carry tags as ``{"key", "type", "value"}`` and times in microseconds. Jaeger has no
array tag type: converters from OTLP store an array attribute as a string holding JSON, so a
pptrace array attribute that arrives as a string starting with ``[`` is decoded back. A span's
process tags are its resource's attributes (where schema version 2 keeps a process's constants).

    for_each_jaeger_span(document, sink)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pptrace.load.otlp import BadShape, SpanSink, norm_id, to_int

__all__ = ["for_each_jaeger_span", "tags"]

_TRUE = {"true", "1"}
_FALSE = {"false", "0"}


def _tag_value(key: str, kind: Any, value: Any) -> Any:
    kind = kind.lower() if isinstance(kind, str) else ""
    if kind in ("int64", "int"):
        return to_int(value, f"tag {key!r}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise BadShape(f"tag {key!r} should be a boolean, found {value!r:.40}")
    if kind in ("float64", "float"):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise BadShape(f"tag {key!r} should be a number, found {value!r:.40}") from None
    if isinstance(value, str) and value.startswith("[") and key.startswith("pptrace."):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def tags(items: Any) -> dict[str, Any]:
    """Turn a Jaeger tag list into a dict of plain values."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise BadShape(f"tags should be a list, found {type(items).__name__}")
    out: dict[str, Any] = {}
    for tag in items:
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise BadShape("each tag should be an object with a string 'key'")
        key = tag["key"]
        out[key] = _tag_value(key, tag.get("type"), tag.get("value"))
    return out


def _process(span: Mapping[str, Any], processes: Mapping[str, Any],
             seen: dict[int, tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """(service name, process tags) of a span's process; each process's tags decoded once."""
    process = span.get("process")
    if not isinstance(process, dict):
        process = processes.get(span.get("processID", ""))
    if not isinstance(process, dict):
        return "", {}
    known = seen.get(id(process))
    if known is None:
        name = process.get("serviceName", "")
        known = seen[id(process)] = (name if isinstance(name, str) else "",
                                     tags(process.get("tags")))
    return known


def for_each_jaeger_span(document: Mapping[str, Any], sink: SpanSink) -> int:
    """Hand every span of a Jaeger ``{"data": [...]}`` document to ``sink``; return the count."""
    traces = document.get("data")
    if not isinstance(traces, list):
        raise BadShape(f"'data' should be a list of traces, found {type(traces).__name__}")
    count = 0
    for trace in traces:
        if not isinstance(trace, dict):
            raise BadShape("each item of 'data' should be a trace object")
        processes = trace.get("processes") or {}
        if not isinstance(processes, dict):
            raise BadShape("'processes' should be an object")
        spans = trace.get("spans") or []
        if not isinstance(spans, list):
            raise BadShape("'spans' should be a list")
        seen: dict[int, tuple[str, dict[str, Any]]] = {}  # (the trace keeps its processes alive)
        for span in spans:
            if not isinstance(span, dict):
                raise BadShape("each span should be an object")
            name = span.get("operationName", "")
            if not isinstance(name, str):
                raise BadShape("operationName should be a string")
            start = to_int(span.get("startTime", 0), "startTime") * 1000
            end = start + to_int(span.get("duration", 0), "duration") * 1000
            service, resource = _process(span, processes, seen)
            sink.span(
                name,
                tags(span.get("tags")),
                start,
                end,
                norm_id(span.get("traceID", trace.get("traceID"))),
                norm_id(span.get("spanID")),
                service,
                resource,
            )
            count += 1
    return count
