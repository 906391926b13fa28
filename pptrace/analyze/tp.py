"""Across the last stage's TP ranks: the same payload per microbatch, or a ``tp-disagree``.

Every TP rank of the last stage attaches its own copy of the auxiliary output; stage 0
re-assembles it from their slices, so ranks that disagree give stage 0 a mix that none of them
attached. A trace holds millions of attaches, so what ranks must agree on is computed once per
distinct tensors tuple and interned (``is`` compares it); a difference found that way is
confirmed by the one payload comparison (``pptrace.analyze.payload.same``).

    payloads = TpPayloads()
    ref_payloads = payloads.by_seq(ref_attaches)
    for base, other in payloads.disagreements(ref_attaches, ref_payloads, attaches): ...

    for ref, base, other, ev in stage_disagreements(lasts): ...   # grouped by run and stage

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from pptrace.analyze.payload import Field, compare, same
from pptrace.analyze.rules import NAME_LIMIT, NAMES_SHOWN, tp_of, who
from pptrace.model.records import Event, RankInfo, TensorMeta
from pptrace.model.text import clip

__all__ = ["LastRank", "TpPayloads", "describe_diff", "stage_disagreements", "tp_key",
           "tp_message"]


class TpPayloads:
    """What TP ranks must agree on, per distinct tensors tuple; equal payloads are one object."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, ...]] = {}  # id(tensors): the events keep them alive
        self._shared: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def of(self, tensors: tuple[TensorMeta, ...]) -> tuple[Any, ...]:
        """The interned payload of one tensors tuple."""
        got = self._by_id.get(id(tensors))
        if got is None:
            value = tuple(tp_key(t) for t in tensors)
            got = self._by_id[id(tensors)] = self._shared.setdefault(value, value)
        return got

    def by_seq(self, attaches: Sequence[Event]) -> dict[int, tuple[Any, ...]]:
        """Each attach's payload by its seq (the last attach of a repeated seq wins)."""
        known, payload = self._by_id.get, self.of
        # A payload is never empty (these attaches carry tensors), so ``or`` falls back.
        return {e.seq: known(id(e.tensors)) or payload(e.tensors) for e in attaches}

    def disagreements(self, ref_attaches: Sequence[Event], ref_payloads: dict[int, Any],
                      attaches: Sequence[Event]) -> list[tuple[Event, Event]]:
        """(reference attach, attach) of each seq whose payloads differ, in ``attaches`` order."""
        find, known, payload = ref_payloads.get, self._by_id.get, self.of
        out: list[tuple[Event, Event]] = []
        ref_by_seq: dict[int, Event] = {}  # built for the first disagreement only
        for ev in attaches:
            mine = find(ev.seq)
            if mine is None or mine is (known(id(ev.tensors)) or payload(ev.tensors)):
                continue
            if not ref_by_seq:
                ref_by_seq = {e.seq: e for e in ref_attaches}
            base = ref_by_seq[ev.seq]
            # Unequal keys can still be one payload (a fingerprint against none agrees).
            if not same(base.tensors, ev.tensors):
                out.append((base, ev))
        return out


class LastRank(NamedTuple):
    """One last-stage process that attached: its index in the trace, rank, job and attaches."""

    process: int
    rank: RankInfo
    run_id: str
    attaches: Sequence[Event]


def stage_disagreements(lasts: Sequence[LastRank]
                        ) -> Iterator[tuple[LastRank, Event, LastRank, Event]]:
    """Each attach on which a TP rank of a stage disagreed with the stage's lowest TP rank, as
    (reference, its attach, other rank, its attach); processes are grouped by job and stage."""
    by_stage: dict[tuple[str, int | None], list[LastRank]] = {}
    for last in lasts:
        by_stage.setdefault((last.run_id, last.rank.pp_rank), []).append(last)
    payloads = TpPayloads()
    for group in by_stage.values():
        if len({tp_of(p.rank) for p in group}) < 2:
            continue
        ref = min(group, key=lambda p: tp_of(p.rank))
        ref_payloads = payloads.by_seq(ref.attaches)
        for p in group:
            if p is ref or tp_of(p.rank) == tp_of(ref.rank):
                continue
            for base, ev in payloads.disagreements(ref.attaches, ref_payloads, p.attaches):
                yield ref, base, p, ev


def tp_message(ref: RankInfo, base: Event, other: RankInfo, ev: Event) -> str:
    """``rank 2 (tp 0) attached `e` float32[6] content ab; rank 3 (tp 1) attached ...``."""
    return (f"{who(ref)} (tp {tp_of(ref)}) attached {describe_diff(base.tensors, ev.tensors)}; "
            f"{who(other)} (tp {tp_of(other)}) attached "
            f"{describe_diff(ev.tensors, base.tensors)} for microbatch {ev.seq}")


def tp_key(t: TensorMeta) -> tuple[str, tuple[int, ...], str, bool, int, str, str | None]:
    """What TP ranks' attaches must agree on per tensor (the device index differs by design);
    equal keys mean ``payload.same``, and unequal keys are confirmed by it."""
    return (t.name, t.shape, t.dtype, t.is_tensor, t.nbytes, t.device_type, t.fingerprint)


def describe_diff(mine: Sequence[TensorMeta], theirs: Sequence[TensorMeta]) -> str:
    """``mine``, naming only what differs from ``theirs`` (all of it when the names differ)."""
    verdict = compare(mine, theirs)
    if verdict.missing or verdict.extra or verdict.order_differs:
        shown = [(t, False) for t in mine]
    else:
        shown = [(line.left, Field.DEVICE in line.differs) for line in verdict.differing
                 if line.left is not None]
    parts = []
    for t, device in shown[:NAMES_SHOWN]:
        text = f"`{clip(t.name, NAME_LIMIT)}` {t.describe()}"
        if device:
            text += f" on {t.device}"
        if t.fingerprint:
            text += f" content {_short(t.fingerprint)}"
        parts.append(text)
    if len(shown) > NAMES_SHOWN:
        parts.append(f"and {len(shown) - NAMES_SHOWN} more")
    return ", ".join(parts) if parts else "nothing"


def _short(fingerprint: str | None) -> str:
    return (fingerprint or "")[:12]
