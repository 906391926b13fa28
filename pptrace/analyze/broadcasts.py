"""Broadcasts judged across ranks: one source's send paired with a receive on every other member.

A broadcast (``MessageEvent.group`` set) is a send on its source and a receive on each other
member of the group. Per (source, group) the source's broadcasts and each member's receives
from that source are taken in order, first in first out (a group broadcasts in lock step, so
the n-th broadcast of the source is the n-th receive of every member), paired by the walk
every channel gets (``message_align.pair_channel``: a gap is skipped, not a cascade), and per
pair the payload is compared by the one payload comparison (``pptrace.analyze.message_payload``,
which rests on ``pptrace.analyze.payload.differs``). Named:

- a member whose receive differs from what the source sent (keys, shape, dtype, bytes, device,
  content where both ends fingerprinted): the ``message-*-mismatch`` kinds of a point-to-point
  pair, one per difference, naming the source and that member;
- a broadcast a member never received while its trace went on (``message-never-received``);
  one it waits for when the traces stop is the wait machinery's ``message-hang``
  (``pptrace.analyze.waits``: the member's receive began before it blocked, from the source);
- a member's receive from a source with no broadcast left to pair it with
  (``message-unmatched-recv``).

A process numbers its broadcasts apart from its point-to-point messages. Where one end of a
broadcast channel kept only its newest messages (rotated away or overwritten), the channel is
paired by seq when the seqs are the channel's own (the source broadcasts in this group alone and
receives none there; the member receives only this source's broadcasts in it and sources none:
broadcast send #n is broadcast receive #n), judging only what both ends kept, as a cut
point-to-point channel is; otherwise the cut end gets a ``message-cut`` info and nothing is
claimed there.

    pairs = check_broadcasts(check)   # send -> each member's receive, in group order

Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

from pptrace.analyze import message_align as across
from pptrace.analyze.holes import Holes
from pptrace.analyze.message_payload import differences
from pptrace.analyze.message_sides import Pair, Side
from pptrace.analyze.rules import rank_id, who
from pptrace.analyze.waits import Uncertainty, goes_on, in_flight, members, numbered, place, wanted
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent
from pptrace.model.records import RankInfo

__all__ = ["Check", "check_broadcasts"]


class Check(Protocol):
    """What the message checks (``pptrace.analyze.messages``) lend the broadcast checks."""

    sides: list[Side]
    by_rank: dict[tuple[str, int], Side]
    ranks: dict[tuple[str, int], RankInfo]
    holes: Sequence[Holes]
    hole: str
    unaligned: dict[int, str]  # cut process -> why a channel of it is not paired
    uncertainty: Uncertainty  # how far two processes' aligned times may be off each other

    def add(self, kind: FindingKind, message: str, *, ranks: Iterable[int], time_ns: int | None,
            channel: str, subject: str = "", microbatch: int | None = None,
            messages: Iterable[MessageId] = (), severity: Severity | None = None,
            cause: int | None = None) -> int: ...

    def unmatched(self, r: Side, e: MessageEvent, s: Side | None = None) -> None: ...

    def pair(self, kind: FindingKind, p: Pair, message: str, subject: str,
             cause: int | None = None) -> None: ...

K = FindingKind
_Calls = list[tuple[Side, MessageEvent]]


def check_broadcasts(chk: Check) -> dict[MessageId, tuple[MessageId, ...]]:
    """Pair every broadcast with each member's receive; add the findings to ``chk``; return
    each broadcast's send -> the receives it reached (in group order)."""
    sends: dict[tuple[str, int, tuple[int, ...]], _Calls] = defaultdict(list)
    recvs: dict[tuple[str, int, tuple[int, ...], int], _Calls] = defaultdict(list)
    for side in chk.sides:
        me = rank_id(side.rank)
        for m in side.bsends:
            if m.ok:
                sends[(side.run, me, m.group)].append((side, m))
        for e in side.bends:
            if e.ok and e.peer >= 0:
                recvs[(side.run, e.peer, e.group, me)].append((side, e))
    reached: dict[MessageId, list[MessageId]] = defaultdict(list)
    keys = set(sends) | {(run, src, group) for run, src, group, _ in recvs}
    for run, src, group in sorted(keys):
        s = chk.by_rank.get((run, src))
        out = sends.get((run, src, group), [])
        for member in group:
            if member == src:
                continue
            r = chk.by_rank.get((run, member))
            got = recvs.get((run, src, group, member), [])
            chk.hole = across.channel_hole(chk.holes, s, r)
            if (s is not None and s.cut) or (r is not None and r.cut):
                why = ("" if s is None or r is None  # one end untraced: nothing to pair
                       else _by_seq(chk, s, r, group, reached))
                for end in (s, r):
                    if why and end is not None and end.cut:
                        chk.unaligned.setdefault(end.index, why)
                chk.hole = ""
                continue
            matched, left, extra, _ = across.pair_channel(out, got)
            for (side, m), (rside, e) in matched:
                reached[MessageId.of(side.index, m)].append(MessageId.of(rside.index, e))
                _compare(chk, side, m, rside, e)
            if left and (r is not None or (run, member) in chk.ranks):
                _never_received(chk, left, r, member)
            if extra and (run, src) in chk.ranks:
                for rside, e in extra:
                    chk.unmatched(rside, e, s)
            chk.hole = ""
    return {send: tuple(got) for send, got in reached.items()}


