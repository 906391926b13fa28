"""The fast path for message spans (``pptrace.send``, ``pptrace.recv.begin``, ``pptrace.recv``).

A message span differs from the one before it of the same shape (same process, kind, peer, keys
and tensors) only in its ids, its times, its ``seq``, its monotonic clock, its values' content
fingerprints when fingerprinting is on (``pptrace.load.fingerprints``) and, in schema version 1,
its wall-clock start and duration. As ``pptrace.load.fast`` does for attach/extract spans, this
cuts those numbers out of the span's text and uses the rest as the key of a cache of decoded
template events: a hit is the template with the numbers put back (its keys and tensors shared,
so a million messages hold a few thousand tuples); a miss is parsed and decoded the ordinary way
(``pptrace.load.messages.decode_span``), and cached only when the numbers cut out rebuild exactly
the event the decoder made of the whole span. A receive's end that stands for its begin too
(``pptrace.msg.with_begin``, part of the shape's text) gives its begin as the decoder does.

    cache = MessageShapes()
    item = cache.span(chunk, head, resource)  # (rank, *events); a span to parse; False: none
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from pptrace.load import fingerprints
from pptrace.load import messages as load_messages
from pptrace.load.fast_markers import walk
from pptrace.load.otlp import BadShape, attributes, to_int
from pptrace.model import messages as M
from pptrace.model.messages import BadMessageSpan, MessageEvent
from pptrace.model.records import RankInfo
from pptrace.model.schema import compact_against

__all__ = ["OWN_SPAN", "Learned", "MessageShapes", "Parts", "rebuild_rows"]

_HEAD = b'{"traceId":"'
# A message span of pptrace's writer: hex ids, then its name.
_NAME = re.compile(rb'[0-9a-f]{32}","spanId":"([0-9a-f]{16})","name":"pptrace\.'
                   rb'(?:send|recv|recv\.begin)",')


def _attr(key: str) -> bytes:
    return ('{"key":"' + key + '","value":{"intValue":"').encode()


# Cut out of the text, in the order ``model.messages.to_attributes`` writes them; each but the
# times may be absent (version 2 leaves the wall clock and duration to the span's times).
_MARKERS = (b'"startTimeUnixNano":"', b'"endTimeUnixNano":"', _attr(M.SEQ), _attr(M.WALL_NS),
            _attr(M.MONO_NS), _attr(M.DURATION_NS))
_START, _END, _SEQ, _WALL, _MONO, _DUR = range(len(_MARKERS))
# Members the JSON decoder would read a second time (the last one wins): never cached.
# (The span's own "traceId" member is before the text: another one there is a second one.)
_ONCE = (b'"spanId"', b'"name"', b'"startTimeUnixNano"', b'"endTimeUnixNano"',
         b'"attributes"') + tuple(('"' + k + '"').encode() for k in (
             M.SEQ, M.WALL_NS, M.MONO_NS, M.DURATION_NS, M.OP, M.PHASE))
_FIELDS = MessageEvent._fields
_F_SEQ, _F_DUR = _FIELDS.index("seq"), _FIELDS.index("duration_ns")
_FINGERPRINTS = fingerprints.marker(M.T_FINGERPRINTS)
_FINGERPRINTS_JOINED = fingerprints.joined_marker(M.T_FINGERPRINTS)  # schema version 3
_MAX_SHAPES = 50_000
_new = tuple.__new__

# The numbers a span gives are four fields in a row after the op and phase, so an event is
# (its template's op and phase, the numbers, its template's fields after them): one tuple
# built per event.
if _FIELDS[:_F_DUR + 1] != ("op", "phase", "seq", "wall_ns", "mono_ns", "duration_ns"):
    raise ImportError("MessageEvent must begin with op, phase, seq, wall_ns, mono_ns and "
                      f"duration_ns; it begins with {_FIELDS[:_F_DUR + 1]}")
_RECV, _BEGIN = M.MessageOp.RECV, "begin"

# (rank, template event, compact: version 2 rebuilds the wall clock and duration from the times,
# with_begin: the span stands for its receive's begin too, the template's ``Parts``)
_Shape = tuple[RankInfo, MessageEvent, bool, bool, "Parts"]
#: Told of each shape cached: (resource number, key text, learned with fingerprints, index in
#: ``templates``, rank, template, compact, with_begin) (``pptrace.load.fast_line``).
Learned = Callable[[int, bytes, bool, int, RankInfo, MessageEvent, bool, bool], None]


class Parts(NamedTuple):
    """What a shape's events share, taken apart once per shape: an event is the template's
    ``op`` and ``phase``, its four numbers, the template's ``tail``; its begin (when the span
    stands for one) is a receive's begin, seq, wall and monotonic clock, -1, ``begin_tail``."""

    op: M.MessageOp
    phase: str
    tail: tuple[Any, ...]
    begin_tail: tuple[Any, ...] | None

    @classmethod
    def of(cls, template: MessageEvent, with_begin: bool) -> Parts:
        """The parts of ``template`` (and of its begin, ``model.messages.begin_of``)."""
        begin = M.begin_of(template)[_F_DUR + 1:] if with_begin else None
        return cls(template.op, template.phase, template[_F_DUR + 1:], begin)

    def events(self, seq: int, wall: int, mono: int, duration: int
               ) -> tuple[MessageEvent, ...]:
        """The events of one span of this shape: its begin first, when it stands for one."""
        event: MessageEvent = _new(MessageEvent, (self.op, self.phase, seq, wall, mono, duration,
                                                  *self.tail))
        if self.begin_tail is None:
            return (event,)
        begin: MessageEvent = _new(MessageEvent, (_RECV, _BEGIN, seq, wall, mono, -1,
                                                  *self.begin_tail))
        return begin, event


