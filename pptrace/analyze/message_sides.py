"""One process's message-layer records sorted out for the checks, one paired message, and the
link from attach/extract findings to the output message that carried them.

``pptrace.analyze.messages`` builds a ``Side`` per process once (its sends, its receives'
begins and ends, whether its oldest messages were cut away), compares each ``Pair``, and
returns ``Carried``, which ``carried_by`` writes into the payload findings. ``Paired`` is what
the clocks' pass over the messages leaves the judging pass: each channel's alignment, and the
sorting out itself where both read one trace. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import NamedTuple

from pptrace.analyze.pairing import Alignment
from pptrace.analyze.rules import rank_id, who
from pptrace.analyze.summary import Raw
from pptrace.analyze.waits import labelled, numbered, place, wanted
from pptrace.model.findings import Category
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import Direction, RankInfo
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["Calls", "Carried", "Pair", "Paired", "Side", "Sides", "carried_by", "cut_at_start",
           "numel", "sort_out"]

#: (sending process index, attach seq) -> "output message #12 pp3->pp0"
Carried = dict[tuple[int, int], str]
_SEQ = itemgetter(MessageEvent._fields.index("seq"))


def cut_at_start(proc: ProcessTrace) -> bool:
    """Whether a process's oldest message records are gone: a kept seq above 0 of any of its
    counters (sends, receives, broadcast sends, broadcast receives) says so; so do segments
    deleted or a ring overwritten, also when one side kept none at all (every send rotated
    away while the receives stayed leaves no seq above 0 to say it)."""
    return sort_out(0, proc, "", "").cut


def sort_out(index: int, proc: ProcessTrace, run: str, prefix: str) -> Side:
    """Process ``index``'s ``Side``: its records sorted out, each list in seq order, and
    whether its oldest were cut away (``cut_at_start``)."""
    side = Side(index, proc, run, prefix)
    sends, ends, begins = side.sends, side.ends, side.begins
    bsends, bends, bbegins = side.bsends, side.bends, side.bbegins
    send = MessageOp.SEND
    for m in proc.messages:
        if m.op is send:
            (bsends if m.group else sends).append(m)
        elif m.phase == "begin":
            (bbegins if m.group else begins)[m.seq] = m
        else:
            (bends if m.group else ends).append(m)
    for calls in (sends, ends, bsends, bends):
        calls.sort(key=_SEQ)  # (in C: a Python key per message costs more than the sort)
    # Each counter's first seq: the first of its sorted sends, or of its receives' begins and
    # ends (a receive's two phases share one seq).
    firsts = [calls[0].seq for calls in (sends, bsends) if calls]
    for calls, began in ((ends, begins), (bends, bbegins)):
        if calls or began:
            firsts.append(min(([calls[0].seq] if calls else []) + ([min(began)] if began else [])))
    stats = proc.stats
    side.cut = any(seq > 0 for seq in firsts) or (
        stats is not None and bool(stats.rotated_segments or stats.overwritten))
    return side


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(slots=True)
class Side:
    """One process's message records, sorted out once."""

    index: int
    trace: ProcessTrace
    run: str
    prefix: str
    sends: list[MessageEvent] = field(default_factory=list)
    ends: list[MessageEvent] = field(default_factory=list)  # receives that returned or raised
    begins: dict[int, MessageEvent] = field(default_factory=dict)  # receives that began
    cut: bool = False
    # Its broadcasts, numbered apart from its point-to-point messages (their own seqs).
    bsends: list[MessageEvent] = field(default_factory=list)  # broadcasts this process sourced
    bends: list[MessageEvent] = field(default_factory=list)  # broadcasts it received (ended)
    bbegins: dict[int, MessageEvent] = field(default_factory=dict)  # broadcast receives begun

    @property
    def rank(self) -> RankInfo:
        return self.trace.rank

    def last_ns(self) -> int:
        """When this process's trace stops (its latest record's end, wall clock)."""
        # (a begin's duration is -1: it ends where it starts)
        messages = self.trace.messages
        ends = [max(m.wall_ns + m.duration_ns if m.duration_ns > 0 else m.wall_ns
                    for m in messages)] if messages else []
        ends += [ev.end_ns for ev in self.trace.events[-1:]]
        if self.trace.stats is not None:
            ends.append(self.trace.stats.time_ns)
        return max(ends, default=0)


