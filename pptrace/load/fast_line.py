"""One pass over a line of pptrace's own spans whose every shape is known.

The fast path (``pptrace.load.fast``, ``pptrace.load.fast_messages``) reads a span by splitting
the line at span boundaries, matching the span's changing numbers with a regular expression,
cutting out its fingerprints and looking the rest of its text up in a cache of shapes. Once a
run's shapes are learned, almost every line holds only known shapes, and each of those steps is
a Python call per span. This module reads such a line in one ``re.split`` (C: each span's
numbers and the text after them, the key), one dictionary look-up and a few ``int`` calls per
span; any span it does not know gives the line back to the per-span path, which learns it.

    known = KnownShapes(spans_pattern(fast._OWN, fast_messages.OWN_SPAN))
    known.learned_event(head, name, rest, with_fingerprints, index, template)  # on learning
    read = known.read(text, body_start, tail_start, head, rows)  # None: read it span by span

Why it reads what the per-span path reads: the pattern is that path's two patterns (attach and
extract spans; message spans) behind the ``{"traceId":"`` that opens a span, so each span
matches as it would there. A key is a learned span's text after the match, with the comma
that ends it: learned spans never hold ``,{"traceId":"`` (the per-span path splits there), so
a line whose every rest is a learned one is split at exactly the per-span path's boundaries.
A shape learned with fingerprints is known by its text with them cut out
(``pptrace.load.fingerprints``), as on the per-span path. A span whose numbers do not fit an
int64 row (a worker's, ``pptrace.load.worker``) gives the line back too.
"""

from __future__ import annotations

import re
from array import array
from typing import Any, NamedTuple

from pptrace.load import fingerprints
from pptrace.load.fast_messages import Parts
from pptrace.load.layout import parts_of
from pptrace.model import messages as M
from pptrace.model import schema
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo

__all__ = ["KnownShapes", "Read", "spans_pattern"]

_HEAD = b'{"traceId":"'
_IDS = rb'[0-9a-f]{32}","spanId":"[0-9a-f]{16}'  # (how both span patterns begin)
_MAX_SHAPES = 50_000
_new = tuple.__new__
_EVENT_GROUPS = 6  # name and kind, start, end, seq, mono, duration (``fast._OWN``)
_MESSAGE_GROUPS = 7  # name and kind, start, end, seq, wall, mono, duration
_RECV, _BEGIN = M.MessageOp.RECV, "begin"


def spans_pattern(event: re.Pattern[bytes], message: re.Pattern[bytes]) -> re.Pattern[bytes]:
    """The pattern that splits a line into spans: a span's opening, then ``event`` (pptrace's
    attach/extract spans) or ``message`` (its message spans), as the per-span path tries them
    (ValueError when they no longer have the groups and beginning this module reads)."""
    if (event.groups, message.groups) != (_EVENT_GROUPS, _MESSAGE_GROUPS):
        raise ValueError("the span patterns' groups changed: update pptrace.load.fast_line")
    # Both begin with the same ids (fixed lengths, one way to match them): matched once, not
    # again for a message span after the attach/extract branch fails on its name.
    if not (event.pattern.startswith(_IDS) and message.pattern.startswith(_IDS)):
        raise ValueError("the span patterns no longer begin with the ids")
    return re.compile(re.escape(_HEAD) + _IDS + b"(?:" + event.pattern[len(_IDS):] + b"|"
                      + message.pattern[len(_IDS):] + b")")


class Read(NamedTuple):
    """What one line gave: its attach/extract events, its message events as (rank, events, spans
    they came from) in order, and how many spans the per-span path would count as hits."""

    events: list[Event]
    messages: list[tuple[RankInfo, list[MessageEvent], int]]
    hits: int


class _EventShape(NamedTuple):
    at: int  # its index in ``FastLines.shapes``: a worker's rows name it
    direction: Any
    rank: RankInfo
    tail: tuple[Any, ...]