def _number(v: bytes) -> bool:
    return v.isdigit() or (v[:1] == b"-" and v[1:].isdigit())


def _int_re(key: str, sign: bytes = b"") -> bytes:
    return re.escape(_attr(key)) + b"(" + sign + rb'\d{1,20})"\}\},'


# pptrace's own writer, in one anchored match: the ids, name and kind, the times, then the
# numbers ``to_attributes`` writes first (``seq``; version 1's wall clock; ``mono_ns``; a
# duration where the times do not give it back). The text after the match is the shape's.
_OWN = re.compile(
    rb'[0-9a-f]{32}","spanId":"[0-9a-f]{16}(","name":"pptrace\.(?:send|recv|recv\.begin)",'
    rb'"kind":(?:\d{1,3}|"[A-Z_]{1,40}"),"startTimeUnixNano":")(\d{1,20})","endTimeUnixNano":"'
    rb'(\d{1,20})","attributes":\[' + _int_re(M.SEQ) + b"(?:" + _int_re(M.WALL_NS) + b")?"
    + _int_re(M.MONO_NS) + b"(?:" + _int_re(M.DURATION_NS, b"-?") + b")?")
OWN_SPAN = _OWN  # (``pptrace.load.fast_line`` reads whole lines of known shapes with it)


def _cut(chunk: bytes) -> tuple[bytes, list[bytes | None]] | None:
    """(the text without its ids and numbers, the numbers), or None: not cut here."""
    own = _OWN.match(chunk)
    if own is not None:
        name, start, end, seq, wall, mono, dur = own.groups()
        flags = b"%d%d" % (wall is None, dur is None)
        return b"\0".join((b"O" + flags, name, chunk[own.end():])), [
            start, end, seq, wall, mono, dur]
    m = _NAME.match(chunk)
    if m is None:
        return None
    walked = walk(chunk, m.end(1), _MARKERS, _number)
    if walked is None:
        return None
    pieces, values = walked
    if values[_START] is None or values[_END] is None or values[_SEQ] is None:
        return None
    # (the ids cut out: the trace id's 32 characters, the span's)
    return b"\0".join([chunk[32:m.start(1)], *pieces]), values


