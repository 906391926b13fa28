"""Which attach went with which extract, as grid coordinates for the viewer.

Two sources, in order of trust:
1. a finding's ``events`` (attach first, extract second) names a pair the analyzer made;
2. otherwise the analyzer's own channel pairing (``pptrace.analyze.pairing.align``: FIFO per
   channel, re-aligned across gaps) between the last stage's TP rank j and stage 0's TP rank j.

    pairing = pair_runs(trace, findings)
    for run in pairing.runs:
        run.attach_process, run.attach_seq, run.extract_process, run.extract_seq, run.length
    for process, direction, seq in pairing.unpaired: ...   # what the walk left unpaired
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pptrace.analyze.pairing import align
from pptrace.analyze.window import excused
from pptrace.model.findings import Finding
from pptrace.model.records import Direction, Event
from pptrace.model.trace import Trace

__all__ = ["Pairing", "Run", "pair_runs", "receives", "sends"]


@dataclass(frozen=True, slots=True)
class Run:
    """``length`` consecutive pairs: attach seq ``attach_seq + k`` with extract seq
    ``extract_seq + k``. A healthy channel is one run, so 1M events cost a handful of these."""

    attach_process: int
    attach_seq: int
    extract_process: int
    extract_seq: int
    length: int = 1


@dataclass(frozen=True, slots=True)
class Pairing:
    """Every pair as runs, and the calls that took part in a transfer but found no partner
    (an attach no extract received, an extract with no attach: the analyzer's orphans and
    unmatched extracts, found by the same walk)."""

    runs: list[Run]
    unpaired: list[tuple[int, Direction, int]]  # (process, direction, seq)


def sends(event: Event) -> bool:
    """An attach that put something in the dict and returned normally (so it was sent)."""
    return event.error_type is None and bool(event.tensors)


def receives(event: Event) -> bool:
    """An extract that found prefixed values (whether or not the engine then raised)."""
    return bool(event.tensors)


def _has(events: Sequence[Event], direction: Direction) -> bool:
    return any(ev.direction is direction for ev in events)


def _attach_side(trace: Trace) -> dict[int | None, list[int]]:
    out: dict[int | None, list[int]] = defaultdict(list)
    for i, proc in enumerate(trace.processes):
        rank = proc.rank
        if rank.is_last_stage or (rank.pp_rank is None and _has(proc.events, Direction.ATTACH)):
            out[rank.tp_rank].append(i)
    return out


def _extract_side(trace: Trace) -> dict[int | None, list[int]]:
    out: dict[int | None, list[int]] = defaultdict(list)
    for i, proc in enumerate(trace.processes):
        rank = proc.rank
        if rank.pp_rank == 0 or (rank.pp_rank is None and _has(proc.events, Direction.EXTRACT)):
            out[rank.tp_rank].append(i)
    return out


def _side(trace: Trace, procs: list[int], direction: Direction) -> tuple[list[Event], list[int]]:
    """The events that took part in a transfer in call order, and each one's process."""
    if len(procs) == 1:  # the common case: no sort, and no per-event tuples at 1M events
        events = trace.processes[procs[0]].events
        if direction is Direction.ATTACH:  # inlined `sends`/`receives`: 1M calls add up
            picked = [ev for ev in events
                      if ev.direction is direction and ev.error_type is None and ev.tensors]
        else:
            picked = [ev for ev in events if ev.direction is direction and ev.tensors]
        return picked, [procs[0]] * len(picked)
    keep = sends if direction is Direction.ATTACH else receives
    timed = sorted(
        ((ev.start_ns, p, ev.seq, ev) for p in procs for ev in trace.processes[p].events
         if ev.direction is direction and keep(ev)),
        key=lambda item: item[:3],
    )
    return [item[3] for item in timed], [item[1] for item in timed]


def _steady(events: list[Event], procs: list[int]) -> bool:
    """One process, numbered without gaps."""
    if not events:
        return True
    return procs[0] == procs[-1] and events[-1].seq - events[0].seq == len(events) - 1 and (
        len(set(procs)) == 1
    )


