"""The grid and the report agree on real traces: every sample fault, run as real gloo processes.

For each fault of the sample pipeline (``pptrace_samples.faults``) and for a healthy run, the
traces the ranks wrote are loaded and analyzed as ``pptrace view`` does, and the viewer's index
is checked against the findings the report lists:

- every event a finding names is a cell the grid marks (raised, mismatch, unpaired, other side
  raised), and the grid's first divergence is the report's;
- every cell the grid marks is named by a finding, or is one of the later occurrences a named
  finding counts in its cascade on that row (never more of them than the cascade counts);
- where the grid sees each occurrence in the trace itself (pair payloads, absences, engine
  errors), it marks at least as many cells as the finding has occurrences;
- a healthy run has no finding and no marked cell.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from pptrace_samples.faults import FAULTS
from pptrace_tui.index import Cell, TraceIndex

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import Category, Finding, FindingKind
from pptrace.report.groups import first_divergence
from tests.helpers_samples import run_sample

pytestmark = pytest.mark.slow

MARKED = frozenset({Cell.ERROR, Cell.MISMATCH, Cell.ORPHAN, Cell.FAILED})
#: Kinds whose later occurrences the grid finds in the trace itself (the analyzer's pairing and
#: payload comparison, the calls' own errors). A namespace finding's later occurrences and a TP
#: disagreement's are known only to the analyzer, which names the first occurrence's events.
SEEN_IN_TRACE = frozenset({Category.PAYLOAD, Category.ABSENCE, Category.ENGINE_ERROR})


def _traced(tmp_path: Path, fault: str | None) -> tuple[TraceIndex, list[Finding]]:
    tp = FAULTS[fault].needs_tp if fault else 1
    out = str(tmp_path / (fault or "healthy"))
    run_sample(out, ranks=3 * tp, tp=tp, steps=8, fault=fault)  # pp3: a silent middle stage
    trace = load_paths([out])
    findings = list(analyze(trace))
    return TraceIndex.build(trace, findings), findings


def _marked(index: TraceIndex) -> set[tuple[int, int]]:
    return {(r, c) for r, row in enumerate(index.rows) for c, state in enumerate(row.cells)
            if state in MARKED}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_grid_marks_the_events_the_findings_name(tmp_path: Path, fault: str) -> None:
    index, findings = _traced(tmp_path, fault)
    assert findings, f"{fault}: the analyzer found nothing"
    marked = _marked(index)
    named: dict[tuple[int, int], list[Finding]] = defaultdict(list)
    for f in findings:
        for ref in f.events:
            cell = index.cell_of(ref)
            assert cell is not None, f"{fault}: {f.kind.value} names {ref}, which has no cell"
            named[cell].append(f)
    # 1. Every named event is marked (a recorder loss names no single event's fault).
    for cell, fs in named.items():
        if any(f.kind.category is not Category.RECORDER_LOSS for f in fs):
            assert cell in marked, (fault, cell, index.state(*cell), [f.kind.value for f in fs])
    first = first_divergence(findings)
    assert first is not None and index.first_divergence == first
    assert index.first_divergence_cell == index.cell_of(findings[first].events[0])
    # 2. Every other marked cell is the other side of a named call that raised, or a later
    #    occurrence of a named finding on its row.
    partners = {cell for cell in marked if index.state(*cell) is Cell.FAILED
                and index.partner(*cell) in named}
    for r, row in enumerate(index.rows):
        row_findings = {id(f): f for (rr, _), fs in named.items() if rr == r for f in fs}
        extra = sorted(c for rr, c in marked - set(named) - partners if rr == r)
        counted = sum(f.cascade for f in row_findings.values())
        assert len(extra) <= counted, (fault, row.label, extra, counted)
        starts = [c for (rr, c), fs in named.items() if rr == r
                  if any(f.cascade for f in fs)]
        assert all(c > min(starts) for c in extra), (fault, row.label, extra, starts)
        # 3. Where the trace shows each occurrence, the grid marks every one of them.
        for f in row_findings.values():
            if f.kind.category in SEEN_IN_TRACE and f.kind is not FindingKind.TP_DISAGREE:
                on_row = sum(1 for rr, _ in marked if rr == r)
                assert on_row >= 1 + f.cascade, (fault, row.label, f.kind.value, on_row)
    # A middle stage never attaches or extracts: its row names no direction.
    assert [row.label for row in index.rows if row.rank.pp_rank == 1] == [
        f"pp1 tp{t} no calls" for t in range(FAULTS[fault].needs_tp)]


def test_a_healthy_run_marks_nothing(tmp_path: Path) -> None:
    index, findings = _traced(tmp_path, None)
    assert findings == [] and _marked(index) == set()
    assert index.first_divergence is None and index.first_divergence_cell is None
    assert all(state in (Cell.PAIRED,) for row in index.rows for state in row.cells)
