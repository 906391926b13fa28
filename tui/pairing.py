"""Which attach went with which extract, as grid coordinates for the viewer.

The viewer pairs nothing by itself. The analyzer decides which processes are the two ends of
each channel (``pptrace.analyze.channels``: the last stage's TP rank j to stage 0's TP rank j,
or TP rank 0 to every stage-0 TP rank in a TP-broadcast layout) and from which microbatch on
both ends can be judged (``pptrace.analyze.window``); it hands those channels over with its
findings (``analysis(trace).channels``). On each channel the viewer runs the analyzer's own walk
(``pptrace.analyze.pairing.align`` on the same payload-carrying calls, the same trim, the same
calls excused at a cut), so a cell is paired exactly when the report's pairing paired it. A
finding's ``events`` (attach first, extract second) then name the pairs the analyzer made on top.

    pairing = pair_runs(trace, findings, analysis(trace).channels)
    for run in pairing.runs:
        run.attach_process, run.attach_seq, run.extract_process, run.extract_seq, run.length
        run.broadcast   # the attach also went to other stage-0 TP ranks (TP broadcast)
    for process, direction, seq in pairing.unpaired: ...   # what the walk left unpaired
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_

from pptrace.analyze.channels import Channel
from pptrace.analyze.pairing import align
from pptrace.analyze.window import excused, trim
from pptrace.model.findings import Finding
from pptrace.model.records import Direction, Event
from pptrace.model.trace import Trace

__all__ = ["Pairing", "Run", "pair_runs"]


@dataclass(frozen=True, slots=True)
class Run:
    """``length`` consecutive pairs: attach seq ``attach_seq + k`` with extract seq
    ``extract_seq + k``. A healthy channel is one run, so 1M events cost a handful of these.

    ``broadcast``: the channel reached its stage-0 TP rank by broadcast from another TP rank's
    attach, which has (and keeps, in the grid) a partner of its own TP rank."""

    attach_process: int
    attach_seq: int
    extract_process: int
    extract_seq: int
    length: int = 1
    broadcast: bool = False


@dataclass(frozen=True, slots=True)
class Pairing:
    """Every pair as runs, and the calls that took part in a transfer but found no partner
    (an attach no extract received, an extract with no attach: the analyzer's orphans and
    unmatched extracts, found by the same walk)."""

    runs: list[Run]
    unpaired: list[tuple[int, Direction, int]]  # (process, direction, seq)


class _Sides:
    """Each process's payload-carrying attaches and extracts (the analyzer's ``scan`` keeps
    the same two lists), gathered once per process however many channels it is an end of."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.attaches: dict[int, list[Event]] = {}
        self.extracts: dict[int, list[Event]] = {}

    def of(self, process: int, direction: Direction) -> list[Event]:
        got = self.attaches if direction is Direction.ATTACH else self.extracts
        events = got.get(process)
        if events is None:
            events = got[process] = _payload_calls(self.trace.processes[process].events,
                                                   direction)
        return events


_DIRECTION = attrgetter("direction")
_ERROR_TYPE = attrgetter("error_type")
_TENSORS = attrgetter("tensors")


def _payload_calls(events: Sequence[Event], direction: Direction) -> list[Event]:
    """The calls of ``direction`` that carried a payload: an attach that returned and put
    something in the dict, an extract that found prefixed values (whether or not the engine
    then raised). Each step a C-driven filter: 1M calls add up."""
    picked = list(compress(events, map(is_, map(_DIRECTION, events), repeat(direction))))
    if direction is Direction.ATTACH:
        picked = list(compress(picked, map(is_, map(_ERROR_TYPE, picked), repeat(None))))
    return list(compress(picked, map(len, map(_TENSORS, picked))))


def _runs(pairs: Iterator[tuple[int, int]], sender: int, receiver: int,
          broadcast: bool) -> Iterator[Run]:
    """Compress (attach seq, extract seq) pairs into runs."""
    run: list[int] | None = None
    for a, e in pairs:
        if run is not None and a == run[0] + run[2] and e == run[1] + run[2]:
            run[2] += 1
            continue
        if run is not None:
            yield Run(sender, run[0], receiver, run[1], run[2], broadcast)
        run = [a, e, 1]
    if run is not None:
        yield Run(sender, run[0], receiver, run[1], run[2], broadcast)


def _channel(sides: _Sides, ch: Channel, unpaired: list[tuple[int, Direction, int]]
             ) -> Iterator[Run]:
    """One channel's pairs, as the analyzer's ``_Analysis.channel`` walks it."""
    s, r = ch.sender, ch.receiver
    if s is None or r is None or s == r:  # a missing end, or no transport (pp_size 1)
        return
    attaches = trim(sides.of(s, Direction.ATTACH), ch.start)
    extracts = trim(sides.of(r, Direction.EXTRACT), ch.start)
    outcome = align(attaches, extracts)
    orphans: Sequence[int] = outcome.orphans
    unmatched: Sequence[int] = outcome.unmatched
    if ch.start:  # calls just after the cut whose partner lies before it cannot be judged
        at_cut_a, at_cut_e = excused(outcome)
        orphans = [i for i in orphans if i not in at_cut_a]
        unmatched = [j for j in unmatched if j not in at_cut_e]
    unpaired += [(s, Direction.ATTACH, attaches[i].seq) for i in orphans]
    unpaired += [(r, Direction.EXTRACT, extracts[j].seq) for j in unmatched]
    for i, j, n in outcome.runs:
        # A run of the walk is a run of seqs when neither side has a gap inside it.
        if (attaches[i + n - 1].seq - attaches[i].seq == n - 1
                and extracts[j + n - 1].seq - extracts[j].seq == n - 1):
            yield Run(s, attaches[i].seq, r, extracts[j].seq, n, ch.broadcast)
        else:
            yield from _runs(((attaches[i + k].seq, extracts[j + k].seq) for k in range(n)),
                             s, r, ch.broadcast)


def pair_runs(trace: Trace, findings: Sequence[Finding], channels: Sequence[Channel]
              ) -> Pairing:
    """Every pair as runs: each of the analyzer's channels walked, then the findings' own
    pairs on top (apply in order: a later run overrides an earlier one for the events it
    names)."""
    unpaired: list[tuple[int, Direction, int]] = []
    sides = _Sides(trace)
    out = [run for ch in channels for run in _channel(sides, ch, unpaired)]
    for f in findings:
        if len(f.events) >= 2:
            a, e = f.events[0], f.events[1]
            if a.direction is Direction.ATTACH and e.direction is Direction.EXTRACT:
                out.append(Run(a.process, a.seq, e.process, e.seq))
    return Pairing(out, unpaired)