def _runs(pairs: Iterator[tuple[int, int, int, int]]) -> Iterator[Run]:
    """Compress (attach process, seq, extract process, seq) pairs into runs."""
    run: list[int] | None = None
    for ap, a, ep, e in pairs:
        if run is not None and (ap, ep) == (run[0], run[2]) and (
            a == run[1] + run[4] and e == run[3] + run[4]
        ):
            run[4] += 1
            continue
        if run is not None:
            yield Run(*run)
        run = [ap, a, ep, e, 1]
    if run is not None:
        yield Run(*run)


def _first_kept(trace: Trace, procs: list[int], direction: Direction) -> int:
    """The first sequence number the side's traces still hold (0 unless history was cut)."""
    seqs = [ev.seq for p in procs for ev in trace.processes[p].events
            if ev.direction is direction]
    return min(seqs, default=0)


def _trim(events: list[Event], procs: list[int], start: int) -> tuple[list[Event], list[int]]:
    kept = [i for i, ev in enumerate(events) if ev.seq >= start]
    return [events[i] for i in kept], [procs[i] for i in kept]


def _channels(trace: Trace, unpaired: list[tuple[int, Direction, int]]) -> Iterator[Run]:
    extract_side = _extract_side(trace)
    for tp, attach_procs in _attach_side(trace).items():
        attaches, a_procs = _side(trace, attach_procs, Direction.ATTACH)
        e_procs_all = extract_side.get(tp, [])
        extracts, e_procs = _side(trace, e_procs_all, Direction.EXTRACT)
        # A channel is judged from the newest first kept number of its two ends, as the
        # analyzer does (``pptrace.analyze.window``): what lies before a cut is not an orphan.
        start = max(_first_kept(trace, attach_procs, Direction.ATTACH),
                    _first_kept(trace, e_procs_all, Direction.EXTRACT))
        cut = start > 0
        if cut:
            attaches, a_procs = _trim(attaches, a_procs, start)
            extracts, e_procs = _trim(extracts, e_procs, start)
        if not attaches or not extracts:
            if attaches and e_procs_all:  # stage 0 is traced and received none of them
                unpaired += [(p, Direction.ATTACH, ev.seq) for ev, p in zip(attaches, a_procs,
                                                                            strict=True)]
            continue
        if (len(attaches) == len(extracts) and _steady(attaches, a_procs)
                and _steady(extracts, e_procs)):
            # No gap on either side: the analyzer's walk pairs straight across; one run.
            yield Run(a_procs[0], attaches[0].seq, e_procs[0], extracts[0].seq, len(attaches))
            continue
        outcome = align(attaches, extracts)
        orphans, unmatched = set(outcome.orphans), set(outcome.unmatched)
        if cut:  # calls just after the cut whose partner lies before it cannot be judged
            at_cut_a, at_cut_e = excused(outcome)
            orphans -= set(at_cut_a)
            unmatched -= set(at_cut_e)
        unpaired += [(a_procs[i], Direction.ATTACH, attaches[i].seq) for i in sorted(orphans)]
        unpaired += [(e_procs[j], Direction.EXTRACT, extracts[j].seq)
                     for j in sorted(unmatched)]
        yield from _runs(
            (a_procs[i], attaches[i].seq, e_procs[j], extracts[j].seq) for i, j in outcome.pairs()
        )


def pair_runs(trace: Trace, findings: Sequence[Finding]) -> Pairing:
    """Every pair as runs: each channel's pairing, then the findings' own pairs on top
    (apply in order: a later run overrides an earlier one for the events it names)."""
    unpaired: list[tuple[int, Direction, int]] = []
    out = list(_channels(trace, unpaired))
    for f in findings:
        if len(f.events) >= 2:
            a, e = f.events[0], f.events[1]
            if a.direction is Direction.ATTACH and e.direction is Direction.EXTRACT:
                out.append(Run(a.process, a.seq, e.process, e.seq))
    return Pairing(out, unpaired)
