"""The one TP check: the TP ranks of one stage must hold the same payload for the same transfer.

Two layers ask it. The last stage's TP ranks each attach their own copy of the auxiliary output,
and stage 0 re-assembles it from their slices (``tp-disagree``, per microbatch); a sending
stage's TP ranks each send their slice of every tensor whose numel divides by the TP size, and
the receivers re-assemble them with an all-gather (``message-slices-differ``, per send). Ranks
that disagree give the receiving side a mix that none of them had. Each caller maps its events
into ``TpRank``s (which transfers, grouped how, which of their tensors must agree) and words its
own finding (``tp_disagree`` below for attaches, ``pptrace.analyze.slices`` for sends); what
"the same" is, is the one payload comparison's strictest rule
(``pptrace.analyze.payload``: names, order, shape, dtype, bytes, device type, and content when
both sides have a fingerprint), and the wording of what differs is here.

A trace holds millions of transfers, so what ranks must agree on is computed once per distinct
tensors tuple and interned (``is`` compares it); a difference found that way is confirmed by
``payload.same`` and then compared name by name.

    ranks = [TpRank(process, rank, run, attaches), ...]   # group: the run (and kind)
    for d in disagreements(ranks, pick=None):        # per group and stage, the same seq
        d.ref, d.base, d.other, d.it, d.verdict      # verdict: payload.compare(base, it)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pptrace.analyze.payload import Field, NameDiff, PayloadVerdict, compare, same
from pptrace.analyze.rules import NAME_LIMIT, NAMES_SHOWN, rank_id, stage_of, tp_of, who
from pptrace.model.findings import FindingKind
from pptrace.model.records import Event, RankInfo, TensorMeta
from pptrace.model.text import clip

__all__ = ["Disagreement", "TpPayloads", "TpRank", "describe_diff", "disagreements",
           "name_sides", "order_sides", "tp_disagree", "tp_key", "tp_message"]

K = FindingKind
AddFn = Callable[..., int]  # the analyzer's ``add``: a raw finding -> its index
Tensors = tuple[TensorMeta, ...]
#: Which of a transfer's tensors its TP ranks must agree on (None: all of them).
Pick = Callable[[Tensors], Tensors]


class Transfer(Protocol):
    """What the check reads of one transfer (an attach ``Event``, a send ``MessageEvent``)."""

    @property
    def seq(self) -> int: ...
    @property
    def tensors(self) -> Tensors: ...


T = TypeVar("T", bound=Transfer)
#: The payload of nothing to agree on (no tensor picked): one object, and true unlike ``()``.
_NONE: tuple[Any, ...] = (None,)


@dataclass(frozen=True, slots=True)
class TpRank(Generic[T]):
    """One process of a stage: its index in the trace, rank, group and transfers in order."""

    process: int
    rank: RankInfo
    #: What else two ranks' transfers must share to be compared, besides the stage: the run
    #: (and, for messages, the kind: a seq sent as another kind is another check's business).
    group: Hashable
    transfers: Sequence[T]


@dataclass(frozen=True, slots=True)
class Disagreement(Generic[T]):
    """One transfer on which a TP rank disagreed with its stage's lowest TP rank (``ref``)."""

    ref: TpRank[T]
    base: T  # the reference's transfer
    other: TpRank[T]
    it: T  # the other rank's transfer
    verdict: PayloadVerdict  # the picked tensors compared: ``base``'s left, ``it``'s right


class TpPayloads:
    """What TP ranks must agree on, per distinct tensors tuple; equal payloads are one object."""

    def __init__(self, pick: Pick | None = None) -> None:
        self.pick = pick
        self._by_id: dict[int, tuple[Any, ...]] = {}  # id(tensors): the transfers keep them alive
        self._shared: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: The payload of a tensors tuple seen before, by its id, else None; never empty, so
        #: ``known(i) or make(t)`` makes each payload once.
        self.known = self._by_id.get

    def make(self, tensors: Tensors) -> tuple[Any, ...]:
        """Compute, intern and remember the payload of a tensors tuple."""
        value = tuple(map(tp_key, tensors if self.pick is None else self.pick(tensors))) or _NONE
        got = self._by_id[id(tensors)] = self._shared.setdefault(value, value)
        return got

    def picked(self, tensors: Tensors) -> Tensors:
        """The tensors of ``tensors`` that must agree."""
        return tensors if self.pick is None else self.pick(tensors)


def disagreements(ranks: Sequence[TpRank[T]], pick: Pick | None = None
                  ) -> Iterator[Disagreement[T]]:
    """Each transfer on which a TP rank of a stage disagreed with the stage's lowest TP rank.

    Processes are compared within their group and PP stage; the same transfer is the one with
    the same seq (the reference's last of a repeated seq); ``pick`` chooses the tensors that
    must agree. In group and stage order, then TP rank, then the other's transfer order."""
    by_stage: dict[tuple[Hashable, int | None], list[TpRank[T]]] = {}
    for r in ranks:
        by_stage.setdefault((r.group, r.rank.pp_rank), []).append(r)
    payloads = TpPayloads(pick)
    for group in by_stage.values():
        group.sort(key=lambda r: (tp_of(r.rank), r.process))
        ref = group[0]
        by_seq: dict[int, T] | None = None
        for other in group[1:]:
            if tp_of(other.rank) == tp_of(ref.rank):
                continue
            if by_seq is None:
                by_seq = {t.seq: t for t in ref.transfers}
            yield from _differing(payloads, ref, by_seq, other)