class _MessageShape(NamedTuple):
    at: int  # its index in ``MessageShapes.templates``
    rank: RankInfo
    parts: Parts
    compact: bool  # version 2: the wall clock and duration come from the span's times
    begin: bool  # a receive's begin: its duration is -1


class KnownShapes:
    """The shapes learned so far, keyed by the text ``read`` cuts out of a line."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.split = pattern.split
        self.match = pattern.match
        # (as ``fast`` and ``fast_messages`` cut them)
        self.marks = (fingerprints.marker(schema.T_FINGERPRINTS),
                      fingerprints.joined_marker(schema.T_FINGERPRINTS))
        self.message_marks = (fingerprints.marker(M.T_FINGERPRINTS),
                              fingerprints.joined_marker(M.T_FINGERPRINTS))
        # (resource number, name and kind, rest) -> shape; ``*_printed``: learned with
        # fingerprints, keyed by the rest with them cut out.
        self.events: dict[tuple[int, bytes, bytes], _EventShape] = {}
        self.events_printed: dict[tuple[int, bytes, bytes], _EventShape] = {}
        # (resource number, name and kind, rest, no wall clock, no duration) -> shape
        self.messages: dict[tuple[int, bytes, bytes, bool, bool], _MessageShape] = {}
        self.messages_printed: dict[tuple[int, bytes, bytes, bool, bool], _MessageShape] = {}

    def learned_event(self, head: int, name: bytes, rest: bytes, printed: bool, index: int,
                      template: Event) -> None:
        """Know an attach/extract shape the per-span path cached: its key's parts there."""
        table = self.events_printed if printed else self.events
        if len(table) >= _MAX_SHAPES:
            table.clear()
        direction, rank, tail = parts_of(template)
        table[(head, name, rest + b",")] = _EventShape(index, direction, rank, tail)

    def learned_message(self, head: int, text: bytes, printed: bool, index: int,
                        rank: RankInfo, template: MessageEvent, compact: bool,
                        with_begin: bool) -> None:
        """Know a message shape the per-span path cached under ``text`` (``fast_messages``:
        ``O``, whether the wall clock and the duration were absent, NUL, name, NUL, rest)."""
        if not text.startswith(b"O"):
            return  # cut by markers (another layout): the per-span path reads those
        flags, name, rest = text.split(b"\0", 2)
        table = self.messages_printed if printed else self.messages
        if len(table) >= _MAX_SHAPES:
            table.clear()
        key = (head, name, rest + b",", flags[1:2] == b"1", flags[2:3] == b"1")
        table[key] = _MessageShape(index, rank, Parts.of(template, with_begin), compact,
                                   template.phase == "begin")

    def read(self, text: bytes, body_start: int, tail_start: int, head: int,
             rows: array[int] | None, prints: list[list[Any]],
             message_rows: array[int] | None, message_prints: list[list[Any]],
             shared: dict[Any, Any] | None) -> Read | None:
        """The line's spans, when each is of a known shape (rows for a worker: into ``rows``
        and ``message_rows``, fingerprints into the prints, as the per-span path puts them);
        None, with nothing taken, when the per-span path must read it."""
        if self.match(text, body_start) is None:
            return None  # (another layout: not split for nothing)
        parts = self.split(text)
        if len(parts[0]) != body_start:
            return None
        tail_len = len(text) - tail_start
        if len(parts[-1]) <= tail_len:
            return None
        parts[-1] = parts[-1][:-tail_len] + b","
        events: list[Event] = []
        messages: list[tuple[RankInfo, list[MessageEvent], int]] = []
        batch: list[MessageEvent] = []
        rank: RankInfo | None = None
        spans = 0
        event_rows: list[int] = []
        event_prints: list[list[Any]] = []
        msg_rows: list[int] = []
        msg_prints: list[list[Any]] = []
        known_events, printed_events = self.events, self.events_printed
        known_messages, printed_messages = self.messages, self.messages_printed
        mark, joined = self.marks
        message_mark, message_joined = self.message_marks
        cut = fingerprints.cut
        put_back = fingerprints.put_back
        it = iter(parts)
        next(it)
        for (name, start, end, seq, mono, dur, m_name, m_start, m_end, m_seq, m_wall, m_mono,
             m_dur, rest) in zip(it, it, it, it, it, it, it, it, it, it, it, it, it, it,
                                 strict=True):
            if name is not None:
                e = known_events.get((head, name, rest))
                fps = None
                if e is None:
                    rest, fps = cut(rest, mark, joined)
                    if fps is None:
                        return None
                    e = printed_events.get((head, name, rest))
                    if e is None:
                        return None
                begin = int(start)
                duration = int(dur) if dur is not None else max(0, int(end) - begin)
                if rows is not None:
                    if fps is not None:
                        event_prints.append([len(event_rows) // 5, fps])
                    event_rows += (e.at, int(seq), begin, int(mono), duration)
                    continue
                ev: Event = _new(Event, (e.direction, int(seq), e.rank, begin, int(mono),
                                         duration, *e.tail))
                events.append(ev if fps is None else
                              ev._replace(tensors=put_back(ev.tensors, fps, shared)))
                continue
            no_wall, no_dur = m_wall is None, m_dur is None
            m = known_messages.get((head, m_name, rest, no_wall, no_dur))
            fps = None
            if m is None:
                rest, fps = cut(rest, message_mark, message_joined)
                if fps is None:
                    return None
                m = printed_messages.get((head, m_name, rest, no_wall, no_dur))
                if m is None:
                    return None
            begin = int(m_start)
            if not no_dur:
                duration = int(m_dur)
            elif m.compact:
                duration = -1 if m.begin else int(m_end) - begin
            else:
                duration = -1
            wall = int(m_wall) if not no_wall else (begin if m.compact else 0)
            if message_rows is not None:
                if fps is not None:
                    msg_prints.append([len(msg_rows) // 5, fps])
                msg_rows += (m.at, int(m_seq), wall, int(m_mono), duration)
                continue
            if m.rank is not rank:
                if batch:
                    messages.append((rank, batch, spans))  # type: ignore[arg-type]
                batch, rank, spans = [], m.rank, 0
            spans += 1
            op, phase, tail, begin_tail = m.parts
            sq, mo = int(m_seq), int(m_mono)
            msg: MessageEvent = _new(MessageEvent, (op, phase, sq, wall, mo, duration, *tail))
            if fps is not None:
                msg = msg._replace(tensors=put_back(msg.tensors, fps, shared))
            if begin_tail is None:
                batch.append(msg)
            else:  # (a begin carries no tensors)
                batch += (_new(MessageEvent, (_RECV, _BEGIN, sq, wall, mo, -1, *begin_tail)),
                          msg)
        if batch:
            messages.append((rank, batch, spans))  # type: ignore[arg-type]
        hits = len(events) + len(event_rows) // 5 + len(msg_rows) // 5
        _take_rows(rows, prints, event_rows, event_prints,
                   message_rows, message_prints, msg_rows, msg_prints)
        return Read(events, messages, hits)


def _take_rows(rows: array[int] | None, prints: list[list[Any]], event_rows: list[int],
               event_prints: list[list[Any]], message_rows: array[int] | None,
               message_prints: list[list[Any]], msg_rows: list[int],
               msg_prints: list[list[Any]]) -> None:
    """Add a line's rows, both kinds or (OverflowError: a number beyond int64) neither."""
    base = 0 if rows is None else len(rows) // 5
    if rows is not None:
        rows.fromlist(event_rows)  # (all of the list or, failing, none of it)
    if message_rows is not None:
        message_base = len(message_rows) // 5
        try:
            message_rows.fromlist(msg_rows)
        except OverflowError:
            if rows is not None:
                del rows[base * 5:]
            raise
        message_prints += ([message_base + row, fps] for row, fps in msg_prints)
    prints += ([base + row, fps] for row, fps in event_prints)
