"""Holes: what each process's trace is known to lack, so that the checks can say less.

A trace is partial where its own evidence says so, and a finding built on a partial trace must
not read as a protocol failure (docs/partial-traces.md). Per process, ``holes`` gathers:

- message-layer records its recorder counted as dropped (``RecorderStats.messages_dropped``),
  or counted as written while the trace holds fewer (a write the file lost, a torn tail);
- sequence gaps: a send or receive number missing between the first and the last kept one
  (numbers below the first kept one are a cut window, judged in ``pptrace.analyze.window``),
  per counter: broadcasts are numbered apart from point-to-point messages;
- receive ends that are missing although a later receive of the same counter on the same thread
  began (the receive returned: its end was lost, it is no wait);
- files the reader skipped damaged data in (``Trace.problems``: a corrupt frame, a bad line);
- whether its stats are final: without them the process was killed or is still running, and
  what it did after its last flush is neither in the trace nor counted.

    holes = find_holes(trace)
    holes[i].lossy, holes[i].why()

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.model.messages import MessageOp
from pptrace.model.text import clip, plural
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["Holes", "find_holes", "missing_numbers"]

#: The most damaged files a reason names (the rest are counted).
_SOURCES_NAMED = 3


@dataclass(frozen=True, slots=True)
class Holes:
    """What one process's trace is known to lack."""

    final: bool = True  # final stats: the process shut down and counted everything
    messages_dropped: int = 0  # message records its recorder counted as lost
    unwritten: int = 0  # message records its stats count as exported that the trace lacks
    send_gaps: int = 0  # send numbers missing inside the kept range (broadcasts' too)
    recv_gaps: int = 0  # receive numbers missing inside the kept range (broadcasts' too)
    lost_ends: tuple[int, ...] = ()  # receives that began, whose end is missing, and returned
    lost_bends: tuple[int, ...] = ()  # broadcast receives likewise (their own numbers)
    damaged: tuple[str, ...] = ()  # files of it the reader skipped damaged data in

    @property
    def lossy(self) -> bool:
        """Something inside the kept window is known to be missing (drops, gaps, damage)."""
        return bool(self.messages_dropped or self.unwritten or self.send_gaps or self.recv_gaps
                    or self.lost_ends or self.lost_bends or self.damaged)

    def unsure(self, *, failed: bool) -> str:
        """Why a receive that never returned (or ``failed`` at its timeout) may be no wait."""
        why = []
        if not self.final and not failed:
            why.append("its trace ends without final stats: still running, or killed before its "
                       "last flush, so the receive may have returned after the trace was read")
        if self.lossy:
            why.append(f"its trace has holes ({self.why()}): the receive's end may be one of "
                       "them")
        return "; ".join(why)

    def message(self, label: str) -> str:
        """The ``incomplete-trace`` finding's text for the process ``label``."""
        return (f"{label}'s trace is incomplete ({self.why()}): findings about its messages "
                "are warnings at most, and a receive whose end is missing is no wait")

    def why(self) -> str:
        """``3 message records dropped, 1 send number missing`` (empty when not lossy)."""
        parts = []
        if self.messages_dropped:
            parts.append(plural(self.messages_dropped, "message record") + " dropped")
        if self.unwritten:
            parts.append(plural(self.unwritten, "message record") + " written but not in the "
                         "trace")
        if self.send_gaps:
            parts.append(plural(self.send_gaps, "send number", "missing"))
        if self.recv_gaps:
            parts.append(plural(self.recv_gaps, "receive number", "missing"))
        for what, lost in (("receive", self.lost_ends), ("broadcast receive", self.lost_bends)):
            if lost:
                seqs = ", ".join(f"#{s}" for s in lost[:5])
                more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
                parts.append(f"the end of {what} {seqs}{more} missing though later receives ran")
        if self.damaged:
            named = ", ".join(clip(s, 200) for s in self.damaged[:_SOURCES_NAMED])
            others = len(self.damaged) - _SOURCES_NAMED
            parts.append(f"damaged data skipped in {named}"
                         + (f" and {plural(others, 'more file')}" if others > 0 else ""))
        return ", ".join(parts)


def missing_numbers(seqs: Sequence[int] | set[int]) -> int:
    """How many numbers are missing between the lowest and the highest of ``seqs``."""
    distinct = seqs if isinstance(seqs, set) else set(seqs)
    if not distinct:
        return 0
    return max(distinct) + 1 - min(distinct) - len(distinct)


class _Counter:
    """One of a process's message counters (its sends, its receives, its broadcast sends or its
    broadcast receives): the numbers kept, which receives ended, the latest begin per thread."""

    __slots__ = ("begins", "ended", "latest", "seqs")

    def __init__(self) -> None:
        self.seqs: set[int] = set()
        self.ended: set[int] = set()
        self.begins: list[tuple[int, int]] = []  # (seq, thread) of each receive's begin
        self.latest: dict[int, int] = {}  # thread -> the highest receive seq begun on it

    def lost(self) -> tuple[int, ...]:
        """Receives whose end is missing though a later one began on the same thread."""
        # A receive blocks its thread: one that began later on the same thread means it
        # returned.
        return tuple(sorted(seq for seq, thread in self.begins
                            if seq not in self.ended and self.latest[thread] > seq))


def _holes(proc: ProcessTrace, damaged: tuple[str, ...]) -> Holes:
    stats = proc.stats
    # One pass (a trace holds up to millions of message records): the numbers per counter,
    # which receives ended, and the last receive that began on each thread.
    send = MessageOp.SEND
    sends, recvs, bsends, brecvs = _Counter(), _Counter(), _Counter(), _Counter()
    for m in proc.messages:
        seq = m.seq
        if m.op is send:
            (bsends if m.group else sends).seqs.add(seq)
            continue
        c = brecvs if m.group else recvs
        c.seqs.add(seq)
        if m.phase == "begin":
            thread = m.thread_id
            c.begins.append((seq, thread))
            if seq > c.latest.get(thread, -1):
                c.latest[thread] = seq
        else:
            c.ended.add(seq)
    # Rotation and a flight ring delete records by design (counted apart, and not per layer:
    # a stage with messages only counts segments, not records): then the count of records
    # written says nothing about the ones kept. A gap inside the kept range is still a hole.
    cut = stats is not None and bool(stats.rotated or stats.rotated_segments
                                      or stats.overwritten)
    return Holes(final=stats is not None and stats.final,
                 messages_dropped=stats.messages_dropped if stats is not None else 0,
                 unwritten=max(0, stats.messages_exported - len(proc.messages))
                 if stats is not None and not cut else 0,
                 send_gaps=missing_numbers(sends.seqs) + missing_numbers(bsends.seqs),
                 recv_gaps=missing_numbers(recvs.seqs) + missing_numbers(brecvs.seqs),
                 lost_ends=recvs.lost(), lost_bends=brecvs.lost(), damaged=damaged)


def find_holes(trace: Trace) -> list[Holes]:
    """Each process's holes, in ``trace.processes`` order."""
    bad = {p.source for p in trace.problems}
    return [_holes(p, tuple(s for s in p.sources if s in bad)) for p in trace.processes]
