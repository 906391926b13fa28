"""TP slices across a sending stage's TP ranks: a tensor sent as slices must be one tensor.

SGLang's send path sends a tensor whose numel divides by the TP size as this TP rank's slice,
and the receiver re-assembles the slices with an all-gather. A tensor that is not
TP-replicated (its shape, dtype or fingerprint differs across the sending stage's TP ranks for
the same message) then arrives as a mix of them: silent corruption. The same message is the
same send seq on each TP rank (they run in lock step). Pure.

    slices = tp_slices(sides, add)   # (process, send seq) -> the raw finding's index
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from pptrace.analyze.message_sides import Side
from pptrace.analyze.rules import rank_id, who
from pptrace.analyze.waits import place, wanted
from pptrace.model.findings import FindingKind, MessageId
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.text import clip

__all__ = ["tp_slices"]

K = FindingKind
SEND = MessageOp.SEND
AddFn = Callable[..., int]


def tp_slices(sides: Sequence[Side], add: AddFn) -> dict[tuple[int, int], int]:
    """Each send whose TP slices differ from another TP rank's: (process, send seq) -> the
    index of the raw finding about it."""
    slices: dict[tuple[int, int], int] = {}
    stages: dict[tuple[str, int], list[Side]] = defaultdict(list)
    for side in sides:
        if side.rank.pp_rank is not None and side.sends:
            stages[(side.run, side.rank.pp_rank)].append(side)
    for group in stages.values():
        group.sort(key=lambda s: (s.rank.tp_rank or 0, s.index))
        ref = group[0]
        ref_sends = {m.seq: m for m in ref.sends}
        for other in group[1:]:
            if other.rank.tp_rank == ref.rank.tp_rank:
                continue
            for m in other.sends:
                base = ref_sends.get(m.seq)
                if base is None or base.kind != m.kind or base.tensors == m.tensors:
                    continue
                _differ(ref, base, other, m, add, slices)
    return slices

def _differ(ref: Side, base: MessageEvent, other: Side, m: MessageEvent, add: AddFn,
            slices: dict[tuple[int, int], int]) -> None:
    mine = {t.key: t for t in base.tensors}
    for t in m.tensors:
        b = mine.get(t.key)
        if b is None or not (b.sliced or t.sliced):
            continue
        if (b.shape, b.dtype) != (t.shape, t.dtype):
            what = f"{b.describe()} on {who(ref.rank)}, {t.describe()} on {who(other.rank)}"
        elif b.fingerprint and t.fingerprint and b.fingerprint != t.fingerprint:
            what = (f"fingerprints {b.fingerprint[:12]} on {who(ref.rank)}, "
                    f"{t.fingerprint[:12]} on {who(other.rank)}")
        else:
            continue
        index = add(
            K.MSG_SLICES_DIFFER,
            f"{who(ref.rank)} ({place(ref.rank)}) and {who(other.rank)} ({place(other.rank)}) "
            f"sent `{clip(t.key, 200)}` as TP slices of different tensors in "
            f"{wanted(m.kind)} #{m.seq} ({what}): the receivers re-assemble a mix of them "
            "(a tensor that is not TP-replicated sent as slices: silent corruption)",
            ranks=[rank_id(ref.rank), rank_id(other.rank)],
            time_ns=min(base.wall_ns, m.wall_ns),
            channel=f"{other.prefix}pp{other.rank.pp_rank}/tp{ref.rank.tp_rank or 0}"
            f"~tp{other.rank.tp_rank or 0}", subject=f"{m.kind}:{t.key}",
            microbatch=m.carries_attach,
            messages=[MessageId(ref.index, SEND, base.seq), MessageId(other.index, SEND,
                                                                      m.seq)])
        slices.setdefault((ref.index, base.seq), index)
        slices.setdefault((other.index, m.seq), index)