@dataclass(frozen=True, slots=True)
class Pair:
    """One send and the receive it paired with."""

    s: Side
    m: MessageEvent
    r: Side
    e: MessageEvent
    channel: str

    def head(self) -> str:
        what = f"broadcast of {wanted(self.m.kind)}" if self.m.group else labelled(self.m.kind)
        return (f"{what} #{self.m.seq} {who(self.s.rank)} "
                f"({place(self.s.rank)}) -> {who(self.r.rank)} ({place(self.r.rank)}) "
                f"({numbered(self.e)})")


def carried_by(raws: list[Raw], carried: Carried) -> None:
    """Say in each attach/extract payload finding which output message carried its dict."""
    for i, raw in enumerate(raws):
        if raw.kind.category is not Category.PAYLOAD or not raw.events:
            continue
        process, direction, seq = raw.events[0]
        text = carried.get((process, seq)) if direction is Direction.ATTACH else None
        if text is not None:
            raws[i] = replace(raw, message=f"{raw.message} (carried by {text})")


class Sides(NamedTuple):
    """Every process's ``Side``, sorted out once."""

    sides: list[Side]  # the processes that recorded messages
    by_rank: dict[tuple[str, int], Side]  # (run, global rank) -> its side (a cut quiet one too)
    quiet: list[Side]  # traced, but no message recorded
    by_index: dict[int, Side]  # process index -> its side (those with messages)


#: A point-to-point channel's calls, in order, by (run, sender, receiver, kind).
Calls = dict[tuple[str, int, int, str], list[tuple[Side, MessageEvent]]]


def _sort_all(trace: Trace, runs: Sequence[str], prefixes: Sequence[str]) -> Sides:
    found = Sides([], {}, [], {})
    for i, proc in enumerate(trace.processes):
        side = sort_out(i, proc, runs[i], prefixes[i])
        if not proc.messages:
            found.quiet.append(side)
            # It kept no message while segments were deleted: judged as a cut end is.
            if side.cut:
                found.by_rank.setdefault((side.run, rank_id(proc.rank)), side)
            continue
        found.sides.append(side)
        found.by_index[i] = side
        found.by_rank.setdefault((side.run, rank_id(proc.rank)), side)
    return found


def _channel_calls(sides: Sequence[Side]) -> tuple[Calls, Calls]:
    sends: Calls = defaultdict(list)
    recvs: Calls = defaultdict(list)
    for side in sides:
        run, me = side.run, rank_id(side.rank)
        # (``m.ok`` read as its field: a property call per message of a long run)
        for m in side.sends:
            if m.error_type is None and m.peer >= 0:
                sends[(run, me, m.peer, m.kind)].append((side, m))
        for m in side.ends:
            if m.error_type is None and not m.from_stash and m.peer >= 0:
                recvs[(run, m.peer, me, m.kind)].append((side, m))
    return sends, recvs


class Paired:
    """What the clocks' pass over the messages leaves the judging pass: each point-to-point
    channel's alignment (checked against the lists at hand before use:
    ``message_align.pair_channel``), and, where the judging pass reads the very same trace (the
    clocks shifted nothing) with the same runs and prefixes, the processes' sorted records and
    each channel's calls, sorted out once (no check mutates them)."""

    def __init__(self) -> None:
        self.alignments: dict[tuple[str, int, int, str], Alignment] = {}
        # The trace, runs and prefixes last sorted out, and what they gave.
        self._sorted: tuple[tuple[Trace, tuple[str, ...], tuple[str, ...]], Sides] | None = None
        self._calls: tuple[Calls, Calls] | None = None

    def sides(self, trace: Trace, runs: Sequence[str], prefixes: Sequence[str]) -> Sides:
        """Every process's side of ``trace``: those of the pass before when it read the same."""
        made = (trace, tuple(runs), tuple(prefixes))
        last = self._sorted
        if last is None or last[0][0] is not trace or last[0][1:] != made[1:]:
            last = self._sorted = (made, _sort_all(trace, runs, prefixes))
            self._calls = None
        return last[1]

    def calls(self, sides: Sides) -> tuple[Calls, Calls]:
        """Each point-to-point channel's sends and receives, in order, of ``sides`` (what
        ``sides`` last returned)."""
        if self._calls is None or self._sorted is None or sides is not self._sorted[1]:
            self._calls = _channel_calls(sides.sides)
        return self._calls
