"""The fast path for pptrace's own JSON lines: decode each distinct span shape once.

A traced run writes millions of spans that differ only in a few numbers (ids, times, sequence
number, monotonic clock, duration). Parsing every span's JSON and attributes costs hundreds of
microseconds in CPython; this path cuts those numbers out of the span's text with ``str.find``,
and uses the rest of the text as a key into a cache of decoded template events. A hit builds the
event from the template and the numbers; a miss parses the span the ordinary way, checks that
the numbers it cut out are exactly the ones the decoder read, and caches the result. A line
whose every span is of a cached shape is read in one pass instead (``pptrace.load.fast_line``,
told of each shape cached here); a line with any other span is read span by span, here.

It is only an accelerator: a line it does not recognise (several resources or scopes, a span it
cannot split, base64 ids, anything unusual) returns False and is read by the ordinary path.

Why cutting text is sound: JSON escapes every quote inside a string, so a marker such as
``"spanId":"`` can only match structure; the cut values are checked to be plain digits or
letters, so a hit's text equals, outside the cut values, a span that was fully parsed.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pptrace.load import fast_markers as cuts
from pptrace.load import fingerprints
from pptrace.load.fast_line import KnownShapes, spans_pattern
from pptrace.load.fast_markers import Fallback as _Fallback
from pptrace.load.fast_markers import attr
from pptrace.load.fast_messages import OWN_SPAN, MessageShapes
from pptrace.load.layout import (
    DROPPED_BEFORE,
    DURATION_NS,
    MONO_NS,
    SEQ,
    START_NS,
    THREAD_ID,
    with_numbers,
)
from pptrace.load.otlp import (
    BadShape,
    SpanSink,
    attributes,
    for_each_otlp_span,
    otlp_span,
    resource_attributes,
    service_of,
    to_int,
)
from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo

__all__ = ["EventSink", "FastLines"]


class EventSink(SpanSink, Protocol):
    """What the fast path hands its events to (``pptrace.load.builder.TraceBuilder``)."""

    def add_events(self, events: Sequence[Event]) -> None: ...

    def add_event(self, ev: Event) -> None: ...

    def add_message(self, rank: RankInfo, message: MessageEvent) -> None: ...

    def add_messages(self, rank: RankInfo, messages: Sequence[MessageEvent],
                     spans: int) -> None: ...

    def problem(self, message: str, line: int | None = None) -> None: ...

    def decode_event(self, attrs: Mapping[str, Any], start_ns: int, end_ns: int,
                     resource: Mapping[str, Any], name: str = "") -> Event: ...

_SPANS = b'"spans":['
_SPLIT = b',{"traceId":"'
_HEAD = b'{"traceId":"'
_TAIL = re.compile(rb'\](?:,"schemaUrl":"[^"\\]*")?\}\](?:,"schemaUrl":"[^"\\]*")?\}\]\}\s*\Z')
_TAIL_WINDOW = 400


_MAX_TEMPLATES = 50_000
_Resource = tuple[int, str, dict[str, Any]]  # (number, service name, attributes)


def _int_attr_re(key: str) -> bytes:
    return re.escape(attr(key)) + rb'(\d{1,20})"\}\},'


# pptrace's own layout today: ``schema.event_to_attributes`` writes the attributes that change
# from one call to the next first (seq, mono_ns, then duration_ns where a span has it: version
# 2's trace files leave it to the span's times; then dropped_before and thread.id, which rarely
# change), so one anchored match cuts out the start and end times and those, and the text after
# the match is the same for every span of one shape: it is the template's key (a new drop count
# or thread is a new shape: parsing a number costs more than a lookup). Ids are lower-case hex
# as pptrace writes them; at most 20 digits keep ``int`` within its limits.
_OWN = re.compile(
    rb'[0-9a-f]{32}","spanId":"[0-9a-f]{16}'
    rb'(","name":"pptrace\.(?:attach|extract)","kind":(?:\d{1,3}|"[A-Z_]{1,40}"),'
    rb'"startTimeUnixNano":")(\d{1,20})","endTimeUnixNano":"(\d{1,20})","attributes":\['
    + _int_attr_re(schema.SEQ) + _int_attr_re(schema.MONO_NS)
    + b"(?:" + _int_attr_re(schema.DURATION_NS) + b")?"
)
# A key whose text holds one of these (a duplicate member that the JSON decoder would take
# instead of the cut one) is never cached; error spans (nested "name") are parsed each time.
_NOT_IN_REST = (b'"traceId"', b'"spanId"', b'"name"', b'"kind"', b'"startTimeUnixNano"',
                b'"endTimeUnixNano"', b'"attributes"') + tuple(
    ('"' + k + '"').encode() for k in (schema.SEQ, schema.MONO_NS, schema.DURATION_NS))

_FINGERPRINTS = fingerprints.marker(schema.T_FINGERPRINTS)
_FINGERPRINTS_JOINED = fingerprints.joined_marker(schema.T_FINGERPRINTS)  # schema version 3
# Where ``_OWN``'s span name goes on after "pptrace." (32 + 12 + 16 + 18 characters in), and the
# letters a message span's name has there.
_NAME_AT = len(b'0' * 32 + b'","spanId":"' + b'0' * 16 + b'","name":"pptrace.')
_MESSAGE_LETTERS = (b"s", b"r")
_LINE_SPANS = spans_pattern(_OWN, OWN_SPAN)  # a line of known shapes in one pass
_new_event = tuple.__new__


class FastLines:
    """One loader run's template cache; ``line`` reads a line or says it cannot."""

    def __init__(self, builder: EventSink, shared: dict[Any, Any] | None = None) -> None:
        self.builder = builder
        self.shared = shared  # the loader's tuples by value (``fingerprints.put_back``)
        # key -> (template event, has duration attribute), or None: not cacheable.
        self.templates: dict[bytes, tuple[Event, bool] | None] = {}
        # pptrace's own layout (``_OWN``): (resource number, name and kind, text after the changing
        # values) -> index into ``shapes``: the template event, or None when it cannot be cached.
        self.own: dict[tuple[int, bytes, bytes], int] = {}
        self.shapes: list[Event | None] = []
        self.rows: array[int] | None = None  # see ``_spans``
        # [row number, its values' fingerprints] for each fingerprinted row (``_spans``)
        self.prints: list[list[Any]] = []
        # The text before the spans -> its resource: number (a part of every template's key:
        # schema version 2 keeps the process's constants there), service name, attributes.
        self.heads: dict[bytes, _Resource] = {}
        self.hits = self.misses = 0
        self.known = KnownShapes(_LINE_SPANS)  # what a line of known shapes is read by
        # message spans' templates (``fast_messages``)
        self.messages = MessageShapes(shared, self.known.learned_message)

    def _resource(self, head: bytes, tail: bytes) -> _Resource:
        known = self.heads.get(head)
        if known is None:
            try:
                doc = json.loads(head + tail)
                for_each_otlp_span(doc, _NoSpans())
                attrs = resource_attributes(doc["resourceSpans"][0])
            except (ValueError, KeyError, IndexError, TypeError, BadShape, UnicodeDecodeError):
                raise _Fallback from None
            known = self.heads[head] = (len(self.heads), service_of(attrs), attrs)
        return known

    def line(self, text: bytes) -> bool:
        """Read one JSON line into the builder; False when the ordinary path must read it.

        The line is split into spans at ``,{"traceId":"`` in one pass. That is sound because a
        quote inside a JSON string is escaped, and because every span is checked to be exactly
        one span object: a learned span is parsed on its own (a resource or scope boundary
        inside it fails that), and a cached one equals a learned one outside the cut digits.
        """
        start = text.find(_SPANS)
        if start < 0:
            return False
        body_start = start + len(_SPANS)
        if not text.startswith(_HEAD, body_start) or text.find(_SPLIT, 0, body_start) >= 0:
            return False
        window = max(body_start, len(text) - _TAIL_WINDOW)
        m = _TAIL.search(text, window)
        if m is None:
            return False
        try:
            res = self._resource(text[:body_start], m.group(0))
            if self._known(text, body_start, m.start(), res[0]):
                return True
            chunks = text.split(_SPLIT)
            chunks[0] = chunks[0][body_start + len(_HEAD):]
            chunks[-1] = chunks[-1][: m.start() - len(text)]  # the tail's length, from the end
            events, others = self._spans(chunks, res)
        except _Fallback:
            return False
        _, service, resource = res
        b = self.builder
        b.add_events(events)
        try:
            for item in others:
                if isinstance(item, dict):
                    otlp_span(item, service, resource, b)
                elif type(item) is tuple:  # (rank, *messages) of a cached message shape
                    b.add_message(*item)
                else:
                    b.add_event(item)
        except (BadShape, RecursionError) as exc:  # as the ordinary path reports a bad line
            reason = "JSON nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            b.problem(f"{reason}; line skipped")
        return True

    def _known(self, text: bytes, body_start: int, tail_start: int, head: int) -> bool:
        """Read a line whose every span is of a known shape in one pass (``fast_line``)."""
        msg = self.messages
        try:
            read = self.known.read(text, body_start, tail_start, head, self.rows, self.prints,
                                   msg.rows, msg.prints, self.shared)
        except OverflowError:  # a row beyond int64: each span as the per-span path says
            return False
        if read is None:
            return False
        b = self.builder
        b.add_events(read.events)
        for rank, messages, spans in read.messages:
            b.add_messages(rank, messages, spans)
        self.hits += read.hits
        return True

    def _spans(self, chunks: list[bytes], res: _Resource) -> tuple[list[Event], list[Any]]:
        """(events from cached shapes, everything else: decoded events and raw spans).

        With ``rows`` set (a loader worker, ``pptrace.load.worker``), a cached span becomes a
        row ``(shape index, seq, start, mono, duration)`` of int64s in it instead of an event
        (40 bytes, not about 200 for a tuple): the process that receives the rows builds the
        events. A span's content fingerprints are cut out of its shape's text like its numbers
        (``pptrace.load.fingerprints``), and go beside its row in ``prints``.
        """
        events: list[Event] = []
        others: list[Any] = []
        own, shapes, rows, prints = self.own, self.shapes, self.rows, self.prints
        match = _OWN.match
        cut_prints = fingerprints.cut
        head, _, resource = res
        for chunk in chunks:
            # pptrace's writer puts the name's first letter after "pptrace." here: a message
            # span's (send, recv) skips the attach/extract pattern, which would fail on it.
            m = None if chunk[_NAME_AT:_NAME_AT + 1] in _MESSAGE_LETTERS else match(chunk)
            if m is None:
                item = self.messages.span(chunk, head, resource)
                if item is None:
                    raise _Fallback
                if item is not True:  # (True: taken as a row, ``MessageShapes.rows``)
                    others.append(self._older(chunk, head, resource) if item is False else item)
                continue
            rest, fps = cut_prints(chunk[m.end():], _FINGERPRINTS, _FINGERPRINTS_JOINED)
            key = (head, m[1], rest)
            i = own.get(key)
            if i is None:
                others.append(self._learn_own(chunk, key, m, fps, resource))
                continue
            t = shapes[i]
            if t is None:  # a known shape that cannot be cached
                others.append(self._parse(chunk))
                continue
            _, begin, end, seq, mono, dur = m.groups()
            start = int(begin)
            duration = int(dur) if dur is not None else max(0, int(end) - start)
            if rows is not None:
                try:  # (fromlist adds the whole row or, failing, none of it)
                    rows.fromlist([i, int(seq), start, int(mono), duration])
                    if fps is not None:
                        prints.append([len(rows) // 5 - 1, fps])
                    continue
                except OverflowError:  # beyond int64 (20 digits pass the cut): as an event
                    pass
            ev = with_numbers(t, int(seq), start, int(mono), duration)
            events.append(ev if fps is None else
                          ev._replace(tensors=fingerprints.put_back(ev.tensors, fps,
                                                                    self.shared)))
        self.hits += len(chunks) - len(others)
        return events, others

    def _learn_own(self, chunk: bytes, key: tuple[int, bytes, bytes], m: re.Match[bytes],
                   fps: list[str] | None, resource: Mapping[str, Any]) -> Any:
        """Parse a span of pptrace's own layout; cache it when the cut values (and
        fingerprints) check out."""
        self.misses += 1
        span = self._parse(chunk)
        own, shapes = self.own, self.shapes
        if len(own) >= _MAX_TEMPLATES:
            own.clear()  # (rows already taken keep their indices into ``shapes``)
        own[key] = len(shapes)
        shapes.append(None)
        rest = key[2]
        if any(marker in rest for marker in _NOT_IN_REST):
            return span
        decoded = self._decode(span, resource)
        if decoded is None:
            return span
        ev = decoded[0]
        _, begin, end, seq, mono, dur = m.groups()
        duration = int(dur) if dur is not None else max(0, int(end) - int(begin))
        try:
            prints_agree = fps is None or fingerprints.put_back(ev.tensors, fps) == ev.tensors
        except ValueError:  # not one fingerprint per value
            prints_agree = False
        if prints_agree and (ev.seq, ev.start_ns, ev.mono_ns, ev.duration_ns) == (
            int(seq), int(begin), int(mono), duration
        ):
            shapes[-1] = ev
            self.known.learned_event(key[0], key[1], rest, fps is not None, len(shapes) - 1, ev)
        return ev

    def _decode(self, span: dict[str, Any], resource: Mapping[str, Any]
                ) -> tuple[Event, dict[str, Any]] | None:
        """(event, attributes) as the ordinary path decodes the span, or None to leave it to
        that path."""
        name = span.get("name")
        if name not in (schema.SPAN_ATTACH, schema.SPAN_EXTRACT):
            return None
        try:
            attrs = attributes(span.get("attributes", []))
            begin = to_int(span.get("startTimeUnixNano", 0), "start")
            end = to_int(span.get("endTimeUnixNano", begin), "end")
            return self.builder.decode_event(attrs, begin, end, resource, name), attrs
        except SchemaVersionError as exc:
            if exc.path is not None:
                raise  # an unsupported schema version: fatal, as on the ordinary path
            return None  # the ordinary path reports it
        except (BadShape, RecursionError):
            return None

    def _older(self, chunk: bytes, head: int, resource: Mapping[str, Any]) -> Any:
        """A span in another layout (pptrace before attributes were reordered, or another
        writer): cut by markers, as ``fast_markers`` say."""
        templates = self.templates
        usual = cuts.cut_usual(chunk)
        key, v = usual if usual is not None else cuts.cut(chunk)
        key = b"%d\0%b" % (head, key)
        try:
            hit = templates[key]
        except KeyError:
            self.misses += 1
            return self._learn(chunk, key, v, resource)
        if hit is None:
            return self._parse(chunk)
        self.hits += 1
        t, has_duration = hit
        start_s, end_s, seq_s, thread_s, mono_s, dur_s, dropped_s = v
        begin = int(start_s)  # type: ignore[arg-type]
        if has_duration:
            duration = int(dur_s)  # type: ignore[arg-type]
        else:
            duration = max(0, int(end_s) - begin) if end_s else 0
        values: list[Any] = list(t)
        values[SEQ] = int(seq_s)  # type: ignore[arg-type]
        values[START_NS] = begin
        values[DURATION_NS] = duration
        if mono_s:
            values[MONO_NS] = int(mono_s)
        if thread_s:
            values[THREAD_ID] = int(thread_s)
        if dropped_s:
            values[DROPPED_BEFORE] = int(dropped_s)
        event: Event = _new_event(Event, values)
        return event

    @staticmethod
    def _parse(chunk: bytes) -> dict[str, Any]:
        try:
            span = json.loads(_HEAD + chunk)
        except (ValueError, RecursionError):
            raise _Fallback from None  # not at span boundaries, or for the ordinary path to say
        if not isinstance(span, dict):
            raise _Fallback
        return span

    def _learn(self, chunk: bytes, key: bytes, v: list[bytes | None],
               resource: Mapping[str, Any]) -> Any:
        """Parse a span the ordinary way; cache it as a template when the cut checks out."""
        span = self._parse(chunk)
        if len(self.templates) >= _MAX_TEMPLATES:
            self.templates.clear()
        self.templates[key] = None
        if v[cuts.START] is None:
            return span
        if chunk.count(cuts.SPAN_ID) != 1 or any(
            chunk.count(m) != 1
            for m, value in zip(cuts.MARKERS, v, strict=True) if value is not None
        ):
            return span
        decoded = self._decode(span, resource)
        if decoded is None:
            return span
        ev, attrs = decoded
        has_duration = schema.DURATION_NS in attrs
        # Every value cut out must be the one the decoder read; a value not cut out (a marker
        # absent, or left in the key) comes from the template, as it did for this span.
        checks = (
            (ev.seq, v[cuts.SEQ]), (ev.start_ns, v[cuts.START]), (ev.mono_ns, v[cuts.MONO]),
            (ev.dropped_before, v[cuts.DROPPED]), (ev.thread_id, v[cuts.THREAD]),
        )
        if v[cuts.SEQ] is not None and all(
            value is None or got == int(value) for got, value in checks
        ) and (
            not has_duration or ev.duration_ns == int(v[cuts.DUR] or 0)
        ) and (has_duration or v[cuts.END] is not None or ev.duration_ns == 0):
            self.templates[key] = (ev, has_duration)
        return ev


class _NoSpans:
    """A sink for validating a line's head: it holds no spans."""

    def span(self, *args: Any) -> None:
        raise BadShape("unexpected span")
