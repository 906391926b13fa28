"""The hang: receives that began and never returned when the traces stop, and cycles of them.

A receive records its ``begin`` before it blocks, so a rank that hangs in one leaves which kind
it waited for and from whom; one that gave up at its timeout leaves the error too. Each such
wait is a ``message-hang`` finding naming the waiter, the kind, the peer, and what the peer's
trace says: what it last sent to the waiter (kind, seq, when), that it left no trace, or that it
waits too, with the chain of waits it leads to, named as a deadlock when the chain comes back
to the waiter (rank 0 waits for rank 3, which waits for rank 0).

Times on two processes are compared as aligned (``pptrace.analyze.aligned``); where they are
closer than the clocks' uncertainty, the finding does not say which came first.

A wait the trace cannot tell from one that ended is a warning that says why (``Wait.unsure``: its
trace has no final stats, so the run may still be going, or it has holes); so is a receive that
failed at its timeout and was retried (``Wait.retried``), which blocks nothing and is no part of
a cycle.

    judge_waits(waits, trails, add, clocks.uncertainty_ns)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pptrace.analyze.aligned import UNALIGNED, order
from pptrace.analyze.rules import rank_id, who
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import RankInfo
from pptrace.model.text import clip

__all__ = ["Trail", "Uncertainty", "Wait", "goes_on", "judge_waits", "labelled", "members",
           "numbered", "place", "wanted"]

K = FindingKind
_INF = float("inf")
Node = tuple[str, int]  # (run, global rank)


def place(rank: RankInfo) -> str:
    """``pp3``, ``pp3/tp1`` under TP, or ``rank7`` when the stage is unknown."""
    if rank.pp_rank is None:
        return f"rank{rank_id(rank)}"
    tp = f"/tp{rank.tp_rank}" if (rank.tp_size or 1) > 1 and rank.tp_rank is not None else ""
    return f"pp{rank.pp_rank}{tp}"


def labelled(kind: str) -> str:
    """```output``` message, or message for a message of no kind."""
    return f"`{clip(kind, 60)}` message" if kind else "message"


def wanted(kind: str) -> str:
    """an ```output``` message, a ```proxy``` message, or a message (one of no kind)."""
    return f"{'an' if kind[:1] in tuple('aeiouAEIOU') else 'a'} {labelled(kind)}"


def numbered(m: MessageEvent) -> str:
    """``send #3``, ``receive #3``, or ``broadcast send #3`` (a broadcast's own numbering)."""
    what = "send" if m.op is MessageOp.SEND else "receive"
    return f"{'broadcast ' if m.broadcast else ''}{what} #{m.seq}"


def members(group: tuple[int, ...]) -> str:
    """A broadcast group's global ranks: ``[3, 4, 5]``."""
    return "[" + ", ".join(map(str, group)) + "]"


@dataclass(frozen=True, slots=True)
class Wait:
    """A receive that began and never returned."""

    process: int
    rank: RankInfo
    run: str
    prefix: str  # the channel-name prefix (the run, when several are analysed together)
    begin: MessageEvent
    end: MessageEvent | None = None  # the receive's end when it raised (its timeout)
    retried: MessageEvent | None = None  # the next receive on its thread: it did not block
    unsure: str = ""  # why the trace cannot tell this wait from one that ended (a warning)


@dataclass(frozen=True, slots=True)
class Trail:
    """What one process's trace says about it, for the ranks that wait on it."""

    rank: RankInfo
    last_sends: Mapping[int, MessageEvent]  # receiver global rank -> the last send to it
    stop_ns: int  # when its trace stops
    complete: bool  # final stats: it shut down
    process: int = -1  # its index in the trace (whose clock its times are on)


#: How far two processes' aligned times may be from their true distance (ns).
Uncertainty = Callable[[int, int], float]


def in_flight(stop_ns: int, sent_ns: int, uncertainty_ns: float) -> bool:
    """Whether a message sent at ``sent_ns`` was surely still in flight when the receiver's
    trace stopped at ``stop_ns``: sent after it by more than the clocks' uncertainty (on
    unaligned clocks, sent after it at all). Within the uncertainty it may have been either,
    and ``goes_on`` words it so: dropping it there made two hosts' run say less than one's."""
    return sent_ns - stop_ns > (0.0 if uncertainty_ns == _INF else uncertainty_ns)


def goes_on(stop_ns: int, sent_ns: int, uncertainty_ns: float,
            what: str) -> tuple[str, Severity | None]:
    """Why a message the receiver's trace outlived was no message in flight (``(its trace goes
    on after the send)``), and the finding's severity: a warning where the trace stops within
    the clocks' uncertainty of when the ``what`` (``send``) began, which may be after it."""
    if uncertainty_ns != _INF and uncertainty_ns and stop_ns - sent_ns <= uncertainty_ns:
        near = order(stop_ns - sent_ns, uncertainty_ns, f"the {what} began")
        return f"(its trace stops {near}: it may have been in flight)", Severity.WARNING
    loose = f", {UNALIGNED}" if uncertainty_ns == _INF else ""
    return f"(its trace goes on after the {what}{loose})", None


