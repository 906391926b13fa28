"""Partial windows: what part of its history each process's trace still holds, and what a
channel can judge.

Each direction's sequence numbers run gap-free from 0 in every process, so a trace whose first
kept number is above 0 starts late: its oldest segments were rotated away
(``RecorderStats.rotated``), its flight ring kept only its last events (``overwritten``), or the
input was a time window (a Jaeger query). What came before is gone by design, not lost. As
PyTorch's flight recorder analyzer drops what is older than the newest first record across
ranks, a channel is judged only from the newest first kept number of its two ends (the attach
seq on the last stage, the extract seq on stage 0: both stages call once per microbatch, so the
numbers match in a healthy run); the analyzer reports what lies before as a ``window-cut``
info finding, and the losses of a process are counted inside its window only.

    window = process_window(scan, stats)
    start = channel_start(sender_window, receiver_window)
    attaches, extracts = trim(attaches, start), trim(extracts, start)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.analyze.pairing import MAX_SKIP, Alignment
from pptrace.analyze.scan import Scan
from pptrace.model.records import Event, RecorderStats
from pptrace.model.text import clip, plural

__all__ = [
    "NONE_KEPT",
    "Window",
    "channel_start",
    "cut_message",
    "excused",
    "process_window",
    "trim",
    "window_losses",
]

#: The first kept seq of a direction a cut trace kept nothing of: every number is outside.
NONE_KEPT = 2**63


@dataclass(frozen=True, slots=True)
class Window:
    """The part of one process's history its trace holds: the first kept seq per direction."""

    attach_from: int = 0  # attaches numbered below it are outside the window
    extract_from: int = 0
    rotated: int = 0  # events the writer deleted with old segments (from the stats)
    rotated_segments: int = 0
    overwritten: int = 0  # events a flight ring overwrote (from the stats)

    @property
    def cut(self) -> bool:
        """The trace starts after the process's first call (in either direction)."""
        return self.attach_from > 0 or self.extract_from > 0

    @property
    def head(self) -> int:
        """How many numbered calls lie before the window (both directions; kept ones count)."""
        return sum(n for n in (self.attach_from, self.extract_from) if n != NONE_KEPT)

    def why(self) -> str:
        """What cut the window: ``its oldest 5000 events were rotated away with 3 segments``."""
        if self.rotated:
            return (f"its oldest {plural(self.rotated, 'event')} were rotated away with "
                    f"{plural(self.rotated_segments, 'segment')}")
        if self.overwritten:
            return (f"its flight ring kept only its last events ({self.overwritten} "
                    "overwritten)")
        return "its trace starts late (a time window, or a file cut at its start)"


def process_window(found: Scan, stats: RecorderStats | None) -> Window:
    """The window of one process, from its scan and its last stats."""
    rotated = stats.rotated if stats is not None else 0
    segments = stats.rotated_segments if stats is not None else 0
    overwritten = stats.overwritten if stats is not None else 0
    # A direction of which nothing is kept while the writer or the ring deleted events may
    # have been there: nothing of it can be judged.
    none = NONE_KEPT if rotated or overwritten else 0
    first_a = none if found.first_attach is None else max(0, found.first_attach)
    first_e = none if found.first_extract is None else max(0, found.first_extract)
    return Window(first_a, first_e, rotated, segments, overwritten)


def channel_start(sender: Window, receiver: Window) -> int:
    """The first microbatch both ends of a channel still cover (0: the whole history)."""
    return max(sender.attach_from, receiver.extract_from)


def trim(events: Sequence[Event], start: int) -> Sequence[Event]:
    """The events numbered ``start`` or later (the list itself when that is all of them)."""
    if start <= 0 or all(e.seq >= start for e in events):
        return events
    return [e for e in events if e.seq >= start]


def excused(result: Alignment, attaches: Sequence[Event],
            extracts: Sequence[Event]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The orphans and unmatched extracts of a cut channel that cannot be judged: those before
    its first pair (at most ``MAX_SKIP`` a side), whose partner lies outside the window (a send
    skipped before the cut shifts the two numberings), and every extract that began before the
    first kept attach did (its attach cannot be in the window, however far the two numberings
    drifted apart before the cut)."""
    orphans: tuple[int, ...] = ()
    unmatched: set[int] = set()
    if result.runs and result.runs[0][0] <= MAX_SKIP and result.runs[0][1] <= MAX_SKIP:
        first_a, first_e, _ = result.runs[0]
        orphans = tuple(i for i in result.orphans if i < first_a)
        unmatched = {j for j in result.unmatched if j < first_e}
    if attaches:
        first = attaches[0].start_ns
        unmatched |= {j for j in result.unmatched if extracts[j].start_ns < first}
    return orphans, tuple(sorted(unmatched))


def cut_message(start: int, newest: str, window: Window, at_cut: int) -> str:
    """``microbatches 0-4999 are outside the kept window of rank 1 (why): ...``."""
    if start == NONE_KEPT:
        return (f"every microbatch is outside the kept window of {newest} ({window.why()}): "
                "nothing on this channel can be judged")
    what = "microbatch 0 is" if start == 1 else f"microbatches 0-{start - 1} are"
    also = (f"; {plural(at_cut, 'call')} just after the cut, whose partner lies before it, "
            "not judged") if at_cut else ""
    return (f"{what} outside the kept window of {newest} ({window.why()}): the channel is "
            f"judged from microbatch {start} on{also}")


#: The most characters of a sink's name a loss detail quotes.
_NAME_LIMIT = 200


def window_losses(found: Scan, window: Window, stats: RecorderStats | None,
                  events: Sequence[Event]) -> tuple[int, str] | None:
    """What a process lost inside its window, and the detail of it (None: nothing lost)."""
    # Before the window, history was cut (rotated away, overwritten by a flight ring): not lost.
    head = window.head
    missing_seq, dropped = found.missing_seq, found.dropped
    overwritten = internal = unexported = 0
    if stats is not None:
        dropped = max(dropped, stats.dropped)
        overwritten = max(0, stats.overwritten - max(0, head - stats.rotated))
        internal = stats.internal_errors
        unexported = max(0, stats.recorded - len(events) - max(head, stats.rotated))
    if window.cut and events:
        dropped = max(0, dropped - events[0].dropped_before)  # dropped before the window
    lost = max(missing_seq, dropped + overwritten, unexported)
    if lost == 0 and internal == 0:
        return None
    parts = []
    if dropped:
        parts.append(f"{dropped} dropped")
    if overwritten:
        parts.append(f"{overwritten} overwritten in flight mode")
    if missing_seq:
        parts.append(plural(missing_seq, "sequence number", "missing"))
    if unexported > max(dropped + overwritten, missing_seq):
        parts.append(f"{unexported} recorded but not in the trace")
    if internal:
        parts.append(plural(internal, "internal recorder error"))
    # Another sink's losses (the OTLP exporter's failed batches) are not this trace's: they
    # are named, and weaken nothing unless this trace lacks the events too.
    for sink, n in stats.sink_dropped if stats is not None else ():
        parts.append(f"the {clip(sink, _NAME_LIMIT)} sink lost {n} of its own")
    return lost, ", ".join(parts)
