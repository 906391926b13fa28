"""The viewer's data layer (no Textual): cell states, pairs, the timeline, filters, comparison,
export, and literal text."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pptrace_tui.compare import PairView
from pptrace_tui.export import ExportDoc, render
from pptrace_tui.filters import FilterSpec, parse_ints
from pptrace_tui.index import Cell, TraceIndex
from pptrace_tui.literal import counted, literal

from pptrace.analyze.pairing import align
from pptrace.analyze.payload import Field, compare
from pptrace.model.errors import ConfigError
from pptrace.model.findings import Category, Finding, FindingKind, Severity
from pptrace.model.records import Direction
from pptrace.model.text import inert
from pptrace.model.trace import ProcessTrace, Trace
from pptrace.report.groups import first_divergence
from tests.helpers_tui import T0, attach, ids, pipeline, scenario, tensor
from tests.helpers_tui import finding as finding_of


def cells(index: TraceIndex, label: str) -> str:
    """A row's states as glyph-like letters, for readable assertions."""
    row = next(r for r in index.rows if r.label == label)
    return "".join(".aePFOME"[c] for c in row.cells)


def test_rows_are_ordered_by_stage_then_tp_and_named_by_role() -> None:
    index = TraceIndex.build(pipeline(3, pp=3, tp=2), [])
    assert [r.label for r in index.rows] == [
        "pp0 tp0 extract", "pp0 tp1 extract", "pp1 tp0 no calls", "pp1 tp1 no calls",
        "pp2 tp0 attach", "pp2 tp1 attach"]
    # A silent middle stage still has its row (it was traced), naming no direction it never
    # recorded; silent ends keep the row of what they should have done, with no cells.
    assert cells(index, "pp1 tp0 no calls") == ""
    assert index.rows[2].direction is None
    silent = Trace(processes=tuple(ProcessTrace(rank=p.rank, events=())
                                   for p in pipeline(1, pp=3).processes))
    assert [r.label for r in TraceIndex.build(silent, []).rows] == [
        "pp0 tp0 extract", "pp1 tp0 no calls", "pp2 tp0 attach"]


def test_cell_states_from_pairs_findings_and_errors() -> None:
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings)
    assert cells(index, "pp1 tp0 attach") == "PPPPPMPPPMPPO"
    assert cells(index, "pp0 tp0 extract") == "PPPPPMPPPMPP"
    err_trace, err_findings = scenario("engine-error")
    err = TraceIndex.build(err_trace, err_findings)
    assert cells(err, "pp0 tp0 extract") == "PPPEPP"
    # The finding names both sides; only the extract raised: its attach shows "other side raised".
    assert cells(err, "pp1 tp0 attach") == "PPPFPP"


def test_a_pair_whose_extract_raised_is_never_equal() -> None:
    # No finding names it (the analyzer summarised it into an earlier one): the trace says it.
    err_trace, _ = scenario("engine-error")
    index = TraceIndex.build(err_trace, [])
    assert cells(index, "pp0 tp0 extract") == "PPPEPP"
    assert cells(index, "pp1 tp0 attach") == "PPPFPP"
    assert index.rows[1].problems == 1


def test_a_mismatch_the_analyzer_summarised_still_shows_in_the_grid() -> None:
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings[:1])  # microbatch 9 named by no finding
    assert cells(index, "pp0 tp0 extract")[9] == "M"


def test_first_divergence_is_the_reports() -> None:
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings)
    assert index.first_divergence == first_divergence(findings)
    assert index.findings[index.first_divergence or 0].microbatch == 5
    assert index.first_divergence_cell == (1, 5)
    assert TraceIndex.build(*scenario("healthy")).first_divergence is None


def test_pairs_follow_fifo_per_tp_rank() -> None:
    index = TraceIndex.build(pipeline(4, pp=2, tp=2), [])
    a0 = index.row_of[(2, Direction.ATTACH)]  # process 2 = pp1 tp0
    e0 = index.row_of[(0, Direction.EXTRACT)]  # process 0 = pp0 tp0
    assert [index.partner(a0, c) for c in range(4)] == [(e0, c) for c in range(4)]
    assert index.partner(e0, 2) == (a0, 2)


