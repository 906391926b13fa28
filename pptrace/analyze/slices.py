"""TP slices across a sending stage's TP ranks: the message layer's use of the one TP check.

SGLang's send path sends a tensor whose numel divides by the TP size as this TP rank's slice,
and the receiver re-assembles the slices with an all-gather. A tensor that is not
TP-replicated then arrives as a mix of the ranks' tensors: silent corruption. The same message
is the same send seq of the same kind on each TP rank (they run in lock step); what must agree
is what each rank sent as slices, judged by ``pptrace.analyze.tp`` (one finding per name that
differs, and one when the slices' order does). Pure.

    slices = tp_slices(sides, add)   # (process, send seq) -> the raw finding's index
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from pptrace.analyze.message_sides import Side
from pptrace.analyze.payload import NameDiff
from pptrace.analyze.rules import rank_id, who
from pptrace.analyze.tp import AddFn, Disagreement, TpRank, disagreements, name_sides, order_sides
from pptrace.analyze.waits import place, wanted
from pptrace.model.findings import FindingKind, MessageId
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta
from pptrace.model.text import clip

__all__ = ["tp_slices"]

K = FindingKind
SEND = MessageOp.SEND
_KIND = attrgetter("kind")


def tp_slices(sides: Sequence[Side], add: AddFn) -> dict[tuple[int, int], int]:
    """Each send whose TP slices differ from another TP rank's: (process, send seq) -> the
    index of the raw finding about it."""
    ranks = []
    for s in sides:
        if s.rank.pp_rank is None:
            continue
        kinds = set(map(_KIND, s.sends))  # most stages send one kind: nothing to split
        ranks += [TpRank(s.index, s.rank, (s.run, kind),
                         s.sends if len(kinds) == 1 else [m for m in s.sends if m.kind == kind])
                  for kind in sorted(kinds)]
    prefixes = {s.index: s.prefix for s in sides}
    slices: dict[tuple[int, int], int] = {}
    for d in disagreements(ranks, pick=_sliced):
        for key, what in _differences(d):
            index = _finding(d, key, what, prefixes[d.other.process], add)
            slices.setdefault((d.ref.process, d.base.seq), index)
            slices.setdefault((d.other.process, d.it.seq), index)
    return slices


def _sliced(tensors: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
    return tuple(t for t in tensors if t.sliced)


def _differences(d: Disagreement[MessageEvent]) -> list[tuple[str, str]]:
    """(key, what differs) per name that differs, then the order when it does."""
    left, right = who(d.ref.rank), who(d.other.rank)
    out = []
    for line in d.verdict.differing:
        if line.left is None or line.right is None:  # sent whole, or not at all, by the other
            line = NameDiff(line.name, line.left or _named(d.base, line.name),
                            line.right or _named(d.it, line.name), line.differs)
        out.append((line.name, name_sides(line, left, right)))
    if d.verdict.order_differs:
        first = next(a for a, b in zip(d.verdict.left_order, d.verdict.right_order, strict=True)
                     if a != b)
        out.append((first, order_sides(d.verdict, left, right)))
    return out


def _named(m: MessageEvent, name: str) -> TensorMeta | None:
    return next((t for t in m.tensors if t.name == name), None)


def _finding(d: Disagreement[MessageEvent], key: str, what: str, prefix: str,
             add: AddFn) -> int:
    ref, other, base, m = d.ref.rank, d.other.rank, d.base, d.it
    return add(
        K.MSG_SLICES_DIFFER,
        f"{who(ref)} ({place(ref)}) and {who(other)} ({place(other)}) "
        f"sent `{clip(key, 200)}` as TP slices of different tensors in "
        f"{wanted(m.kind)} #{m.seq} ({what}): the receivers re-assemble a mix of them "
        "(a tensor that is not TP-replicated sent as slices: silent corruption)",
        ranks=[rank_id(ref), rank_id(other)], time_ns=min(base.wall_ns, m.wall_ns),
        channel=f"{prefix}pp{other.pp_rank}/tp{ref.tp_rank or 0}"
        f"~tp{other.tp_rank or 0}", subject=f"{m.kind}:{key}",
        microbatch=m.carries_attach,
        messages=[MessageId(d.ref.process, SEND, base.seq),
                  MessageId(d.other.process, SEND, m.seq)])