class MessageShapes:
    """One loader run's cache of message templates.

    With ``rows`` set (a loader worker, ``pptrace.load.worker``), a cached span becomes a row
    ``(shape index, seq, wall, mono, duration)`` of int64s in it, its fingerprints beside it in
    ``prints``, as attach/extract spans do in ``pptrace.load.fast``: the process that receives
    the rows builds the events (``rebuild_rows``).
    """

    def __init__(self, shared: dict[Any, Any] | None = None,
                 learned: Learned | None = None) -> None:
        self.shared = shared
        self.learned = learned
        # (resource number, shape text) -> index into ``templates`` (None: not cacheable)
        self.shapes: dict[tuple[int, bytes], int] = {}
        self.templates: list[_Shape | None] = []
        self.ranks: dict[RankInfo, RankInfo] = {}  # each process's one rank object
        self.rows: array[int] | None = None
        self.prints: list[list[Any]] = []  # [row number, its fingerprints] per fingerprinted row
        self.decodes = 0  # spans decoded the ordinary way (one per shape, and what is not cut)

    def span(self, chunk: bytes, head: int, resource: Mapping[str, Any]
             ) -> tuple[Any, ...] | dict[str, Any] | bool | None:
        """(rank, its events) of a cached shape (True when taken as a row instead), the parsed
        span of a new or uncacheable one (for the ordinary path to read), None when the text is
        not one span object, False when it is not a message span's."""
        cut = _cut(chunk)
        if cut is None:
            return self._parse(chunk) if _NAME.match(chunk) is not None else False
        text, fps = fingerprints.cut(cut[0], _FINGERPRINTS, _FINGERPRINTS_JOINED)
        v = cut[1]
        key = (head, text)
        i = self.shapes.get(key)
        if i is None:
            return self._learn(chunk, key, v, fps, resource)
        shape = self.templates[i]
        if shape is None:
            return self._parse(chunk)
        rows = self.rows
        if rows is not None:
            try:  # (fromlist adds the whole row or, failing, none of it)
                rows.fromlist([i, *_numbers(shape, v)])
                if fps is not None:
                    self.prints.append([len(rows) // 5 - 1, fps])
                return True
            except OverflowError:  # beyond int64: as events
                pass
        return (shape[0], *_rebuild(shape, v, fps, self.shared))

    def _parse(self, chunk: bytes) -> dict[str, Any] | None:
        self.decodes += 1
        try:
            span = json.loads(_HEAD + chunk)
        except (ValueError, RecursionError):
            return None
        return span if isinstance(span, dict) else None

    def _learn(self, chunk: bytes, key: tuple[int, bytes], v: list[bytes | None],
               fps: list[str] | None, resource: Mapping[str, Any]) -> dict[str, Any] | None:
        """Parse a new shape's span; cache it when the numbers cut out rebuild its event."""
        span = self._parse(chunk)
        if len(self.shapes) >= _MAX_SHAPES:
            self.shapes.clear()  # (rows already taken keep their indices into ``templates``)
        self.shapes[key] = len(self.templates)
        self.templates.append(None)
        if span is None or b'"traceId"' in chunk or any(chunk.count(m) > 1 for m in _ONCE):
            return span
        try:
            attrs = attributes(span.get("attributes", []))
            start = to_int(span.get("startTimeUnixNano", 0), "start")
            end = to_int(span.get("endTimeUnixNano", start), "end")
            rank, _, events = load_messages.decode_span(span["name"], attrs, resource, start,
                                                        end)
        except (BadShape, BadMessageSpan, RecursionError, KeyError, TypeError):
            return span  # the ordinary path reports it
        compact = M.OP not in attrs and compact_against(resource) is not None
        ev, with_begin = events[-1], len(events) == 2
        # One rank object per process, so the builder sees its last process again by identity.
        rank = self.ranks.setdefault(rank, rank)
        shape = (rank, ev, compact, with_begin, Parts.of(ev, with_begin))
        try:
            same = _rebuild(shape, v, fps) == tuple(events)
        except ValueError:  # not one fingerprint per value
            same = False
        if same:
            self.templates[-1] = shape
            if self.learned is not None:
                self.learned(key[0], key[1], fps is not None, len(self.templates) - 1, rank, ev,
                             compact, with_begin)
        return span  # (read the ordinary way once: its version checked, its process noted)


def _numbers(shape: _Shape, v: list[bytes | None]) -> tuple[int, int, int, int]:
    """(seq, wall clock, monotonic clock, duration) of one span of ``shape``, as
    ``from_attributes`` derives them."""
    t, compact = shape[1], shape[2]
    start = int(v[_START])  # type: ignore[arg-type]
    wall, mono, dur = v[_WALL], v[_MONO], v[_DUR]
    if dur is not None:
        duration = int(dur)
    elif compact:
        duration = -1 if t.phase == "begin" else int(v[_END]) - start  # type: ignore[arg-type]
    else:
        duration = -1
    return (int(v[_SEQ]), int(wall) if wall is not None else (start if compact else 0),  # type: ignore[arg-type]
            int(mono) if mono is not None else t.mono_ns, duration)


def _rebuild(shape: _Shape, v: list[bytes | None], fps: list[str] | None,
             shared: dict[Any, Any] | None = None) -> tuple[MessageEvent, ...]:
    """The events of one span (its receive's begin first, where it stands for one): the
    template with the span's numbers (and fingerprints), as ``from_attributes`` derives them."""
    events = shape[4].events(*_numbers(shape, v))
    if fps is None:
        return events
    *begin, event = events  # (a begin carries no tensors)
    return (*begin, event._replace(tensors=fingerprints.put_back(event.tensors, fps, shared)))


def rebuild_rows(templates: Sequence[tuple[MessageEvent, bool] | None], rows: Sequence[int],
                 prints: Sequence[list[Any]], lists: Sequence[list[MessageEvent] | None],
                 shared: dict[Any, Any] | None = None) -> None:
    """Add the events ``MessageShapes`` rows stand for to ``lists`` (per shape index, the list
    of its process), in row order, a receive's begin before its end where the span stood for
    both; ``templates``: per shape index, its template and whether it stands for its begin
    too. ValueError, IndexError or TypeError when malformed."""
    parts = [None if t is None else Parts.of(*t) for t in templates]  # once per shape
    printed = dict(prints)  # row -> its fingerprints
    if printed and not 0 <= max(printed) < len(rows) // 5:
        raise IndexError("a fingerprint names a row that was not sent")
    it = iter(rows)
    row = -1
    for i, seq, wall, mono, dur in zip(it, it, it, it, it, strict=True):
        shape, bucket = parts[i], lists[i]
        if shape is None or bucket is None:
            raise ValueError("a row names a message shape that was not cached")
        op, phase, tail, begin_tail = shape
        event: MessageEvent = _new(MessageEvent, (op, phase, seq, wall, mono, dur, *tail))
        if printed:
            row += 1
            fps = printed.get(row)
            if fps is not None:
                event = event._replace(tensors=fingerprints.put_back(event.tensors, fps,
                                                                      shared))
        if begin_tail is None:
            bucket.append(event)
        else:
            bucket += (_new(MessageEvent, (_RECV, _BEGIN, seq, wall, mono, -1, *begin_tail)),
                       event)