def test_with_a_gap_the_grid_pairs_exactly_as_the_analyzer_does() -> None:
    # One attach (seq 2) carries another payload and stage 0 got one message fewer: the
    # sides differ in length, so the viewer defers to the analyzer's re-aligning walk.
    payload, other = (tensor("scores"),), (tensor("scores", (4,)),)
    trace = pipeline(6, payload=payload)
    procs = list(trace.processes)
    events = [attach(procs[1].rank, s, other if s == 2 else payload) for s in range(7)]
    procs[1] = ProcessTrace(rank=procs[1].rank, events=tuple(events))
    trace = Trace(processes=tuple(procs))
    index = TraceIndex.build(trace, [])
    expected = align(list(procs[1].events), list(procs[0].events))
    a_row = index.row_of[(1, Direction.ATTACH)]
    e_row = index.row_of[(0, Direction.EXTRACT)]
    assert [(c, index.partner(a_row, c)) for c in range(7) if index.partner(a_row, c)] == [
        (i, (e_row, j)) for i, j in expected.pairs()]
    # What the walk leaves unpaired is drawn unpaired, named by a finding or not.
    assert expected.orphans and all(index.state(a_row, i) is Cell.ORPHAN
                                    for i in expected.orphans)


def test_timeline_is_wall_clock_order_across_ranks() -> None:
    index = TraceIndex.build(pipeline(3), [])
    order = [(p >> 32, p & 0xFFFFFFFF) for p in index.timeline()]
    times = [index.event_at(r, c).start_ns for r, c in order]  # type: ignore[union-attr]
    assert times == sorted(times) and len(order) == 6
    assert index.position(*order[4]) == 4


def test_pair_view_highlights_the_differing_fields() -> None:
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings)
    pair = PairView.of(index, 0, 5)
    assert pair is not None and pair.attach is not None and pair.extract is not None
    assert pair.attach.direction is Direction.ATTACH
    scores, routing = pair.pair.verdict.names
    assert scores.differs == {Field.DTYPE, Field.BYTES} and routing.differs == frozenset()
    assert [f.kind for f in pair.findings] == [FindingKind.DTYPE_MISMATCH]
    assert PairView.of(index, 0, 99) is None


def test_pair_view_compares_as_the_analyzer_does() -> None:
    # One comparison for the report and the viewer: the verdict is payload.compare's.
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings)
    for col in range(12):
        view = PairView.of(index, 0, col)
        assert view is not None and view.attach is not None and view.extract is not None
        expected = compare(view.attach.tensors, view.extract.tensors)
        assert view.pair.verdict == expected
        assert (index.state(0, col) is Cell.MISMATCH) == (not expected.same)


def test_a_tensor_that_stops_being_a_tensor_is_a_mismatch_in_the_grid() -> None:
    # Same name, shape, dtype and bytes, but one side is not a tensor: the viewer's own fast
    # key once ignored is_tensor (the analyzer's does not).
    def flat(tp: int, seq: int, ts: tuple) -> tuple:  # type: ignore[type-arg]
        return (ts[0]._replace(is_tensor=False),) if seq == 1 else ts
    trace = pipeline(3, payload=(tensor("scores"),), on_extract=flat)
    assert cells(TraceIndex.build(trace, []), "pp0 tp0 extract") == "PMP"


def test_a_finding_colours_cells_by_its_kinds_category() -> None:
    trace, _ = scenario("healthy")
    for kind in FindingKind:
        index = TraceIndex.build(trace, [finding_of(kind, "m", ids(1, 2, 0, 2))])
        # An engine error names calls that did not raise here (the healthy trace's): they show
        # "other side raised", never "raised", which only a call that raised shows.
        # A category with no state of its own (the message layer's) marks a disagreement.
        expected = {Category.ENGINE_ERROR: "F", Category.ABSENCE: "O", Category.PAYLOAD: "M",
                    Category.NAMESPACE: "M", Category.RECORDER_LOSS: "P"}.get(kind.category, "M")
        assert cells(index, "pp0 tp0 extract")[2] == expected, kind


def test_pair_view_compares_device_by_type_only() -> None:
    def moved(tp: int, seq: int, ts: tuple) -> tuple:  # type: ignore[type-arg]
        return (tensor("scores", device="cuda:1"),)
    trace = pipeline(2, payload=(tensor("scores", device="cuda:0"),), on_extract=moved)
    pair = PairView.of(TraceIndex.build(trace, []), 0, 0)
    assert pair is not None and not pair.differs


def test_filters() -> None:
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings)
    spec = FilterSpec.parse(ranks="1")
    assert [r.label for r in index.rows if spec.row_visible(r)] == ["pp1 tp0 attach"]
    stage0 = FilterSpec.parse(stages="0")
    assert [r.label for r in index.rows if stage0.row_visible(r)] == ["pp0 tp0 extract"]
    assert [i for i in range(3) if stage0.finding_visible(index, i)] == [0, 1]  # not the orphan
    errors = FilterSpec(errors_only=True)
    assert [c for c in range(13) if errors.cell_visible(index, 1, c)] == [5, 9, 12]
    assert [i for i in range(3) if errors.finding_visible(index, i)] == [0, 1]
    kinds = FilterSpec(kinds=frozenset({FindingKind.ORPHAN_ATTACH}))
    assert [i for i in range(3) if kinds.finding_visible(index, i)] == [2]
    glob = FilterSpec.parse(name_glob="rout*")
    assert glob.cell_visible(index, 0, 0) and not FilterSpec.parse(
        name_glob="nope*").cell_visible(index, 0, 0)
    text = FilterSpec(text="FLOAT16")
    assert [i for i in range(3) if text.finding_visible(index, i)] == [0, 1]
    assert parse_ints("0, 3-5", "ranks") == {0, 3, 4, 5} and parse_ints("", "ranks") is None
    with pytest.raises(ConfigError, match="ranks: expected numbers"):
        parse_ints("x", "ranks")


