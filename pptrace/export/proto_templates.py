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

A writer that knows a span's values as numbers (the shipper's reencoder, which read them from
the trace file) writes the span from them with no text between: ``span_template`` gives the
template of the spans it writes as it wrote a probe, ``envelope`` the request around a line of
them, each kept only if it gives the long way's bytes of a sample; ``encode_request`` passes
what they wrote (bytes) through.

    body = encode_request(lines)      # the bytes of request(lines).SerializeToString()
    body = template.write([trace_id, span_id, start, end, seq, mono, duration, dropped])
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

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
    PROBE_RE,
    cut_span,
    line_spans,
)

__all__ = ["Encoder", "Envelope", "SpanTemplate", "encode_request", "envelope", "span_template"]

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


def _id(value: bytes, tag: bytes, size: int) -> bytes:
    if len(value) != size:
        raise ValueError(f"an id of {len(value)} bytes where {size} go")
    return tag + value


def _int_attribute(hole: int) -> Any:
    """The field of integer hole ``hole``: an attribute, field 9: KeyValue(key,
    value=AnyValue(int_value)), int64 as a varint."""
    key = _KEYS[hole]
    # What goes before a varint of n bytes (1 to 10): the lengths framing it, counted once.
    before = [b""] + [_framed(b"\x4a", key + _framed(b"\x12", b"\x18" + b"\x00" * n))[:-n]
                      for n in range(1, 11)]

    def field(number: int) -> bytes:
        if not -(2**63) <= number < 2**63:
            raise ValueError(f"integer {number} does not fit int64")
        value = _varint(number & _MASK64)
        return before[len(value)] + value

    return field


_TIME = struct.Struct("<Q").pack
#: Each hole's field as a Span's bytes hold it, from its value (ids as bytes, the rest as
#: integers; ``ValueError`` or ``struct.error`` where it cannot be encoded).
_FIELDS: tuple[Any, ...] = (
    lambda v: _id(v, b"\x0a\x10", 16),  # trace_id, field 1
    lambda v: _id(v, b"\x12\x08", 8),  # span_id, field 2
    lambda v: b"\x39" + _TIME(v),  # start time, field 7: fixed64
    lambda v: b"\x41" + _TIME(v),  # end time, field 8: fixed64
    *(_int_attribute(hole) for hole in range(4, 8)),
)


def _value(hole: int, text: str) -> bytes | int:
    """A hole's value from its JSON text (``ValueError`` if it is none)."""
    return bytes.fromhex(text) if hole < 2 else int(text)


class SpanTemplate:
    """A shape's Span bytes cut where its holes are: ``parts[0] hole parts[1] ... parts[-1]``."""

    __slots__ = ("fields", "head", "holes", "parts")

    def __init__(self, parts: list[bytes], holes: list[int]) -> None:
        self.parts, self.holes = parts, holes
        self.head = parts[0]
        self.fields = [(hole, _FIELDS[hole], part) for hole, part in zip(holes, parts[1:],
                                                                        strict=True)]

    def write(self, values: Sequence[Any]) -> bytes:
        """The span's bytes from its values, by hole (``ValueError`` or ``struct.error`` where
        one cannot be encoded)."""
        out = [self.head]
        for hole, field, part in self.fields:
            out += (field(values[hole]), part)
        return b"".join(out)


def _span_template(texts: tuple[str, ...], holes: tuple[int, ...]) -> SpanTemplate | None:
    """The template of the spans cut as ``texts``, from a probe's long-way bytes."""
    if not {0, 1, 2, 3} <= set(holes):
        return None
    pieces = [_OPEN]  # the trace id (hole 0) opens a cut span: value, text, value, ..., text
    for hole, text in zip(holes, texts, strict=True):
        pieces += (_PROBE_TEXT[hole], text)
    return _cut_bytes(_span(json.loads("".join(pieces) + "}")).SerializeToString(), holes)


def _cut_bytes(data: bytes, holes: Sequence[int]) -> SpanTemplate | None:
    """A probe's long-way bytes cut where the fields of ``holes`` hold its values."""
    found = []
    for hole in holes:
        probe = _FIELDS[hole](_value(hole, _PROBE_TEXT[hole]))
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
    return SpanTemplate(parts, order)


def _render(template: SpanTemplate, holes: tuple[int, ...], values: list[str]) -> bytes:
    given: list[Any] = [None] * 8
    for hole, text in zip(holes, values, strict=True):
        given[hole] = _value(hole, text)
    return template.write(given)


def span_template(probe: str, sample: str, values: Sequence[Any]) -> SpanTemplate | None:
    """The template of the spans a writer writes as it wrote ``probe`` (a span less its opening
    and closing, as ``line_spans`` gives it, with the ``PROBES`` values where the writer puts
    its own); None unless ``probe`` is cut exactly there (so every span so written is cut
    alike, whatever its values) and the template writes ``sample``, such a span of
    ``values`` (by hole), as the long way does.

    A cut value that is no probe's is the writer's own constant (a version 1 span without
    drops says ``dropped_before`` 0): it stays in the template's bytes as the probe has it.
    """
    cut, got = cut_span(probe), cut_span(sample)
    if cut is None or got is None or got.texts != cut.texts:
        return None
    holes = [hole for hole, value in zip(cut.holes, cut.values, strict=True)
             if value == _PROBE_TEXT[hole]]
    if not {0, 1, 2, 3} <= set(holes) or len(PROBE_RE.findall(probe)) != len(holes):
        return None  # a value written where no cut is (or not the whole of a cut value)
    try:
        template = _cut_bytes(_span(json.loads(_OPEN + probe + "}")).SerializeToString(), holes)
        ok = template is not None and template.write(values) == _span(
            json.loads(_OPEN + sample + "}")).SerializeToString()
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return template if ok else None


class Envelope:
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
        self.heads: dict[str, Envelope | None] = {}
        self.spans: dict[tuple[str, ...], SpanTemplate | None] = {}
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
                envelope: Envelope | None = Envelope(head)
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


def envelope(line: str) -> Envelope | None:
    """The request around the spans of lines with ``line``'s resource and scope (what comes
    before its spans); None unless it wraps ``line``'s spans as the long way does."""
    found = line_spans(line)
    if found is None:
        return None
    try:
        made = Envelope(found[0])
        singles = [_span(json.loads(_OPEN + span + "}")).SerializeToString()
                   for span in found[1]]
        ok = made.wrap(singles) == request([line]).SerializeToString()
    except (ValueError, KeyError, TypeError):
        return None
    return made if ok else None


_ENCODER = Encoder()


def encode_request(lines: Sequence[str | bytes]) -> bytes:
    """The serialized ``request(lines)``, each line from templates where it can be; a line
    already written (bytes: ``span_template`` and ``envelope``'s) as it is."""
    return b"".join(line if isinstance(line, bytes) else _ENCODER.line(line) for line in lines)