def _differing(payloads: TpPayloads, ref: TpRank[T], by_seq: dict[int, T],
               other: TpRank[T]) -> Iterator[Disagreement[T]]:
    find, picked = by_seq.get, payloads.picked
    known, make = payloads.known, payloads.make  # a lookup first: a method call costs more
    for it in other.transfers:
        base = find(it.seq)
        if base is None:
            continue
        mine, theirs = base.tensors, it.tensors
        # Equal tuples are one payload (C's comparison, no key built); so are equal keys,
        # which ignore what may differ (the device index: attaches on cuda:0 and cuda:1).
        if mine == theirs or ((known(id(mine)) or make(mine))
                              is (known(id(theirs)) or make(theirs))):
            continue
        left, right = picked(mine), picked(theirs)
        # Unequal keys can still be one payload (a fingerprint against none agrees).
        if not same(left, right):
            yield Disagreement(ref, base, other, it, compare(left, right))


def tp_disagree(lasts: Sequence[TpRank[Event]], add: AddFn) -> dict[tuple[int, int], int]:
    """The attach layer's use of the check: a ``tp-disagree`` per attach on which a last-stage
    TP rank disagreed; (process, attach seq) -> the index of the raw finding about it."""
    causes: dict[tuple[int, int], int] = {}
    for d in disagreements(lasts):
        ref, other, base, ev = d.ref.rank, d.other.rank, d.base, d.it
        index = add(K.TP_DISAGREE, tp_message(ref, base, other, ev),
                    ranks=[rank_id(ref), rank_id(other)], microbatch=ev.seq,
                    time_ns=min(base.start_ns, ev.start_ns),
                    events=[(d.ref.process, base.direction, base.seq),
                            (d.other.process, ev.direction, ev.seq)],
                    channel=f"{stage_of(other)}/tp{tp_of(ref)}~tp{tp_of(other)}")
        causes.setdefault((d.ref.process, base.seq), index)
        causes.setdefault((d.other.process, ev.seq), index)
    return causes


def tp_key(t: TensorMeta) -> tuple[str, tuple[int, ...], str, bool, int, str, str | None]:
    """What TP ranks must agree on per tensor (the device index differs by design); equal keys
    mean ``payload.same``, and unequal keys are confirmed by it."""
    return (t.name, t.shape, t.dtype, t.is_tensor, t.nbytes, t.device_type, t.fingerprint)


# --- wording: what one rank held against another --------------------------------------------


def tp_message(ref: RankInfo, base: Event, other: RankInfo, ev: Event) -> str:
    """``rank 2 (tp 0) attached `e` float32[6] content ab; rank 3 (tp 1) attached ...``."""
    return (f"{who(ref)} (tp {tp_of(ref)}) attached {describe_diff(base.tensors, ev.tensors)}; "
            f"{who(other)} (tp {tp_of(other)}) attached "
            f"{describe_diff(ev.tensors, base.tensors)} for microbatch {ev.seq}")


def describe_diff(mine: Sequence[TensorMeta], theirs: Sequence[TensorMeta]) -> str:
    """``mine``, naming only what differs from ``theirs`` (all of it when the names differ)."""
    verdict = compare(mine, theirs)
    if verdict.missing or verdict.extra or verdict.order_differs:
        shown = [(t, False) for t in mine]
    else:
        shown = [(line.left, Field.DEVICE in line.differs) for line in verdict.differing
                 if line.left is not None]
    parts = [f"`{clip(t.name, NAME_LIMIT)}` {_held(t, device)}{_content(t)}"
             for t, device in shown[:NAMES_SHOWN]]
    if len(shown) > NAMES_SHOWN:
        parts.append(f"and {len(shown) - NAMES_SHOWN} more")
    return ", ".join(parts) if parts else "nothing"


def name_sides(line: NameDiff, left: str, right: str) -> str:
    """One name as two ranks held it, by what differs: ``float32[8]/tp on rank 2,
    float32[4]/tp on rank 3``, ``fingerprints ab on rank 2, cd on rank 3``, ``nothing`` for a
    side without it."""
    x, y, differs = line.left, line.right, line.differs
    if x is not None and y is not None and not differs & _DESCRIBED:
        if Field.FINGERPRINT in differs:
            return (f"fingerprints {_short(x.fingerprint)} on {left}, "
                    f"{_short(y.fingerprint)} on {right}")
        if Field.BYTES in differs:
            return f"{x.nbytes} bytes on {left}, {y.nbytes} bytes on {right}"
    device = Field.DEVICE in differs
    return f"{_held(x, device)} on {left}, {_held(y, device)} on {right}"


#: Differences a value's description (``TensorMeta.describe``, its device) shows by itself.
_DESCRIBED = frozenset({Field.SHAPE, Field.DTYPE, Field.DEVICE})


def order_sides(verdict: PayloadVerdict, left: str, right: str) -> str:
    """The names both sides hold, in each side's order: ``in the order `a`, `b` on rank 2,
    `b`, `a` on rank 3``."""
    def names(order: tuple[str, ...]) -> str:
        shown = [f"`{clip(n, NAME_LIMIT)}`" for n in order[:NAMES_SHOWN]]
        more = len(order) - NAMES_SHOWN
        return ", ".join(shown + ([f"and {more} more"] if more > 0 else []))
    return (f"in the order {names(verdict.left_order)} on {left}, "
            f"{names(verdict.right_order)} on {right}")


def _held(t: TensorMeta | None, device: bool) -> str:
    if t is None:
        return "nothing"
    return f"{t.describe()} on {t.device}" if device else t.describe()


def _content(t: TensorMeta) -> str:
    return f" content {_short(t.fingerprint)}" if t.fingerprint else ""


def _short(fingerprint: str | None) -> str:
    return (fingerprint or "")[:12]
