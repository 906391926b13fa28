"""``Event``'s field positions by name, for the loader paths that build events as plain tuples.

The fast path (``pptrace.load.fast``) and the worker's rows (``pptrace.load.worker``) build
millions of events from a cached template that differs only in a few numbers. ``ev._replace``
costs about 0.8 us an event; copying the template and setting the numbers by position costs
about 0.25 us. The positions come from ``Event._fields`` here, by name, so a field added to
``Event`` (anywhere in it) moves them with it instead of shifting every slice silently.

    ev = with_numbers(template, seq=3, start_ns=t0, mono_ns=m, duration_ns=d)
    direction, rank, tail = parts_of(template)    # once per template, then per event:
    ev = tuple.__new__(Event, (direction, seq, rank, start_ns, mono_ns, duration_ns, *tail))
"""

from __future__ import annotations

from typing import Any

from pptrace.model.records import Event, RankInfo

__all__ = [
    "DIRECTION",
    "DROPPED_BEFORE",
    "DURATION_NS",
    "MONO_NS",
    "SEQ",
    "START_NS",
    "THREAD_ID",
    "parts_of",
    "with_numbers",
]

_FIELDS = Event._fields
DIRECTION = _FIELDS.index("direction")
SEQ = _FIELDS.index("seq")
START_NS = _FIELDS.index("start_ns")
MONO_NS = _FIELDS.index("mono_ns")
DURATION_NS = _FIELDS.index("duration_ns")
THREAD_ID = _FIELDS.index("thread_id")
DROPPED_BEFORE = _FIELDS.index("dropped_before")

# The one-pass readers (``pptrace.load.fast_line``, the worker's rows) build an event as one
# tuple: (direction, seq, rank, start, mono, duration, *the template's fields after them), a
# third cheaper than ``with_numbers``. That needs these fields first, in this order: a field
# added among them stops the loader at import, by name, rather than shifting every event.
if _FIELDS[:6] != ("direction", "seq", "rank", "start_ns", "mono_ns", "duration_ns"):
    raise ImportError("pptrace.load.layout: Event must begin with direction, seq, rank, "
                      f"start_ns, mono_ns, duration_ns; it begins with {_FIELDS[:6]}")

_new_event = tuple.__new__


def with_numbers(template: Event, seq: int, start_ns: int, mono_ns: int, duration_ns: int) -> Event:
    """``template`` with its per-call numbers replaced (``_replace`` at a third of the cost)."""
    values = list(template)
    values[SEQ] = seq
    values[START_NS] = start_ns
    values[MONO_NS] = mono_ns
    values[DURATION_NS] = duration_ns
    event: Event = _new_event(Event, values)
    return event


def parts_of(template: Event) -> tuple[Any, RankInfo, tuple[Any, ...]]:
    """(direction, rank, the fields after the duration) of ``template``: what its events share."""
    return template[DIRECTION], template.rank, template[DURATION_NS + 1:]
