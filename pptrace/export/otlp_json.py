"""A direct OTLP/JSON encoder for the spans pptrace writes, off the engine's path but still hot.

Encoding through protobuf (build the request, ``MessageToDict``, rewrite ids as hex, ``json.dumps``)
costs about a millisecond a span in Python; this writes the same bytes (OTLP/JSON: lowerCamelCase
names, hex ids, 64-bit integers as strings, enums by name, default values left out; compact
separators, ASCII escapes) straight from the SDK's span objects as string fragments, several times
faster. It knows the shapes pptrace produces (string, bool, int, float and homogeneous array
attributes; events; no links) and returns None for anything else, so that the caller falls back
to the protobuf path: the output is the same either way (``tests/test_recorder_encoding.py``
compares them byte for byte).

    line = encode_json_line(spans)   # -> '{"resourceSpans":[...]}' or None
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _esc  # what json.dumps uses (ensure_ascii)
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["encode_json_line"]

_INT64 = (-(2**63), 2**63 - 1)
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_STATUS = {1: '"code":"STATUS_CODE_OK"', 2: '"code":"STATUS_CODE_ERROR"'}


class _Unsupported(Exception):
    """A value or span feature this encoder leaves to the protobuf path."""


def _int(value: int) -> str:
    if not _INT64[0] <= value <= _INT64[1]:
        raise _Unsupported  # protobuf refuses it and drops the attribute
    return f'{{"intValue":"{value}"}}'


def _float(value: float) -> str:
    if math.isfinite(value):
        return f'{{"doubleValue":{value!r}}}'
    raise _Unsupported


def _array(value: Sequence[Any]) -> str:
    if not value:
        return '{"arrayValue":{}}'
    try:
        return '{"arrayValue":{"values":[' + ",".join(
            [_SCALARS[type(v)](v) for v in value]) + "]}}"
    except KeyError:
        raise _Unsupported from None


# One lookup per value instead of a chain of type tests; exact types only (a subclass of str or
# int goes to the protobuf path, which knows what to do with it).
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: lambda v: '{"stringValue":' + _esc(v) + "}",
    bool: lambda v: '{"boolValue":true}' if v else '{"boolValue":false}',
    int: _int,
    float: _float,
}
_VALUES: dict[type, Callable[[Any], str]] = {**_SCALARS, tuple: _array, list: _array}


def _attributes(attrs: Mapping[str, Any] | None) -> str:
    """``"attributes":[...]`` with a leading comma, or "" when there are none."""
    if not attrs:
        return ""
    values = _VALUES
    try:
        return ',"attributes":[' + ",".join(
            ['{"key":' + _esc(k) + ',"value":' + values[type(v)](v) + "}"
             for k, v in attrs.items()]) + "]"
    except KeyError:
        raise _Unsupported from None


def _span(span: ReadableSpan) -> str:
    if span.links:
        raise _Unsupported
    ctx = span.get_span_context()
    if ctx is None:
        raise _Unsupported
    out = [f'{{"traceId":"{ctx.trace_id:032x}","spanId":"{ctx.span_id:016x}"']
    if ctx.trace_state:
        out.append(',"traceState":' + _esc(",".join(f"{k}={v}" for k, v in
                                                     ctx.trace_state.items())))
    parent = span.parent
    if parent is not None:
        out.append(f',"parentSpanId":"{parent.span_id:016x}"')
    if span.name:
        out.append(',"name":' + _esc(span.name))
    out.append(f',"kind":"SPAN_KIND_{span.kind.name}"')
    if span.start_time:
        out.append(f',"startTimeUnixNano":"{span.start_time}"')
    if span.end_time:
        out.append(f',"endTimeUnixNano":"{span.end_time}"')
    out.append(_attributes(span.attributes))
    if span.dropped_attributes:
        out.append(f',"droppedAttributesCount":{span.dropped_attributes}')
    if span.events:
        events = []
        for event in span.events:
            e = []
            if event.timestamp:
                e.append(f'"timeUnixNano":"{event.timestamp}"')
            if event.name:
                e.append('"name":' + _esc(event.name))
            text = ",".join(e) + _attributes(event.attributes)
            if event.dropped_attributes:
                text += f',"droppedAttributesCount":{event.dropped_attributes}'
            events.append("{" + text.lstrip(",") + "}")
        out.append(',"events":[' + ",".join(events) + "]")
    if span.dropped_events:
        out.append(f',"droppedEventsCount":{span.dropped_events}')
    if span.dropped_links:
        out.append(f',"droppedLinksCount":{span.dropped_links}')
    status = []
    if span.status.description:
        status.append('"message":' + _esc(span.status.description))
    code = _STATUS.get(span.status.status_code.value)
    if code is not None:
        status.append(code)
    remote = parent is not None and parent.is_remote
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)
    out.append(',"status":{' + ",".join(status) + f'}},"flags":{flags}}}')
    return "".join(out)


def _scope(scope: Any) -> str:
    if scope is None:
        return "{}"
    parts = []
    if scope.name:
        parts.append('"name":' + _esc(scope.name))
    if scope.version:
        parts.append('"version":' + _esc(scope.version))
    text = ",".join(parts) + _attributes(getattr(scope, "attributes", None))
    return "{" + text.lstrip(",") + "}"


def encode_json_line(spans: Sequence[ReadableSpan]) -> str | None:
    """Encode spans as one OTLP/JSON ``TracesData`` line, or None to use the protobuf path."""
    try:
        # Hash each distinct Resource object once (hashing serialises its attributes to JSON),
        # then group in span order by the first equal resource seen, as the reference does.
        canonical: dict[int, Any] = {}
        first_equal: dict[Any, Any] = {}
        grouped: dict[int, tuple[Any, dict[Any, list[str]]]] = {}
        for span in spans:
            resource = span.resource
            key = canonical.get(id(resource))
            if key is None:
                key = canonical[id(resource)] = first_equal.setdefault(resource, resource)
            entry = grouped.get(id(key))
            if entry is None:
                entry = grouped[id(key)] = (key, {})
            entry[1].setdefault(span.instrumentation_scope or None, []).append(_span(span))
        resource_spans = []
        for resource, scopes in grouped.values():
            scope_spans = []
            for scope, encoded in scopes.items():
                text = '{"scope":' + _scope(scope) + ',"spans":[' + ",".join(encoded) + "]"
                if scope is not None and scope.schema_url:
                    text += ',"schemaUrl":' + _esc(scope.schema_url)
                scope_spans.append(text + "}")
            res = _attributes(resource.attributes).lstrip(",")
            text = '{"resource":{' + res + '},"scopeSpans":[' + ",".join(scope_spans) + "]"
            if resource.schema_url:
                text += ',"schemaUrl":' + _esc(resource.schema_url)
            resource_spans.append(text + "}")
        return '{"resourceSpans":[' + ",".join(resource_spans) + "]}"
    except (_Unsupported, AttributeError, TypeError, ValueError):
        return None
