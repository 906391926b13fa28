"""OTLP/JSON lines as one protobuf request's bytes, spans from per-shape templates.

``pptrace.export.otlp_proto.request`` maps a line's JSON onto the official classes field by
field: about 150 µs a span here (a JSON decode, a message a span and its attributes'), most of
what an ``http/protobuf`` or ``grpc`` shipper spends. The lines it posts are the reencoder's,
whose spans repeat but for their ids, times and the integers a template leaves as holes
(``pptrace.export.span_templates.cut_span``). A request is its fields one after the other, and
two serialized requests put end to end are the request holding both's resource spans, so each
line is encoded on its own: a line whose resource and every span have a template is written
from them (a span's ids and times packed, its integer attributes encoded, the envelope's lengths
counted), any other line the long way (``request``), which teaches the templates of its resource
and spans. A span's template is cut from the long way's bytes of a probe (the shape's text with
the ``PROBES`` values, which nothing else in a span can give) where the probe's values are, and
a line's templates are kept only if they give that line's bytes exactly as the long way does.

    body = encode_request(lines)      # the bytes of request(lines).SerializeToString()
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

from pptrace.export.otlp_proto import _span, _varint, request
from pptrace.export.span_templates import (
    HOLE_KEYS,
    P_DROPPED,
    P_DUR,
    P_MONO,
    P_SEQ,
    P_SPAN,
    P_START,
    P_TRACE,
    cut_span,
    line_spans,
)

__all__ = ["encode_request"]

_MASK64 = 2**64 - 1
_OPEN = '{"traceId":"'
#: Each hole's probe value as the JSON text has it.
_PROBE_TEXT = {0: f"{P_TRACE:032x}", 1: f"{P_SPAN:016x}", 2: str(P_START),
               3: str(P_START + P_DUR), 4: str(P_SEQ), 5: str(P_MONO), 6: str(P_DUR),
               7: str(P_DROPPED)}
#: A KeyValue's key field for each integer hole (``KeyValue.key``, field 1).
_KEYS = {hole: b"\x0a" + _varint(len(key)) + key.encode() for hole, key in HOLE_KEYS.items()}
#: Templates remembered; past the limit the encoder starts again with none.
_LIMIT = 1024


def _framed(tag: bytes, data: bytes) -> bytes:
    return tag + _varint(len(data)) + data


def _hole(hole: int, text: str) -> bytes:
    """A hole's field as a Span's bytes hold it, from its JSON text (``ValueError`` if bad)."""
    if hole == 0:
        value = bytes.fromhex(text)
        if len(value) != 16:
            raise ValueError(f"trace id {text!r:.40} is not 16 bytes")
        return b"\x0a\x10" + value  # trace_id, field 1
    if hole == 1:
        value = bytes.fromhex(text)
        if len(value) != 8:
            raise ValueError(f"span id {text!r:.40} is not 8 bytes")
        return b"\x12\x08" + value  # span_id, field 2
    if hole in (2, 3):  # start and end times, fields 7 and 8: fixed64
        return (b"\x39" if hole == 2 else b"\x41") + struct.pack("<Q", int(text))
    # An attribute, field 9: KeyValue(key, value=AnyValue(int_value)), int64 as a varint.
    number = int(text)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"integer {text!r:.40} does not fit int64")
    any_value = b"\x18" + _varint(number & _MASK64)
    return _framed(b"\x4a", _KEYS[hole] + _framed(b"\x12", any_value))


class _SpanTemplate:
    """A shape's Span bytes cut where its holes are: ``parts[0] hole parts[1] ... parts[-1]``."""

    __slots__ = ("holes", "parts")

    def __init__(self, parts: list[bytes], holes: list[int]) -> None:
        self.parts, self.holes = parts, holes


def _span_template(texts: tuple[str, ...], holes: tuple[int, ...]) -> _SpanTemplate | None:
    """The template of the spans cut as ``texts``, from a probe's long-way bytes."""
    if not {0, 1, 2, 3} <= set(holes):
        return None
    pieces = [_OPEN]  # the trace id (hole 0) opens a cut span: value, text, value, ..., text
    for hole, text in zip(holes, texts, strict=True):
        pieces += (_PROBE_TEXT[hole], text)
    data = _span(json.loads("".join(pieces) + "}")).SerializeToString()
    found = []
    for hole in holes:
        probe = _hole(hole, _PROBE_TEXT[hole])
        at = data.find(probe)
        if at < 0 or data.find(probe, at + 1) >= 0:
            return None
        found.append((at, at + len(probe), hole))
    found.sort()
    parts, order, prev = [], [], 0
    for start, end, hole in found:
        parts.append(data[prev:start])
        order.append(hole)
        prev = end
    parts.append(data[prev:])
    return _SpanTemplate(parts, order)


