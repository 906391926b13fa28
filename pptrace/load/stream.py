"""Reading one large JSON document span by span, instead of building its whole object tree.

``json.loads`` of a trace document needs about ten times the document's size in memory. Here
the document's text is walked along the path to its spans (``resourceSpans[].scopeSpans[].
spans[]`` for OTLP and Jaeger's v3 API, ``data[]`` for Jaeger JSON) and only one span (one
Jaeger trace) at a time is decoded, with the standard library's own decoder
(``raw_decode``); everything off that path is decoded whole (it is small: a resource, a
scope). Memory is about twice the document's size: its bytes while decoding, then its text.

    stream_document(text, sink)   # json.JSONDecodeError (with its position) or BadShape
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pptrace.load.jaeger import for_each_jaeger_span
from pptrace.load.otlp import BadShape, SpanSink, attributes, otlp_span, service_of

__all__ = ["stream_document"]

_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _Walker:
    """Position-keeping helpers over one document's text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i

    def expect(self, i: int, char: str, what: str) -> int:
        i = self.ws(i)
        if self.text[i : i + 1] != char:
            raise json.JSONDecodeError(f"expected {what}", self.text, i)
        return i + 1

    def value(self, i: int) -> tuple[Any, int]:
        return _decoder.raw_decode(self.text, self.ws(i))

    def peek(self, i: int) -> tuple[str, int]:
        i = self.ws(i)
        return self.text[i : i + 1], i

    def members(self, i: int) -> Any:
        """Yield (key, index of its value) for an object starting at ``i``; the caller
        consumes each value and sends back the index after it."""
        i = self.expect(i, "{", "an object")
        char, i = self.peek(i)
        if char == "}":
            return i + 1
        while True:
            i = self.expect(i, '"', "a key")
            key, i = _scanstring(self.text, i)
            i = self.expect(i, ":", "':'")
            i = yield key, i
            char, i = self.peek(i)
            if char == "}":
                return i + 1
            i = self.expect(i, ",", "',' or '}'")

    def elements(self, i: int, what: str) -> Any:
        """Like ``members`` for an array: yield the index of each element."""
        char, i = self.peek(i)
        if char != "[":
            raise BadShape(f"'{what}' should be a list")
        i += 1
        char, i = self.peek(i)
        if char == "]":
            return i + 1
        while True:
            i = yield i
            char, i = self.peek(i)
            if char == "]":
                return i + 1
            i = self.expect(i, ",", "',' or ']'")


def _drive(gen: Any, handle: Callable[..., int]) -> int:
    """Run a members/elements generator, handing each item to ``handle``; return the end."""
    try:
        item = next(gen)
        while True:
            item = gen.send(handle(*item) if isinstance(item, tuple) else handle(item))
    except StopIteration as stop:
        return int(stop.value)


def _resource_spans(w: _Walker, i: int, sink: SpanSink) -> int:
    """Walk one ``resourceSpans`` item at ``i``, handing its spans to ``sink``."""
    service: list[str] = []
    resource: dict[str, Any] = {}
    pending: list[Any] = []  # spans met before their resource (rare): held until it comes

    def span(j: int) -> int:
        value, end = w.value(j)
        if service:
            otlp_span(value, service[0], resource, sink)
        else:
            pending.append(value)
        return end

    def scope_member(key: str, j: int) -> int:
        if key == "spans":
            return _drive(w.elements(j, "spans"), span)
        return int(w.value(j)[1])

    def scope_spans(j: int) -> int:
        return _drive(w.members(j), scope_member)

    def member(key: str, j: int) -> int:
        if key in ("scopeSpans", "scope_spans", "instrumentationLibrarySpans"):
            return _drive(w.elements(j, key), scope_spans)
        value, end = w.value(j)
        if key == "resource":
            attrs = attributes(value.get("attributes", [])) if isinstance(value, dict) else {}
            resource.update(attrs)
            service[:] = [service_of(attrs)]
            for held in pending:
                otlp_span(held, service[0], resource, sink)
            pending.clear()
        return int(end)

    end = _drive(w.members(i), member)
    for held in pending:
        otlp_span(held, "", resource, sink)
    return end


def _resource_spans_list(w: _Walker, i: int, key: str, sink: SpanSink) -> int:
    return _drive(w.elements(i, key), lambda j: _resource_spans(w, j, sink))


_TRACE_KEYS = {"resourceSpans", "resource_spans", "result", "data"}


def stream_document(text: str, sink: SpanSink) -> bool:
    """Hand every span of one JSON document (OTLP, Jaeger v3 API or Jaeger JSON) to ``sink``.

    Returns False, having read nothing, when the document is not a JSON object (the ordinary
    reader then decides what it is).
    """
    w = _Walker(text)
    char, start = w.peek(0)
    if char != "{":
        return False
    seen: set[str] = set()

    def result_member(key: str, i: int) -> int:
        if key in ("resourceSpans", "resource_spans"):
            return _resource_spans_list(w, i, key, sink)
        return int(w.value(i)[1])

    def trace(i: int) -> int:
        value, end = w.value(i)
        for_each_jaeger_span({"data": [value]}, sink)
        return int(end)

    def member(key: str, i: int) -> int:
        seen.add(key)
        if key in ("resourceSpans", "resource_spans"):
            return _resource_spans_list(w, i, key, sink)
        if key == "result":
            char, j = w.peek(i)
            if char != "{":
                raise BadShape("'result' should be an object")
            return _drive(w.members(j), result_member)
        if key == "data":
            return _drive(w.elements(i, "data"), trace)
        return int(w.value(i)[1])

    end = w.ws(_drive(w.members(start), member))
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    if seen and not seen & _TRACE_KEYS:
        raise BadShape(
            "not a trace: expected 'resourceSpans' (OTLP), 'result' (Jaeger v3 API) or "
            f"'data' (Jaeger JSON), found keys {', '.join(sorted(seen)[:5])}"
        )
    return True
