"""One count per fact: what the demo, the report, the grid and the message screen say about one
real run of the ``tp-disagree`` fault (pp2 x tp2, 32 steps, as ``pptrace demo`` runs it) agree.

The sample's last-stage TP rank 1 computes a different entropy; stage 0 re-assembles a mix of
both ranks' TP slices. The facts, and who counts them:

- microbatches whose last-stage TP ranks attached different bytes: the report's tp-disagree
  occurrences, and the grid's marked cells on each last-stage attach row;
- outputs that changed between attach and extract: the report's content-mismatch occurrences
  per channel, the grid's marked cells on that channel's stage-0 row;
- messages a finding names: the message screen's count per rank;
- what stage 0 got against a recomputation (the demo's check, per stage-0 rank): on TP rank 0,
  whose last-stage peer is the correct one, exactly the outputs that changed on the way.

The run is made once for the module (real gloo processes are slow on a small machine).
"""

from __future__ import annotations

import pytest
from pptrace_tui.index import Cell, TraceIndex
from pptrace_tui.message_index import MessageIndex

from pptrace.analyze.analyzer import Analysis, analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import Finding, FindingKind
from pptrace.model.trace import Trace
from tests.helpers_samples import run_sample

pytestmark = pytest.mark.slow

EQUAL = frozenset({Cell.PAIRED})


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Trace, Analysis]:
    out = str(tmp_path_factory.mktemp("tp-disagree"))
    result, _ = run_sample(out, ranks=4, tp=2, steps=32, fault="tp-disagree")
    trace = load_paths([out])
    return result, trace, analysis(trace)


def _occurrences(f: Finding) -> int:
    return 1 + f.cascade


def _one(judged: Analysis, kind: FindingKind, channel: str | None = None) -> Finding:
    found = [f for f in judged.findings
             if f.kind is kind and (channel is None or f.channel == channel)]
    assert len(found) == 1, [(f.kind.value, f.channel) for f in judged.findings]
    return found[0]


def test_every_cell_a_finding_counts_is_marked_never_equal(run: tuple[object, Trace, Analysis]
                                                           ) -> None:
    _, trace, judged = run
    index = TraceIndex.build(trace, judged.findings, pairs=judged.pairs)
    for f in judged.findings:
        for ref in (*f.events, *f.more_events):
            cell = index.cell_of(ref)
            assert cell is not None, (f.kind.value, ref)
            assert index.state(*cell) not in EQUAL, (f.kind.value, f.channel, cell)


def test_the_grid_marks_as_many_cells_a_row_as_the_report_counts(
        run: tuple[object, Trace, Analysis]) -> None:
    _, trace, judged = run
    index = TraceIndex.build(trace, judged.findings, pairs=judged.pairs)
    disagree = _one(judged, FindingKind.TP_DISAGREE)
    for row in index.rows:
        if row.rank.pp_rank == 1:  # the last stage's attach rows: one mark per disagreement
            assert row.problems == _occurrences(disagree), (row.label, row.problems)
        else:  # stage 0's extract rows: one mark per output changed on the way there
            mismatch = _one(judged, FindingKind.CONTENT_MISMATCH,
                            f"pp0<-pp1/tp{row.rank.tp_rank}")
            assert row.problems == _occurrences(mismatch), (row.label, row.problems)
    # A microbatch the TP ranks disagreed on, whose mix stage 0 received unchanged: the
    # attach cells are marked and name the disagreement (this was drawn "=", no finding).
    later = sorted(ref.seq for ref in disagree.more_events)
    extract0 = next(r for r, row in enumerate(index.rows) if row.rank.pp_rank == 0
                    and row.rank.tp_rank == 0)
    quiet = [mb for mb in later if index.state(extract0, mb) in EQUAL]
    assert quiet, "the fault no longer leaves a disagreement that arrives unchanged"
    for r, row in enumerate(index.rows):
        if row.rank.pp_rank == 1:
            assert index.state(r, quiet[0]) is Cell.MISMATCH
            assert disagree in index.findings_at(r, quiet[0])


