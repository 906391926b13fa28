"""One process's message-layer records sorted out for the checks, and one paired message.

``pptrace.analyze.messages`` builds a ``Side`` per process once (its sends, its receives'
begins and ends, whether its oldest messages were cut away) and compares each ``Pair``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pptrace.analyze.rules import who
from pptrace.analyze.waits import labelled, place
from pptrace.model.messages import MessageEvent
from pptrace.model.records import RankInfo
from pptrace.model.trace import ProcessTrace

__all__ = ["Pair", "Side", "numel"]


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
    begins: dict[int, MessageEvent] = field(default_factory=dict)
    cut: bool = False

    @property
    def rank(self) -> RankInfo:
        return self.trace.rank

    def last_ns(self) -> int:
        """When this process's trace stops (its latest record's end, wall clock)."""
        ends = [m.wall_ns + max(m.duration_ns, 0) for m in self.trace.messages]
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
        return (f"{labelled(self.m.kind)} #{self.m.seq} {who(self.s.rank)} "
                f"({place(self.s.rank)}) -> {who(self.r.rank)} ({place(self.r.rank)}) "
                f"(receive #{self.e.seq})")