def _ago(ns: int, w: Wait, trail: Trail, uncertainty: Uncertainty) -> str:
    return order(ns - w.begin.wall_ns, uncertainty(trail.process, w.process), "the wait began")


def _label(rank: RankInfo) -> str:
    return f"{who(rank)} ({place(rank)})"


AddFn = Callable[..., int]


def judge_waits(waits: Sequence[Wait], trails: Mapping[Node, Trail], add: AddFn,
                uncertainty: Uncertainty = lambda a, b: 0.0) -> None:
    """One finding per wait, each naming the chain (or the cycle) of waits it leads to;
    ``uncertainty(a, b)``: how far process a's and b's times may be off each other."""
    by_node: dict[Node, Wait] = {}
    for w in sorted(waits, key=lambda w: w.begin.wall_ns):
        if w.retried is None:  # a receive that failed and was retried blocks nothing
            by_node.setdefault((w.run, rank_id(w.rank)), w)  # a rank's earliest wait blocks it
    for w in waits:
        _hang(w, by_node, trails, add, uncertainty)


def _chain(start: Node, by_node: Mapping[Node, Wait]) -> str:
    """``rank 0 -> rank 3 -> rank 1``, or the cycle it comes back to, named as a deadlock."""
    seen, node = [start], (start[0], by_node[start].begin.peer)
    while node not in seen:
        seen.append(node)
        if node not in by_node:  # the chain ends at a rank that does not wait
            return " -> ".join(f"rank {n[1]}" for n in seen)
        node = (node[0], by_node[node].begin.peer)
    names = " -> ".join(f"rank {n[1]}" for n in seen)
    return f"{names} -> rank {node[1]}: a cycle of waits (deadlock)"


def _ref(w: Wait) -> MessageId:
    return MessageId.of(w.process, w.begin)


def _peer(w: Wait) -> RankInfo:
    b = w.begin
    return RankInfo(rank=b.peer if b.peer >= 0 else None, pp_rank=b.peer_pp_rank,
                    tp_rank=b.peer_tp_rank, tp_size=w.rank.tp_size)


def _hang(w: Wait, by_node: Mapping[Node, Wait], trails: Mapping[Node, Trail],
          add: AddFn, uncertainty: Uncertainty) -> None:
    b, me = w.begin, rank_id(w.rank)
    peer_node = (w.run, b.peer)
    trail = trails.get(peer_node)
    peer = trail.rank if trail is not None else _peer(w)
    if w.end is None:
        ended = "and it never returned when the traces stop"
    else:
        waited = (w.end.wall_ns + max(w.end.duration_ns, 0) - b.wall_ns) / 1e9
        ended = (f"and it failed {waited:.3f} s later with {clip(w.end.error_type or '', 200)}: "
                 f"{clip(w.end.error_message or '', 200)}")
    if w.retried is not None:
        ended += (f", and was retried: its {numbered(w.retried)} began "
                  f"{(w.retried.wall_ns - b.wall_ns) / 1e9:.3f} s after this one")
    head = (f"{_label(w.rank)} waits for {wanted(b.expected_kind)} from {_label(peer)} since "
            f"its {numbered(b)} began, {ended}")
    if b.peer < 0:
        said = "the peer is unknown"
    elif trail is None:
        said = f"{who(peer)} left no trace (was it traced? did it start?)"
    else:
        last = trail.last_sends.get(me)
        said = (f"{who(peer)} last sent it {wanted(last.kind)} ({numbered(last)}, "
                f"{_ago(last.wall_ns, w, trail, uncertainty)})" if last is not None else
                f"{who(peer)} sent it nothing")
        theirs = by_node.get(peer_node)
        if theirs is not None and w.retried is None:
            said += (f", and waits too: for {wanted(theirs.begin.expected_kind)} from rank "
                     f"{theirs.begin.peer} ({_chain((w.run, me), by_node)})")
        elif trail.complete:
            said += (f"; its trace ends with final stats "
                     f"{_ago(trail.stop_ns, w, trail, uncertainty)}")
        else:
            said += f"; its trace stops {_ago(trail.stop_ns, w, trail, uncertainty)}"
    if w.unsure:
        said += f" ({w.unsure})"
    weak = w.retried is not None or bool(w.unsure)
    add(K.MSG_HANG, f"{head}: {said}", ranks=[me, b.peer] if b.peer >= 0 else [me],
        time_ns=b.wall_ns,
        channel=w.prefix + f"{place(peer)}->{place(w.rank)}",
        subject=b.expected_kind, messages=[_ref(w)],
        severity=Severity.WARNING if weak else None)