def test_the_message_screen_counts_every_message_a_finding_names(
        run: tuple[object, Trace, Analysis]) -> None:
    _, trace, judged = run
    index = MessageIndex.build(trace, judged.findings, judged.message_pairs)
    named: dict[int, set[tuple[object, int]]] = {}
    for f in judged.findings:
        for m in (*f.messages, *f.more_messages):
            named.setdefault(m.process, set()).add((m.op, m.seq))
    assert named, "the fault's messages were not found"
    for row in index.rows:
        assert row.problems == len(named.get(row.process, ())), row.label
    # Stage 0's TP rank 0 received one changed output message per changed output.
    changed = _one(judged, FindingKind.MSG_CONTENT_MISMATCH, "pp1/tp0->pp0/tp0")
    receiver = next(row for row in index.rows if row.rank.pp_rank == 0
                    and row.rank.tp_rank == 0)
    assert row.problems >= _occurrences(changed)
    assert receiver.problems == _occurrences(changed)


def test_the_demo_s_stage0_check_is_the_report_s_count_on_the_correct_tp_rank(
        run: tuple[object, Trace, Analysis]) -> None:
    result, _, judged = run
    reports = result.reports  # type: ignore[attr-defined]
    rank0 = next(rep for rep in reports.values() if rep.pp_rank == 0 and rep.tp_rank == 0)
    mismatch = _one(judged, FindingKind.CONTENT_MISMATCH, "pp0<-pp1/tp0")
    rank1 = next(rep for rep in reports.values() if rep.pp_rank == 0 and rep.tp_rank == 1)
    disagree = _one(judged, FindingKind.TP_DISAGREE)
    dropped = sum(rep.dropped for rep in reports.values())
    if dropped:
        # A recorder that lost events (a loaded machine) leaves a partial trace: the report
        # judges fewer microbatches (it says which), so it can count fewer, never more.
        print(f"the recorder dropped {dropped} events: the report judged a partial trace")
        assert _occurrences(mismatch) <= rank0.mismatched
        assert _occurrences(disagree) <= rank1.mismatched
        return
    assert rank0.mismatched == _occurrences(mismatch)
    # The other stage-0 rank got its peer's wrong bytes on every disagreement: changed on
    # the way, or as they were attached.
    assert rank1.mismatched == _occurrences(disagree)


def test_at_80x24_the_first_screen_shows_the_differing_row_of_the_first_divergence(
        run: tuple[object, Trace, Analysis]) -> None:
    # The pair detail has 7 lines at 80x24: `entropy`, the third name and the one that
    # differs, was below them, and the first screen showed only equal rows.
    import asyncio

    from pptrace_tui.app import PptraceViewer
    from pptrace_tui.widgets.pair_detail import PairDetail

    from tests.helpers_tui import wait_main

    _, trace, judged = run

    async def look() -> list[str]:
        app = PptraceViewer.of(trace, judged)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await wait_main(pilot)
            await pilot.pause()
            detail = screen.query_one(PairDetail)
            return [detail.render_line(y).text for y in range(detail.size.height)]

    shown = asyncio.run(look())
    assert any(line.startswith("entropy") and "≠" in line for line in shown), shown


def test_the_json_report_points_at_every_later_occurrence_the_viewer_marks(
        run: tuple[object, Trace, Analysis]) -> None:
    from pptrace.model.findings import Severity
    from pptrace.report.text import to_json

    _, trace, judged = run
    doc = to_json(trace, judged.findings, Severity.ERROR)
    disagree = next(f for f in doc["findings"] if f["kind"] == FindingKind.TP_DISAGREE.value)
    finding = _one(judged, FindingKind.TP_DISAGREE)
    assert finding.more_events  # the run leaves later occurrences to point at
    assert [(e["process"], e["direction"], e["seq"]) for e in disagree["more_events"]] == [
        (e.process, e.direction.value, e.seq) for e in finding.more_events]
