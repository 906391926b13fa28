"""The message checks across a hole in a trace: pairing one channel's sends with its receives
across it, the findings it weakens, a failed receive's retry, a send made after its sender's
last flush.

In order, the n-th send of a kind on a channel pairs with the n-th receive; a record lost from
either list (``pptrace.analyze.holes``) shifts every pair after it. Where a channel is known to
have a hole, ``align_across`` skips the fewest records after which the next send and receive
agree again (keys, and each key's shape and dtype), so one lost send is one receive with no send,
not a cascade of false mismatches.

    pairs, unreceived, unmatched = align_across(sends, receives)
    hole = channel_hole(holes, sender, receiver)   # "" when neither end has one
    severity, message = weakened(hole, kind, severity, message)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pptrace.analyze.aligned import order
from pptrace.analyze.holes import Holes
from pptrace.analyze.message_sides import Side
from pptrace.analyze.rules import who
from pptrace.model.findings import Category, FindingKind, Severity
from pptrace.model.messages import MessageEvent

__all__ = ["MAX_SKIP", "align_across", "channel_hole", "retry_of", "unbroken", "unflushed",
           "weakened"]

#: How many records a side may skip to find the partner of a message across a hole.
MAX_SKIP = 8


def retry_of(begins: Iterable[MessageEvent], b: MessageEvent) -> MessageEvent | None:
    """The next receive that began on the thread of a receive that failed (its retry)."""
    later = [m for m in begins if m.thread_id == b.thread_id and m.seq > b.seq]
    return min(later, key=lambda m: m.seq, default=None)


_Ends = list[tuple[Side, MessageEvent]]


def _shape(m: MessageEvent) -> tuple[object, ...]:
    """What a send and its receive agree on in a healthy run: keys, and each key's shape."""
    return (m.keys, tuple((t.key, t.shape, t.dtype, t.is_tensor) for t in m.tensors))


def align_across(out: _Ends, got: _Ends) -> tuple[list[tuple[tuple[Side, MessageEvent],
                                                     tuple[Side, MessageEvent]]], _Ends, _Ends]:
    """Pair a channel's sends with its receives across a hole in either list: where the next
    two differ, skip the fewest records (up to ``MAX_SKIP``, on either side) after which they
    agree; where no skip helps, pair them (a real difference). Return the pairs, the sends
    left unreceived and the receives left unmatched."""
    pairs, left, extra = [], [], []
    i = j = 0
    while i < len(out) and j < len(got):
        a, b = _shape(out[i][1]), _shape(got[j][1])
        if a != b:
            skip = _skip(out, got, i, j)
            if skip is not None:
                si, sj = skip
                left += out[i:i + si]
                extra += got[j:j + sj]
                i, j = i + si, j + sj
                continue
        pairs.append((out[i], got[j]))
        i, j = i + 1, j + 1
    return pairs, left + out[i:], extra + got[j:]


def _skip(out: _Ends, got: _Ends, i: int, j: int) -> tuple[int, int] | None:
    """The fewest sends or receives to skip at (i, j) so that the next pair agrees."""
    for k in range(1, MAX_SKIP + 1):
        if j + k < len(got) and _shape(got[j + k][1]) == _shape(out[i][1]):
            return 0, k  # receives whose sends were lost
        if i + k < len(out) and _shape(out[i + k][1]) == _shape(got[j][1]):
            return k, 0  # sends whose receives were lost
    return None


def channel_hole(holes: Sequence[Holes], s: Side | None, r: Side | None) -> str:
    """Why a channel's records are known to lack some (empty: no known hole)."""
    why = [f"{who(end.rank)}: {holes[end.index].why()}" for end in (s, r)
           if end is not None and holes[end.index].lossy]
    return "; ".join(why)


def weakened(hole: str, kind: FindingKind, severity: Severity | None,
             message: str) -> tuple[Severity | None, str]:
    """A message finding on a channel with a hole (``hole`` says why; empty: none): a warning
    at most, saying why."""
    if not hole or kind.category is not Category.MESSAGE:
        return severity, message
    if (severity or kind.default_severity) > Severity.WARNING:
        severity = Severity.WARNING
    return severity, f"{message} ({hole}: this may be a hole in the trace, not in the run)"


def unflushed(holes: Sequence[Holes], s: Side | None, r: Side, e: MessageEvent,
              uncertainty: Callable[[int, int], float] = lambda a, b: 0.0) -> str:
    """Why ``r``'s receive ``e`` with no send is no evidence (empty: it is): a sender killed, or
    still running, after the send and before its next flush left no record of it. The sender's
    trace going on after the receive ended is evidence only beyond ``uncertainty`` of the two
    processes (``Clocks.uncertainty_ns``: how far their aligned times may be off; inf: no
    order)."""
    if s is None or holes[s.index].final:
        return ""
    ended, bound = e.wall_ns + max(e.duration_ns, 0), uncertainty(s.index, r.index)
    if s.last_ns() - ended > bound:
        return ""
    when = (order(s.last_ns() - ended, bound, "this receive ended") if s.last_ns() > ended
            else "before this receive ended")
    return (f" ({who(s.rank)}'s trace stops {when}, without final stats: the send may not have "
            "been flushed)")


def unbroken(seqs: set[int]) -> int:
    """The lowest seq from which every seq up to the highest is there."""
    low = max(seqs, default=0)
    while low - 1 in seqs:
        low -= 1
    return low
