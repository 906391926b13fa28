"""Where the grid must draw a pair as differing, worked out without the verdicts it paints.

The analyzer hands the viewer its pairs with a verdict on each (``PairRun.differs``), and the
grid paints those. This oracle ignores that field: it asks the one payload comparison
(``pptrace.analyze.payload.compare``) about every pair the analyzer made, adds the events that
findings of a disagreeing category name (``cell_for_finding``), and takes away the calls that
raised (drawn ``!``, which outranks ``≠``). It also checks that the analyzer's own pair findings
(payload kinds naming an attach and its extract) name only pairs the comparison finds different.

    assert mismatch_cells(index) == expected_mismatch(index)
"""

from __future__ import annotations

from itertools import chain

from pptrace_tui.index import Cell, TraceIndex, cell_for_finding

from pptrace.analyze.payload import compare
from pptrace.model.findings import Category, FindingKind
from pptrace.model.records import Direction
from pptrace.model.trace import EventId

Cells = set[tuple[int, int]]


def mismatch_cells(index: TraceIndex) -> Cells:
    """Every cell the grid draws ``≠``."""
    return {(r, c) for r, row in enumerate(index.rows) for c, state in enumerate(row.cells)
            if state == Cell.MISMATCH}


def differing_pairs(index: TraceIndex) -> Cells:
    """The cells of every pair the analyzer made whose payloads ``compare`` finds different."""
    out: Cells = set()
    for run in index.pairs.runs:
        for a, e in run.seqs():
            ca = index.cell_of(EventId(run.attach_process, Direction.ATTACH, a))
            ce = index.cell_of(EventId(run.extract_process, Direction.EXTRACT, e))
            if ca is None or ce is None:
                continue
            attach, extract = index.event_at(*ca), index.event_at(*ce)
            assert attach is not None and extract is not None
            if not compare(attach.tensors, extract.tensors).same:
                out |= {ca, ce}
    return out


def expected_mismatch(index: TraceIndex) -> Cells:
    """The cells the grid must draw ``≠``: differing pairs and disagreeing findings' events,
    less the calls that raised."""
    differing = differing_pairs(index)
    cells = set(differing)
    pair_findings: Cells = set()
    for f in index.findings:
        refs = [index.cell_of(ref) for ref in chain(f.events, f.more_events)]
        if cell_for_finding(f.kind) is Cell.MISMATCH:
            cells |= {c for c in refs if c is not None}
        if (f.kind.category is Category.PAYLOAD and f.kind is not FindingKind.TP_DISAGREE
                and len(f.events) == 2 and f.events[0].direction is Direction.ATTACH
                and f.events[1].direction is Direction.EXTRACT):
            pair_findings |= {c for c in refs if c is not None}
    # The report's pair differences are differences the comparison sees (the findings and the
    # verdicts come from one walk; a finding on an equal pair would be a second opinion).
    assert pair_findings <= differing, sorted(pair_findings - differing)
    raised = {c for c in cells if (ev := index.event_at(*c)) is not None
              and ev.error_type is not None}
    return cells - raised
