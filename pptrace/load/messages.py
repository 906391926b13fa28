"""Read the message layer's spans (``pptrace.send``, ``pptrace.recv.begin``, ``pptrace.recv``).

A message span becomes a ``MessageEvent`` of its process (``ProcessTrace.messages``), in call
order; a receive's end marked ``pptrace.msg.with_begin`` becomes two, its begin
(``pptrace.model.messages.begin_of``) and itself, as if the begin had its own span. The
process's constants (rank, host, pid, run id, schema version) are read as for attach/extract
spans: on the span (schema version 1) or on its resource (version 2). A span that
cannot be a message event is an input problem of its file, named by what is wrong.

    process, run_id, events = decode_span("pptrace.send", attrs, resource, start_ns, end_ns)
    ordered = in_call_order(events)
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

from pptrace.load import fingerprints
from pptrace.model import messages as M
from pptrace.model import schema
from pptrace.model.messages import BadMessageSpan, MessageEvent, MessageOp
from pptrace.model.records import RankInfo, TensorMeta

__all__ = ["decode_span", "from_json", "in_call_order", "pack", "to_json", "unpack"]

_RANK_KEYS = (schema.RANK, schema.WORLD_SIZE, schema.PP_RANK, schema.PP_SIZE, schema.TP_RANK,
              schema.TP_SIZE)


def _constant(attrs: Mapping[str, Any], resource: Mapping[str, Any], key: str) -> Any:
    if key in attrs:
        return attrs[key]
    return resource.get(schema.RESOURCE_KEYS[key])


def _opt_int(attrs: Mapping[str, Any], resource: Mapping[str, Any], key: str) -> int | None:
    value = _constant(attrs, resource, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadMessageSpan(f"{key}: expected an integer, got {value!r:.60}")
    return value


def decode_span(name: str, attrs: Mapping[str, Any], resource: Mapping[str, Any],
                start_ns: int = 0, end_ns: int | None = None
                ) -> tuple[RankInfo, str, tuple[MessageEvent, ...]]:
    """(the process's rank, its run id, the events) of one message span (whose times rebuild
    what a trace file's version 2 span leaves out): the span's event, after its begin when it
    stands for that too; ``BadMessageSpan`` naming what is wrong."""
    event = M.from_attributes(attrs, name, resource, start_ns, end_ns)
    events = (M.begin_of(event), event) if M.implies_begin(attrs, name) else (event,)
    host = _constant(attrs, resource, schema.HOST)
    pid = _opt_int(attrs, resource, schema.PID)
    run_id = _constant(attrs, resource, schema.RUN_ID)
    if not isinstance(host, str) or pid is None:
        raise BadMessageSpan("no host and pid on the span or its resource")
    instance = _constant(attrs, resource, schema.R_INSTANCE) or ""
    if not isinstance(instance, str):
        raise BadMessageSpan(f"{schema.R_INSTANCE}: expected a string, got {instance!r:.60}")
    ranks = [_opt_int(attrs, resource, key) for key in _RANK_KEYS]
    rank = RankInfo(rank=ranks[0], world_size=ranks[1], pp_rank=ranks[2], pp_size=ranks[3],
                    tp_rank=ranks[4], tp_size=ranks[5], host=host, pid=pid, instance=instance)
    return rank, run_id if isinstance(run_id, str) else "", events


_F = MessageEvent._fields
_BY_MONO, _BY_OP, _BY_SEQ, _BY_PHASE = (operator.itemgetter(_F.index(f))
                                        for f in ("mono_ns", "op", "seq", "phase"))
# A broadcast is numbered apart from point-to-point messages: its group is part of its identity
# (empty for a point-to-point event, so files without broadcasts de-duplicate as before).
_IDENT = operator.itemgetter(*(_F.index(f) for f in ("op", "seq", "phase", "group")))


def in_call_order(events: Iterable[MessageEvent]) -> tuple[MessageEvent, ...]:
    """The events by call start, a receive's begin before its end; one read twice kept once.

    The order is (mono_ns, send before receive, seq, begin before end): stable sorts by each
    key from the last, in C (a Python key function for each of a million events costs more
    than all four); "send" > "recv", so that one sorts in reverse, which keeps ties in order.
    """
    out = list(events)
    out.sort(key=_BY_PHASE)  # "begin" < "end"
    out.sort(key=_BY_SEQ)
    out.sort(key=_BY_OP, reverse=True)
    out.sort(key=_BY_MONO)
    if len(set(map(_IDENT, out))) == len(out):
        return tuple(out)
    seen: set[tuple[MessageOp, int, str, tuple[int, ...]]] = set()
    unique = []
    for ev in out:
        ident = _IDENT(ev)
        if ident not in seen:
            seen.add(ident)
            unique.append(ev)
    return tuple(unique)


def to_json(event: MessageEvent) -> list[Any]:
    """An event as plain JSON values (the loader worker's result): its span name and
    attributes."""
    return [M.span_name(event), M.to_attributes(event)]


def from_json(value: list[Any]) -> MessageEvent:
    """The inverse of ``to_json`` (``BadMessageSpan`` when it is not one)."""
    name, attrs = value
    if not isinstance(name, str) or not isinstance(attrs, dict):
        raise BadMessageSpan("not a message event")
    return M.from_attributes(attrs, name)


_NUMBERS = ("seq", "wall_ns", "mono_ns", "duration_ns")
_POSITIONS = tuple(MessageEvent._fields.index(f) for f in _NUMBERS)
_TENSORS = MessageEvent._fields.index("tensors")
_FP = TensorMeta._fields.index("fingerprint")
_new = tuple.__new__


def _bare(tensors: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
    return tuple([_new(TensorMeta, (*t[:_FP], None, *t[_FP + 1:])) for t in tensors])


def pack(events: Iterable[MessageEvent]) -> list[Any]:
    """Events as JSON values for the loader worker's result: each distinct shape (the event
    with its numbers zeroed and its fingerprints left out) once as ``to_json``, then a row of
    (shape, seq, wall, mono, duration) per event and, per event, its values' fingerprints (0
    when it has none); the parent decodes each shape once (``unpack``)."""
    index: dict[MessageEvent, int] = {}
    shapes: list[Any] = []
    rows: list[int] = []
    prints: list[Any] = []
    for ev in events:
        ts = ev.tensors
        fps = [t.fingerprint or "" for t in ts]
        if any(fps):
            shape = ev._replace(seq=0, wall_ns=0, mono_ns=0, duration_ns=0, tensors=_bare(ts))
            prints.append(fps)
        else:
            shape = ev._replace(seq=0, wall_ns=0, mono_ns=0, duration_ns=0)
            prints.append(0)
        i = index.get(shape)
        if i is None:
            i = index[shape] = len(shapes)
            shapes.append(to_json(shape))
        rows += (i, ev.seq, ev.wall_ns, ev.mono_ns, ev.duration_ns)
    return [shapes, rows, prints]


def unpack(value: list[Any]) -> list[MessageEvent]:
    """The inverse of ``pack`` (``BadMessageSpan`` when it is not one)."""
    shapes, rows, prints = value
    templates = [list(from_json(s)) for s in shapes]
    out = []
    new = _new
    p_seq, p_wall, p_mono, p_dur = _POSITIONS
    it = iter(rows)
    try:
        for (i, seq, wall, mono, dur), fps in zip(zip(it, it, it, it, it, strict=True), prints,
                                                  strict=True):
            values = templates[i][:]
            values[p_seq], values[p_wall], values[p_mono], values[p_dur] = seq, wall, mono, dur
            if fps:
                values[_TENSORS] = fingerprints.put_back(values[_TENSORS], fps)
            out.append(new(MessageEvent, values))
    except (ValueError, IndexError, TypeError):
        raise BadMessageSpan("not packed message events") from None
    return out
