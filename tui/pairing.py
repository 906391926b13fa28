"""Which attach went with which extract, as the viewer draws it: the analyzer's pairs.

The viewer pairs nothing by itself. The analyzer walks every channel (``pptrace.analyze.channels``
and ``pptrace.analyze.window`` decide its two ends and the microbatches both still cover;
``pptrace.analyze.pairing.align`` pairs them) and hands over what it found with its findings
(``analysis(trace).pairs``: runs of pairs, and what the walk left unpaired), so a cell is paired
exactly when the report's pairing paired it. A finding's ``events`` (attach first, extract
second) then name the pairs the analyzer made on top.

    pairing = pair_runs(analysis(trace).pairs, findings)
    for run in pairing.runs:
        run.attach_process, run.attach_seq, run.extract_process, run.extract_seq, run.length
        run.broadcast   # the attach also went to other stage-0 TP ranks (TP broadcast)
        run.differs     # the analyzer's verdict: the pairs' payloads differ (a finding's
                        # own pairs added here carry none: the finding marks its cells)
    for process, direction, seq in pairing.unpaired: ...   # what the walk left unpaired
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.analyze.pairs import PairRun, Pairs
from pptrace.model.findings import Finding
from pptrace.model.records import Direction

__all__ = ["Pairing", "pair_runs"]


@dataclass(frozen=True, slots=True)
class Pairing:
    """Every pair as runs (apply in order: a later run overrides an earlier one for the events
    it names), and the calls that took part in a transfer but found no partner (the
    analyzer's orphans and unmatched extracts)."""

    runs: list[PairRun]
    unpaired: list[tuple[int, Direction, int]]  # (process, direction, seq)


def pair_runs(pairs: Pairs, findings: Sequence[Finding]) -> Pairing:
    """The analyzer's pairs, then its findings' own pairs on top."""
    out = list(pairs.runs)
    for f in findings:
        if len(f.events) >= 2:
            a, e = f.events[0], f.events[1]
            if a.direction is Direction.ATTACH and e.direction is Direction.EXTRACT:
                out.append(PairRun(a.process, a.seq, e.process, e.seq))
    return Pairing(out, list(pairs.unpaired))