def _by_seq(chk: Check, s: Side, r: Side, group: tuple[int, ...],
            reached: dict[MessageId, list[MessageId]]) -> str:
    """Pair a broadcast channel one of whose ends was cut, when its seqs are the channel's own
    (see the module docstring), judging what both ends kept; else say why not."""
    src, dst = rank_id(s.rank), rank_id(r.rank)
    if any(m.group != group for m in s.bsends) or any(e.group == group for e in s.bends):
        return (f"rank {src} broadcasts in more than one group, or receives broadcasts in this "
                "one: where the channel starts in its broadcast seqs cannot be told")
    theirs = list(r.bends) + list(r.bbegins.values())
    if any(e.peer != src or e.group != group for e in theirs) or any(
            m.group == group for m in r.bsends):
        return (f"rank {dst} receives broadcasts from more than one source or group: where the "
                "channel starts in its broadcast seqs cannot be told")
    pairs, left, extra = across.by_seq(s, r, s.bsends, r.bends, r.bbegins, same_kind=False)
    for m, e in pairs:
        reached[MessageId.of(s.index, m)].append(MessageId.of(r.index, e))
        _compare(chk, s, m, r, e)
    if left:
        _never_received(chk, [(s, m) for m in left], r, dst)
    for e in extra:
        chk.unmatched(r, e, s)
    return ""


def _compare(chk: Check, s: Side, m: MessageEvent, r: Side, e: MessageEvent) -> None:
    """What differs between a broadcast and one member's receive of it."""
    if m.keys == e.keys and m.tensors == e.tensors:
        return
    pair = Pair(s, m, r, e, s.prefix + f"{place(s.rank)}->{place(r.rank)}")
    for kind, message, subject in differences(pair):
        chk.pair(kind, pair, message, subject)


def _waiting(r: Side, src: int, group: tuple[int, ...]) -> bool:
    """Whether ``r`` began a receive of this broadcast that never returned (a wait: the hang's
    finding names it, not this one)."""
    ended = {e.seq for e in r.bends}
    return any(b.group == group and b.peer == src and b.seq not in ended
               for b in r.bbegins.values())


def _never_received(chk: Check, left: _Calls, r: Side | None, member: int) -> None:
    if r is not None and _waiting(r, rank_id(left[0][0].rank), left[0][1].group):
        return
    # A broadcast surely after the member's trace stopped was in flight: it never had the chance.
    stop = r.last_ns() if r is not None else 0
    for side, m in left:
        bound = chk.uncertainty(side.index, r.index) if r is not None else 0.0
        if r is not None and in_flight(stop, m.wall_ns, bound):
            continue
        dst = r.rank if r is not None else chk.ranks[(side.run, member)]
        why, severity = ("(it recorded no message at all)", None) if r is None else goes_on(
            stop, m.wall_ns, bound, "broadcast")
        chk.add(K.MSG_NEVER_RECEIVED,
                f"{who(side.rank)} ({place(side.rank)}) broadcast {wanted(m.kind)} "
                f"({numbered(m)}) to its group {members(m.group)}; {who(dst)} ({place(dst)}) never "
                f"received it {why}", severity=severity,
                ranks=[rank_id(side.rank), member], time_ns=m.wall_ns,
                channel=side.prefix + f"{place(side.rank)}->{place(dst)}", subject=m.kind,
                messages=[MessageId.of(side.index, m)])
