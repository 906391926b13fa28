"""One process's message-layer records sorted out for the checks, one paired message, and the
link from attach/extract findings to the output message that carried them.

``pptrace.analyze.messages`` builds a ``Side`` per process once (its sends, its receives'
begins and ends, whether its oldest messages were cut away), compares each ``Pair``, and
returns ``Carried``, which ``carried_by`` writes into the payload findings. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import itemgetter

from pptrace.analyze.rules import who
from pptrace.analyze.summary import Raw
from pptrace.analyze.waits import labelled, numbered, place, wanted
from pptrace.model.findings import Category
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import Direction, RankInfo
from pptrace.model.trace import ProcessTrace

__all__ = ["Carried", "Pair", "Side", "carried_by", "cut_at_start", "numel", "sort_out"]

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
