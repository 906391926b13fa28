"""Calls no channel paired: counted and named, so that no report says they agree.

The channel plan (``pptrace.analyze.channels``) pairs a last stage's attaches with stage 0's
extracts, and a round trip's attaches with its own extracts. A payload-carrying call on a process
that ends no channel in its direction was compared with nothing: a finding (``unpaired-calls``,
info) counts those calls per process and says why, instead of letting "no findings" read as
"they agree". Extracts off stage 0 are left out here: ``extract-off-stage0`` names them already.

    for index, text, events in unpaired(procs, scans, ends):
        ...

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pptrace.analyze.rules import stage_of, tp_of, who
from pptrace.analyze.scan import Scan
from pptrace.model.records import Direction, Event, RankInfo
from pptrace.model.text import plural

__all__ = ["unpaired"]

Ref = tuple[int, Direction, int]


def _why_attach(rank: RankInfo, pp_size: int | None) -> str:
    """Why a process's attaches are on no channel."""
    if rank.pp_rank is not None and pp_size is not None and rank.pp_rank != pp_size - 1:
        return (f"{stage_of(rank)} is not the last PP stage (pp_size {pp_size}), where attach "
                "runs, so no extract is expected to pair with them")
    if rank.pp_rank is not None:
        return f"{stage_of(rank)} is not the last PP stage this trace shows"
    return "no channel takes them"


def unpaired(procs: Sequence[Any], scans: Sequence[Scan],
             ends: set[tuple[int, Direction]]) -> Iterator[tuple[int, str, list[Ref]]]:
    """(process index, message, the first unpaired call of each direction) per process whose
    payload-carrying calls no channel took (``ends``: the (process, direction) ends paired)."""
    sizes = [p.rank.pp_size for p in procs if p.rank.pp_size is not None]
    pp_size = max(sizes) if sizes else None
    for p in procs:
        found = scans[p.index]
        rank: RankInfo = p.rank
        attaches: list[Event] = (found.attaches if (p.index, Direction.ATTACH) not in ends
                                 else [])
        off_stage0 = rank.pp_rank is not None and rank.pp_rank != 0
        extracts: list[Event] = (found.extracts if (p.index, Direction.EXTRACT) not in ends
                                 and not off_stage0 else [])
        if not attaches and not extracts:
            continue
        parts = [f"{plural(len(calls), f'{what} call')} ({why})" for what, calls, why in
                 (("attach", attaches, _why_attach(rank, pp_size) if attaches else ""),
                  ("extract", extracts, "no channel takes them")) if calls]
        text = (f"{who(rank)} ({stage_of(rank)}, tp {tp_of(rank)}): {' and '.join(parts)} could "
                "not be paired; they were not compared")
        events = [(p.index, calls[0].direction, calls[0].seq)
                  for calls in (attaches, extracts) if calls]
        yield p.index, text, events
