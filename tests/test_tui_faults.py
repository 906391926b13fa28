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
- the grid draws ``≠`` on exactly the pairs whose payloads differ (worked out from the payload
  comparison and the findings, not from the verdicts the analyzer hands over and the grid
  paints: ``tests.helpers_verdicts``), and the events disagreeing findings name;
- a healthy run has no finding and no marked cell.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from pptrace_samples.faults import FAULTS
from pptrace_tui.index import Cell, TraceIndex

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import Category, Finding, FindingKind
from pptrace.report.groups import first_divergence
from tests.helpers_samples import run_sample
from tests.helpers_verdicts import expected_mismatch, mismatch_cells

pytestmark = pytest.mark.slow

MARKED = frozenset({Cell.ERROR, Cell.MISMATCH, Cell.ORPHAN, Cell.FAILED})
#: Kinds whose later occurrences the grid finds in the trace itself (the analyzer's pairing and
#: payload comparison, the calls' own errors). A namespace finding's later occurrences and a TP
#: disagreement's are known only to the analyzer, which names the first occurrence's events.
SEEN_IN_TRACE = frozenset({Category.PAYLOAD, Category.ABSENCE, Category.ENGINE_ERROR})


def _traced(tmp_path: Path, fault: str | None, *, broadcast: bool = False
            ) -> tuple[TraceIndex, list[Finding]]:
    """Run the sample, load and analyze its traces and index them as ``pptrace view`` does
    (the analyzer's channels handed to the index). ``broadcast``: the TP-broadcast layout,
    pp2 x tp2; otherwise pp3 (a silent middle stage)."""
    tp = 2 if broadcast else FAULTS[fault].needs_tp if fault else 1
    out = str(tmp_path / (fault or "healthy"))
    run_sample(out, ranks=(2 if broadcast else 3) * tp, tp=tp, steps=8, fault=fault,
               tp_broadcast=broadcast)
    trace = load_paths([out])
    result = analysis(trace)
    findings = list(result.findings)
    return TraceIndex.build(trace, findings, pairs=result.pairs), findings


def _marked(index: TraceIndex) -> set[tuple[int, int]]:
    return {(r, c) for r, row in enumerate(index.rows) for c, state in enumerate(row.cells)
            if state in MARKED}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_grid_marks_the_events_the_findings_name(tmp_path: Path, fault: str) -> None:
    index, findings = _traced(tmp_path, fault)
    _check_marks(index, findings, fault)
    # A middle stage never attaches or extracts: its row names no direction.
    assert [row.label for row in index.rows if row.rank.pp_rank == 1] == [
        f"pp1 tp{t} no calls" for t in range(FAULTS[fault].needs_tp)]


def _check_marks(index: TraceIndex, findings: list[Finding], fault: str) -> None:
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
    # 4. The pairs drawn differing are the pairs whose payloads differ, no more, no fewer.
    assert mismatch_cells(index) == expected_mismatch(index), fault
    first = first_divergence(findings)
    assert first is not None and index.first_divergence == first
    # The grid's cell of it: its first event's (none when it names only PP messages, which
    # have no cell: the message layer's findings).
    refs = findings[first].events
    assert index.first_divergence_cell == (index.cell_of(refs[0]) if refs else None)
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


def test_a_healthy_run_marks_nothing(tmp_path: Path) -> None:
    index, findings = _traced(tmp_path, None)
    assert findings == [] and _marked(index) == set()
    assert expected_mismatch(index) == set()
    assert index.first_divergence is None and index.first_divergence_cell is None
    assert all(state in (Cell.PAIRED,) for row in index.rows for state in row.cells)


def test_a_healthy_tp_broadcast_run_pairs_every_stage0_tp_rank_with_tp_rank_0(
        tmp_path: Path) -> None:
    # Only the last stage's TP rank 0 attaches; stage 0's TP rank 1 receives its dict. The grid
    # pairs on the analyzer's channels, so tp 1's extracts are paired (not unpaired "e" cells,
    # nor "?"), with TP rank 0's attaches, whose own partner stays stage 0's TP rank 0.
    index, findings = _traced(tmp_path, None, broadcast=True)
    assert findings == [] and _marked(index) == set()
    labels = [row.label for row in index.rows]
    assert labels == ["pp0 tp0 extract", "pp0 tp1 extract", "pp1 tp0 attach", "pp1 tp1 attach"]
    assert index.rows[3].cells == bytearray()  # tp 1 of the last stage never attaches
    assert all(state == Cell.PAIRED for row in index.rows[:3] for state in row.cells)
    assert len(index.rows[1].cells) == 8
    for col in range(8):
        assert index.partner(1, col) == (2, col)
        assert index.partner(0, col) == (2, col) and index.partner(2, col) == (0, col)


@pytest.mark.parametrize("fault", ["dtype-in-transit", "skipped-send"])
def test_a_tp_broadcast_run_marks_the_events_the_findings_name(tmp_path: Path,
                                                               fault: str) -> None:
    index, findings = _traced(tmp_path, fault, broadcast=True)
    _check_marks(index, findings, fault)
    # The fault bites both channels, the broadcast one (to stage 0's TP rank 1) included.
    assert {f.channel for f in findings} == {"pp0<-pp1/tp0", "pp0/tp1<-pp1/tp0"}
    if fault == "dtype-in-transit":  # both stage-0 TP ranks received the changed dtype
        for label in ("pp0 tp0 extract", "pp0 tp1 extract"):
            row = next(r for r in index.rows if r.label == label)
            assert row.problems, (fault, label, bytes(row.cells))