def test_export_json_and_markdown_carry_the_findings_and_the_pair() -> None:
    trace, findings = scenario("markup")
    index = TraceIndex.build(trace, findings)
    doc = ExportDoc(findings, PairView.of(index, 0, 1), "errors only", trace.sources)
    body = json.loads(render(doc, "json"))
    assert body["findings"][0]["kind"] == "call-raised"
    (comparison,) = body["pair"]["comparisons"]
    assert comparison["left"]["role"] == "attach" and comparison["right"]["role"] == "extract"
    assert comparison["right"]["error_message"].startswith("[/]boom")
    assert comparison["tensors"][0]["name"].startswith("[bold red]")
    md = render(doc, "markdown")
    assert "## Findings (1)" in md and "| call-raised | error |" in md
    assert "[bold red]pwned[/]" in md  # markup kept as typed
    assert "\x1b" not in md and "\\x1b[31m" in md  # control characters made visible
    piped = ExportDoc([replace(findings[0], message="a | b `c`")], None)
    assert "a \\| b \\`c\\`" in render(piped, "markdown")


def test_literal_text_is_never_markup_and_never_a_control_sequence() -> None:
    text = literal("[bold]x[/] \x1b[31m\x07")
    assert text.plain == "[bold]x[/] \\x1b[31m\\x07"
    assert text.spans == []
    # The reports' own escaper: bidi overrides and line separators too, not only C0/C1.
    assert literal("tab\tnl\n rtl\u202eexe \u2028").plain == inert("tab\tnl\n rtl\u202eexe \u2028")
    assert "\u202e" not in literal("rtl\u202eexe").plain
    assert [counted(n, "finding") for n in (0, 1, 2_000)] == [
        "0 findings", "1 finding", "2,000 findings"]
    assert T0 > 0


def test_bidi_overrides_reach_neither_the_screen_text_nor_the_exports() -> None:
    evil = "scores\u202egnp.exe\u202d"
    trace = pipeline(2, payload=(tensor(evil),))
    finding = Finding(kind=FindingKind.DTYPE_MISMATCH, severity=Severity.ERROR,
                      message=f"`{evil}` differs", events=ids(1, 0, 0, 0))
    index = TraceIndex.build(trace, [finding])
    doc = ExportDoc([finding], PairView.of(index, 0, 0), evil, (evil,))
    for fmt in ("json", "markdown"):
        out = render(doc, fmt)  # type: ignore[arg-type]
        assert "\u202e" not in out and "\u202d" not in out, fmt
        assert "\\u202e" in out, fmt


def test_a_lost_event_leaves_an_empty_cell_and_the_pairs_realign() -> None:
    trace = pipeline(4)
    procs = list(trace.processes)
    kept = tuple(ev for ev in procs[0].events if ev.seq != 2)  # stage 0 lost extract #2
    procs[0] = ProcessTrace(rank=procs[0].rank, events=kept)
    index = TraceIndex.build(Trace(processes=tuple(procs)), [])
    assert cells(index, "pp0 tp0 extract")[2] == "."
    assert sum(index.rows[0].counts.values()) == 3 and len(index.rows[0].cells) == 4
    # The rest is paired exactly as the analyzer's walk pairs it.
    expected = align(list(procs[1].events), list(kept))
    assert sorted((a, index.partner(1, a)) for a in range(4) if index.partner(1, a)) == sorted(
        (procs[1].events[i].seq, (0, kept[j].seq)) for i, j in expected.pairs())


def test_before_a_cut_window_nothing_is_unpaired() -> None:
    # The oldest 4 attaches were rotated away on the last stage: stage 0's extracts 0-3 have
    # no attach in the trace, by design. The analyzer judges from microbatch 4 (a window-cut
    # info finding); the grid marks nothing unpaired before it either.
    trace = pipeline(10)
    procs = list(trace.processes)
    procs[1] = ProcessTrace(rank=procs[1].rank,
                            events=tuple(ev for ev in procs[1].events if ev.seq >= 4))
    index = TraceIndex.build(Trace(processes=tuple(procs)), [])
    assert cells(index, "pp0 tp0 extract") == "eeeePPPPPP"
    assert cells(index, "pp1 tp0 attach") == "....PPPPPP"
