"""Clock offsets from causality (issue 22): each process's wall-clock offset, with its bounds.

Each host stamps events with its own wall clock. What the trace proves is causal order: a send
begins before its receive ends, an attach before its extract. With ``clock_p = true + offset_p``,
an event at ``ta`` on process ``a`` before one at ``tb`` on ``b`` gives
``offset_b - offset_a <= tb - ta``: a difference constraint. Exchanges both ways bound an offset
from both sides, as NTP's two-way exchanges do; shortest paths over the processes (Floyd-Warshall,
a few dozen processes) give every process's tightest bounds against the reference (process 0).
The estimate is the middle of the bounds; a process bounded on one side only (messages one way)
is moved just enough to respect causality, and said to be uncertain. Pure: no I/O.

    offsets = estimate([Before(a=1, a_ns=t_send, b=0, b_ns=t_recv_end), ...], processes=2)
    offsets.aligned(1, t)   # process 1's time t on the reference clock
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pptrace.model.findings import MessageId
from pptrace.model.messages import MessageOp
from pptrace.model.trace import Trace

__all__ = ["Before", "ClockOffsets", "Offset", "estimate", "message_constraints"]

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class Before:
    """Process ``a``'s event at ``a_ns`` (its clock) happened before ``b``'s at ``b_ns``."""

    a: int
    a_ns: int
    b: int
    b_ns: int


@dataclass(frozen=True, slots=True)
class Offset:
    """One process's offset against the reference clock, within ``[low_ns, high_ns]``."""

    process: int
    offset_ns: int  # subtracted from the process's times to align them
    low_ns: float  # -inf when nothing bounds it from below
    high_ns: float  # inf when nothing bounds it from above
    certain: bool  # bounded on both sides (two-way exchanges)


@dataclass(frozen=True, slots=True)
class ClockOffsets:
    """Every process's offset; ``consistent`` is False when the constraints contradict each
    other (a clock that drifted within the trace), and then nothing is applied."""

    offsets: tuple[Offset, ...]
    consistent: bool = True

    def aligned(self, process: int, ns: int) -> int:
        """Process ``process``'s time ``ns`` on the reference clock."""
        return ns - self.offsets[process].offset_ns if self.consistent else ns


def estimate(constraints: Iterable[Before], processes: int) -> ClockOffsets:
    """The offsets that respect every constraint, each as near the middle of its bounds as the
    others allow."""
    n = processes
    # Integers where finite (inf where unbounded), so that shifting one clock by d shifts its
    # bounds and its estimate by exactly d.
    dist: list[list[float]] = [[0 if i == j else _INF for j in range(n)] for i in range(n)]
    for c in constraints:  # offset_b - offset_a <= b_ns - a_ns: an edge a -> b
        if 0 <= c.a < n and 0 <= c.b < n:
            weight = c.b_ns - c.a_ns
            if weight < dist[c.a][c.b]:  # a == b: one clock said a receive ended before its send
                dist[c.a][c.b] = weight
    for k in range(n):
        dk = dist[k]
        for i in range(n):
            dik = dist[i][k]
            if dik == _INF:
                continue
            di = dist[i]
            for j in range(n):
                if dik + dk[j] < di[j]:
                    di[j] = dik + dk[j]
    if any(dist[i][i] < 0 for i in range(n)):
        return ClockOffsets(tuple(Offset(p, 0, -_INF, _INF, False) for p in range(n)), False)
    target = []
    for p in range(n):
        high, low = dist[0][p], -dist[p][0]  # offset_p - offset_0 within [low, high]
        if p == 0:
            target.append(0)
        elif low > -_INF and high < _INF:
            target.append(int(low + high) // 2)
        else:  # one way only: the smallest move that keeps causality
            target.append(int(min(max(0, low), high)))
    # Each middle respects its bounds against process 0 but not always those between two other
    # processes; the highest offsets at or below the targets that respect every constraint do
    # (min over q of target_q + dist[q][p]), and equal the targets where those already do.
    fitted = [min(target[q] + dist[q][p] for q in range(n)) for p in range(n)]
    base = fitted[0]
    return ClockOffsets(tuple(
        Offset(p, int(fitted[p] - base), -dist[p][0], dist[0][p],
               -dist[p][0] > -_INF and dist[0][p] < _INF) for p in range(n)))


def message_constraints(trace: Trace, pairs: Mapping[MessageId, MessageId]) -> list[Before]:
    """A send begins before its receive ends: one constraint per paired send (the analyzer's
    ``Analysis.message_pairs``)."""
    # Keyed by (seq, broadcast) in one table per op (an enum's hash is a Python call: a
    # million cost seconds); a broadcast is numbered apart from point-to-point messages.
    send, recv = MessageOp.SEND, MessageOp.RECV
    sends = [{(m.seq, m.broadcast): m for m in p.messages if m.op is send}
             for p in trace.processes]
    ends = [{(m.seq, m.broadcast): m for m in p.messages if m.op is recv and m.phase == "end"}
            for p in trace.processes]
    out = []
    for sent, got in pairs.items():
        s = sends[sent.process].get((sent.seq, sent.broadcast)) if sent.op is send else None
        r = ends[got.process].get((got.seq, got.broadcast))
        if s is not None and r is not None:
            out.append(Before(sent.process, s.wall_ns, got.process,
                              r.wall_ns + max(r.duration_ns, 0)))
    return out