def _render(template: _SpanTemplate, holes: tuple[int, ...], values: list[str]) -> bytes:
    given = dict(zip(holes, values, strict=True))
    out = [template.parts[0]]
    for hole, part in zip(template.holes, template.parts[1:], strict=True):
        out += (_hole(hole, given[hole]), part)
    return b"".join(out)


class _Envelope:
    """A line's request around its spans: the resource spans' and scope spans' other fields."""

    __slots__ = ("resource", "rs_tail", "scope", "ss_tail")

    def __init__(self, head: str) -> None:
        req = request([head + '"spans":[]}]}]}'])
        if len(req.resource_spans) != 1 or len(req.resource_spans[0].scope_spans) != 1:
            raise ValueError("not one resource's and one scope's spans")
        rs = req.resource_spans[0]
        ss = rs.scope_spans[0]
        self.resource = _framed(b"\x0a", rs.resource.SerializeToString()) if rs.HasField(
            "resource") else b""
        self.rs_tail = _framed(b"\x1a", rs.schema_url.encode()) if rs.schema_url else b""
        self.scope = _framed(b"\x0a", ss.scope.SerializeToString()) if ss.HasField(
            "scope") else b""
        self.ss_tail = _framed(b"\x1a", ss.schema_url.encode()) if ss.schema_url else b""

    def wrap(self, spans: list[bytes]) -> bytes:
        scope_spans = self.scope + b"".join(_framed(b"\x12", s) for s in spans) + self.ss_tail
        return _framed(b"\x0a", self.resource + _framed(b"\x12", scope_spans) + self.rs_tail)


class Encoder:
    """The templates of one process's lines (the shipper's: ``encode_request`` uses one)."""

    def __init__(self) -> None:
        self.heads: dict[str, _Envelope | None] = {}
        self.spans: dict[tuple[str, ...], _SpanTemplate | None] = {}
        #: Lines written from templates (for tests and benchmarks).
        self.fast_lines = 0

    def line(self, line: str) -> bytes:
        """One line's request bytes (``ValueError`` where the long way raises it)."""
        found = line_spans(line)
        if found is not None:
            out = self._fast(*found)
            if out is not None:
                self.fast_lines += 1
                return out
        data: bytes = request([line]).SerializeToString()
        if found is not None:
            self._learn(found[0], found[1], data)
        return data

    def _fast(self, head: str, spans: list[str]) -> bytes | None:
        envelope = self.heads.get(head)
        if envelope is None:
            return None
        out = []
        for span in spans:
            cut = cut_span(span)
            template = None if cut is None else self.spans.get(cut.texts)
            if cut is None or template is None:
                return None
            try:
                out.append(_render(template, cut.holes, cut.values))
            except (ValueError, struct.error):  # the long way says what is wrong
                return None
        return envelope.wrap(out)

    def _learn(self, head: str, spans: list[str], data: bytes) -> None:
        """Make the templates ``head`` and ``spans`` lack, each kept only if it gives what the
        long way gave (``data``, the line's bytes)."""
        if len(self.heads) >= _LIMIT or len(self.spans) >= _LIMIT:
            self.heads.clear()
            self.spans.clear()
        singles = [_span(json.loads(_OPEN + span + "}")).SerializeToString() for span in spans]
        if head not in self.heads:
            try:
                envelope: _Envelope | None = _Envelope(head)
            except ValueError:
                envelope = None
            self.heads[head] = envelope if envelope and envelope.wrap(singles) == data else None
        for span, single in zip(spans, singles, strict=True):
            cut = cut_span(span)
            if cut is None or cut.texts in self.spans:
                continue
            try:
                template = _span_template(cut.texts, cut.holes)
                ok = template is not None and _render(template, cut.holes, cut.values) == single
            except (ValueError, KeyError, TypeError, struct.error):
                template, ok = None, False
            self.spans[cut.texts] = template if ok else None


_ENCODER = Encoder()


def encode_request(lines: Sequence[str]) -> bytes:
    """The serialized ``request(lines)``, each line from templates where it can be."""
    return b"".join(_ENCODER.line(line) for line in lines)
