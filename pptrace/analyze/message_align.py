"""Pairing a message channel (point-to-point or one member of a broadcast), and the message
checks across a hole in a trace: the findings it weakens, a failed receive's retry, a send made
after its sender's last flush.

In order, the n-th send of a kind on a channel pairs with the n-th receive; a record lost from
either list (``pptrace.analyze.holes``) shifts every pair after it. ``pair_channel`` pairs a
channel with the analyzer's one pairing walk (``pptrace.analyze.pairing.align``, as attaches
pair with extracts): where the next send and receive disagree (keys, each key's shape and dtype)
it skips the records whose skipping best explains what follows, so one lost send is one receive
with no send, not a cascade of false mismatches.

    pairs, unreceived, unmatched, alignment = pair_channel(sends, receives)
    hole = channel_hole(holes, sender, receiver)   # "" when neither end has one
    severity, message = weakened(hole, kind, severity, message)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pptrace.analyze.aligned import order
from pptrace.analyze.holes import Holes
from pptrace.analyze.message_sides import Side
from pptrace.analyze.pairing import Alignment, align
from pptrace.analyze.rules import who
from pptrace.model.findings import Category, FindingKind, Severity
from pptrace.model.messages import MessageEvent

__all__ = ["by_seq", "channel_hole", "pair_channel", "retry_of", "unbroken", "unflushed",
           "weakened"]


def retry_of(begins: Iterable[MessageEvent], b: MessageEvent) -> MessageEvent | None:
    """The next receive that began on the thread of a receive that failed (its retry)."""
    later = [m for m in begins if m.thread_id == b.thread_id and m.seq > b.seq]
    return min(later, key=lambda m: m.seq, default=None)


_Ends = list[tuple[Side, MessageEvent]]


def pair_channel(out: _Ends, got: _Ends, found: Alignment | None = None
                 ) -> tuple[list[tuple[tuple[Side, MessageEvent], tuple[Side, MessageEvent]]],
                            _Ends, _Ends, Alignment]:
    """Pair a channel's sends with its receives, both in call order: ``pairing.align`` on the
    messages' shapes (or ``found``, the channel's alignment from an earlier pass over the same
    calls). Neither time nor seqs hint: a receive may begin before its send, and a process
    numbers its sends (and its receives) across peers, kinds, failed calls and stashes, so a
    step between the numbers says nothing of this channel. Return the pairs, the sends left
    unreceived, the receives left unmatched and the alignment."""
    if found is not None:  # an earlier pass's, kept only if it covers these very lists
        paired = sum(n for _, _, n in found.runs)
        if (paired + len(found.orphans), paired + len(found.unmatched)) != (len(out), len(got)):
            found = None
    if found is None:
        found = align([m for _, m in out], [e for _, e in got], False, keyed=True,
                      stepped=False)
    pairs: list[tuple[tuple[Side, MessageEvent], tuple[Side, MessageEvent]]] = []
    for i, j, n in found.runs:  # (a healthy channel is one run)
        pairs += zip(out[i:i + n], got[j:j + n], strict=True)
    return pairs, [out[i] for i in found.orphans], [got[j] for j in found.unmatched], found


def by_seq(s: Side, r: Side, sends: Sequence[MessageEvent], ends: Sequence[MessageEvent],
           begins: Iterable[int], same_kind: bool = True
           ) -> tuple[list[tuple[MessageEvent, MessageEvent]], list[MessageEvent],
                      list[MessageEvent]]:
    """Pair a channel one of whose ends was cut, whose seqs are the channel's own (send #n is
    receive #n; the caller checked): ``s``'s ``sends`` with ``r``'s ``ends`` (``begins``: the
    seqs of its receives that began). Absences are judged only where each end's kept seqs run
    without a gap to its last one (a batch written late can sit in a segment rotated away
    before older ones), and not at all against an end cut so that it kept none of its calls.
    Return the pairs, the sends never received and the receives with no send."""
    got = {e.seq: e for e in ends if e.ok}
    out = {m.seq for m in sends}
    begun = set(begins)
    kept = {e.seq for e in ends} | begun
    first_recv = None if not kept and r.cut else unbroken(kept)
    first_send = None if not out and s.cut else unbroken(out)
    pairs, left = [], []
    for m in sends:
        e = got.get(m.seq)
        if e is not None and m.ok and (not same_kind or e.kind == m.kind):
            pairs.append((m, e))
        elif (e is None and m.ok and first_recv is not None and m.seq >= first_recv
              and m.seq not in begun):
            left.append(m)
    extra = [e for seq, e in got.items()
             if seq not in out and first_send is not None and seq >= first_send]
    return pairs, left, extra


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
