"""One verdict per pair, the analyzer's: the grid paints what it handed over and judges nothing.

The analyzer compares each pair's payloads while it walks a channel and hands its verdicts over
with its pairs (``Analysis.pairs``: runs split where the verdict changes). These tests check:

- the grid draws ``≠`` on exactly the pairs whose payloads the one comparison finds different
  (worked out by ``tests.helpers_verdicts`` without the handed-over field), plus the events
  that disagreeing findings name; a healthy trace has none (the sample faults, run as real
  processes, are checked the same way in ``tests/test_tui_faults.py``);
- the grid paints the verdict it is handed, whatever the payloads say (it compares nothing);
- the pair detail's comparison says what the handed-over verdict says, pair by pair;
- the hand-over stays small: a healthy channel is one run, a payload changed for good two.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from pptrace_tui.compare import PairView
from pptrace_tui.index import Cell, TraceIndex

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairs import Pairs
from pptrace.model.findings import Category, Finding, FindingKind
from pptrace.model.records import PREFIX, Direction
from pptrace.model.trace import EventId, Trace
from tests.helpers_analyze import Run, meta
from tests.helpers_tui import pipeline, scenario, synthetic, tensor
from tests.helpers_verdicts import expected_mismatch, mismatch_cells

SCENARIOS = ["healthy", "dtype-mismatch", "engine-error", "markup", "tp-disagree"]


def _foreign_key_run() -> Trace:
    """A pair whose extract popped a name only a key written under the prefix before the attach
    carried: no pair finding (the report names it at the attach), yet the payloads differ."""
    run = Run(pp_size=2)
    run.step([meta("scores")])
    run.attach([meta("scores")], keys_before=("next_token_ids", PREFIX + "seed"))
    run.extract([meta("scores"), meta("seed", (1,), "int64")])
    run.step([meta("scores")])
    return run.trace()


def _traces() -> list[tuple[str, Trace, list[Finding]]]:
    out = [(name, *scenario(name)) for name in SCENARIOS]
    out.append(("synthetic", *synthetic(20_000, mismatch_every=97)))
    # Findings as the analyzer made them (not by hand), with its cascades.
    for name, trace in (("analyzed-synthetic", synthetic(20_000, mismatch_every=97)[0]),
                        ("foreign-key", _foreign_key_run())):
        out.append((name, trace, list(analysis(trace).findings)))
    return out


TRACES = _traces()


@pytest.mark.parametrize(("name", "trace", "findings"), TRACES, ids=[t[0] for t in TRACES])
def test_the_grid_draws_a_mismatch_exactly_where_the_payloads_differ(
        name: str, trace: Trace, findings: list[Finding]) -> None:
    index = TraceIndex.build(trace, findings)  # the pairs and verdicts asked of the analyzer
    expected = expected_mismatch(index)
    assert mismatch_cells(index) == expected, name
    if name == "healthy":
        assert expected == set()


def test_a_payload_named_by_no_finding_is_drawn_as_differing() -> None:
    # Only the first of two differing pairs has a finding (the report counts the rest in a
    # cascade): the second pair is still drawn, from the analyzer's verdict.
    trace, findings = scenario("dtype-mismatch")
    index = TraceIndex.build(trace, findings[:1])
    assert [index.state(r, 9) for r in range(2)] == [Cell.MISMATCH, Cell.MISMATCH]
    assert index.findings_at(0, 9) == []


def test_the_foreign_key_pair_is_drawn_as_differing_on_both_sides() -> None:
    trace = _foreign_key_run()
    judged = analysis(trace)
    assert not any(f.kind.category is Category.PAYLOAD for f in judged.findings)
    assert [r.differs for r in judged.pairs.runs] == [False, True, False]
    index = TraceIndex.build(judged.trace, judged.findings, pairs=judged.pairs)
    assert [index.state(r, 1) for r in range(2)] == [Cell.MISMATCH, Cell.MISMATCH]


def test_the_grid_paints_the_handed_over_verdict_and_compares_nothing() -> None:
    # A healthy trace handed a verdict of "differs" is drawn differing; a differing one handed
    # "agrees" is drawn equal: the grid has no opinion of its own.
    healthy = pipeline(4)
    judged = analysis(healthy)
    flipped = Pairs(tuple(replace(r, differs=True) for r in judged.pairs.runs),
                    judged.pairs.unpaired)
    index = TraceIndex.build(judged.trace, [], pairs=flipped)
    assert {index.state(r, c) for r in range(2) for c in range(4)} == {Cell.MISMATCH}

    changed = pipeline(4, on_extract=lambda tp, seq, ts: (tensor("scores", dtype="float16"),))
    judged = analysis(changed)
    assert any(r.differs for r in judged.pairs.runs)
    agreed = Pairs(tuple(replace(r, differs=False) for r in judged.pairs.runs),
                   judged.pairs.unpaired)
    index = TraceIndex.build(judged.trace, [], pairs=agreed)
    assert {index.state(r, c) for r in range(2) for c in range(4)} == {Cell.PAIRED}


@pytest.mark.parametrize(("name", "trace", "findings"), TRACES, ids=[t[0] for t in TRACES])
def test_the_pair_detail_says_what_the_handed_over_verdict_says(
        name: str, trace: Trace, findings: list[Finding]) -> None:
    judged = analysis(trace)
    index = TraceIndex.build(judged.trace, findings, pairs=judged.pairs)
    checked = 0
    for run in judged.pairs.runs:
        for _, e in run.seqs():
            cell = index.cell_of(EventId(run.extract_process, Direction.EXTRACT, e))
            assert cell is not None
            view = PairView.of(index, *cell)
            assert view is not None
            assert view.pair.verdict.same is not run.differs, (name, run, e)
            checked += 1
    assert checked == sum(r.length for r in judged.pairs.runs) > 0


def test_a_healthy_channel_is_one_run_and_a_payload_changed_for_good_two() -> None:
    def after(seq: int):  # type: ignore[no-untyped-def]
        return lambda tp, s, ts: (tensor("scores", dtype="float16"),) if s >= seq else ts

    assert [(r.length, r.differs) for r in analysis(pipeline(1000)).pairs.runs] == [
        (1000, False)]
    runs = analysis(pipeline(1000, on_extract=after(10))).pairs.runs
    assert [(r.attach_seq, r.length, r.differs) for r in runs] == [(0, 10, False),
                                                                  (10, 990, True)]
    kinds = {f.kind for f in analysis(pipeline(1000, on_extract=after(10))).findings}
    assert FindingKind.DTYPE_MISMATCH in kinds
