"""One pass over a process's events: everything the analyzer's per-process checks read.

A trace holds up to millions of events, and walking them once per check (losses, errors,
hygiene, payload lists, the observer) was most of the analyzer's time: each pass touches every
event's memory again. ``scan`` walks them once and keeps only what the checks need, so the
analyzer proper (``pptrace.analyze.analyzer``) works on short lists.

    found = scan(proc.events, proc.rank.pp_rank)
    found.attaches, found.extracts, found.failed, found.flagged

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pptrace.analyze.rules import Spec, hygiene_specs
from pptrace.model.records import PREFIX, Direction, Event

__all__ = ["Scan", "scan"]

_ATTACH = Direction.ATTACH
_EXTRACT = Direction.EXTRACT
_NO_OBSERVER = ("NoneType", "None")


@dataclass(slots=True)
class Scan:
    """What one pass over a process's events found (lists keep the events' call order)."""

    attaches: list[Event] = field(default_factory=list)  # payload-carrying attaches that ran
    extracts: list[Event] = field(default_factory=list)  # payload-carrying extracts
    failed: list[Event] = field(default_factory=list)  # calls that raised
    flagged: list[tuple[Event, tuple[Spec, ...]]] = field(default_factory=list)  # hygiene
    unobserved: list[Event] = field(default_factory=list)  # extracts without a PP observer
    attach_calls: int = 0  # attach calls of any kind (None outputs and errors included)
    missing_seq: int = 0  # sequence numbers missing after each direction's first kept one
    first_attach: int | None = None  # the lowest attach seq kept (None: no attach kept)
    first_extract: int | None = None  # the lowest extract seq kept
    dropped: int = 0  # the highest dropped-before count an event carries


class _Hygiene:
    """The hygiene specs of each distinct event shape, computed once per shape.

    Events of one process repeat a few shapes, and the loader shares equal parts between
    events, so a shape is looked up by the identity of its parts. ``scan`` inlines the common
    case, a call that returned: by direction, the last shape seen with the same tensors tuple,
    checked by the identity of the keys (an attach's specs never read the keys after it).
    """

    def __init__(self, pp_rank: int | None, prefix: str) -> None:
        self.pp_rank = pp_rank
        self.prefix = prefix
        self.by_shape: dict[tuple[Any, ...], tuple[Spec, ...]] = {}
        # id(tensors) -> (keys_before, specs) / (keys_before, keys_after, specs), calls that
        # returned; the events keep every tuple alive meanwhile
        self.attach: dict[int, tuple[Any, tuple[Spec, ...]]] = {}
        self.extract: dict[int, tuple[Any, Any, tuple[Spec, ...]]] = {}

    def specs(self, ev: Event) -> tuple[Spec, ...]:
        """The specs of ``ev``'s shape (the slow path of ``scan``'s inlined lookups)."""
        key = (id(ev.direction), id(ev.tensors), id(ev.keys_before), id(ev.keys_after),
               ev.error_type, ev.error_message)
        got = self.by_shape.get(key)
        if got is None:
            got = self.by_shape[key] = hygiene_specs(ev, self.pp_rank, self.prefix)
        if ev.error_type is None:
            if ev.direction is _ATTACH:
                self.attach[id(ev.tensors)] = (ev.keys_before, got)
            elif ev.direction is _EXTRACT:
                self.extract[id(ev.tensors)] = (ev.keys_before, ev.keys_after, got)
        return got


def scan(events: Sequence[Event], pp_rank: int | None, prefix: str = PREFIX) -> Scan:
    """Walk a process's events once (``pp_rank`` and ``prefix``: the process's PP stage and
    transport key prefix, for hygiene)."""
    out = Scan()
    attaches, extracts, failed = out.attaches, out.extracts, out.failed
    flagged, unobserved = out.flagged, out.unobserved
    hygiene = _Hygiene(pp_rank, prefix)
    attach_shape, extract_shape = hygiene.attach.get, hygiene.extract.get
    n_attach = n_extract = 0
    max_attach: float = float("-inf")
    max_extract: float = float("-inf")
    min_attach: float = float("inf")
    min_extract: float = float("inf")
    dropped = events[0].dropped_before if events else 0
    for ev in events:
        direction = ev.direction
        tensors = ev.tensors
        error = ev.error_type
        seq = ev.seq
        keys_before = ev.keys_before
        specs = None
        if direction is _ATTACH:
            n_attach += 1
            if seq > max_attach:
                max_attach = seq
            if seq < min_attach:
                min_attach = seq
            if error is None:
                if tensors:
                    attaches.append(ev)
                hit = attach_shape(id(tensors))
                specs = hit[1] if hit is not None and hit[0] is keys_before else None
        elif direction is _EXTRACT:
            n_extract += 1
            if seq > max_extract:
                max_extract = seq
            if seq < min_extract:
                min_extract = seq
            if tensors:
                extracts.append(ev)
            if ev.subject_pp_capable is False or ev.subject_type in _NO_OBSERVER:
                unobserved.append(ev)
            if error is None:
                got = extract_shape(id(tensors))
                if got is not None and got[0] is keys_before and got[1] is ev.keys_after:
                    specs = got[2]
        if ev.dropped_before > dropped:
            dropped = ev.dropped_before
        if error is not None:
            failed.append(ev)
        if specs is None:
            if not tensors and not keys_before:
                continue  # nothing to name, no key to judge
            specs = hygiene.specs(ev)
        if specs:
            flagged.append((ev, specs))
    # Numbers below the first kept one are a cut window (rotated away, overwritten by a flight
    # ring), not a gap: ``pptrace.analyze.window`` judges around them.
    out.attach_calls = n_attach
    if n_attach:
        out.first_attach = int(min_attach)
        out.missing_seq += int(max_attach) + 1 - int(min_attach) - n_attach
    if n_extract:
        out.first_extract = int(min_extract)
        out.missing_seq += int(max_extract) + 1 - int(min_extract) - n_extract
    out.dropped = dropped
    return out
