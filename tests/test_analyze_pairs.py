"""The analyzer hands over its pairing (``Analysis.pairs``): runs of attach/extract pairs per
channel and what its walk left unpaired, so that the viewer and the Perfetto export draw the
analyzer's pairs and walk nothing themselves."""

from __future__ import annotations

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairing import Alignment, align
from pptrace.analyze.pairs import PairBook, PairRun
from pptrace.model.findings import FindingKind
from pptrace.model.records import Direction, Event
from tests.helpers_analyze import Run, meta


def _process(trace, pp: int, tp: int = 0) -> int:  # type: ignore[no-untyped-def]
    return next(i for i, p in enumerate(trace.processes)
                if p.rank.pp_rank == pp and p.rank.tp_rank == tp)


def _ends_with_a_lost_extract(steps: int) -> tuple[list[Event], list[Event]]:
    """A healthy channel of ``steps`` pairs: its attaches, and its extracts but the fourth (the
    recorder lost extract 3: a gap in the seqs from attach 3 on)."""
    run = Run(pp_size=2)
    for _ in range(steps):
        run.step([meta("scores")])
    trace = run.trace()
    extracts = list(trace.processes[_process(trace, 0)].events)
    return list(trace.processes[_process(trace, 1)].events), extracts[:3] + extracts[4:]


def test_a_healthy_channel_is_one_run_per_tp_rank() -> None:
    run = Run(pp_size=2, tp_size=2)
    for _ in range(50):
        run.step([meta("scores")])
    trace = run.trace()
    pairs = analysis(trace).pairs
    assert pairs.unpaired == ()
    assert sorted(pairs.runs, key=lambda r: r.attach_process) == sorted(
        [PairRun(_process(trace, 1, tp), 0, _process(trace, 0, tp), 0, 50) for tp in (0, 1)],
        key=lambda r: r.attach_process)


def test_a_skipped_send_splits_the_run_and_leaves_its_attach_unpaired() -> None:
    run = Run(pp_size=2)
    run.step([meta("scores", (8, 5))])
    run.attach([meta("scores", (9, 5))])  # never extracted
    for rows in (10, 11, 12):  # shapes that tell a skipped send from a shape changed on the way
        run.step([meta("scores", (rows, 5))])
    trace = run.trace()
    result = analysis(trace)
    last, first = _process(trace, 1), _process(trace, 0)
    assert result.pairs.runs == (PairRun(last, 0, first, 0, 1), PairRun(last, 2, first, 1, 3))
    assert result.pairs.unpaired == ((last, Direction.ATTACH, 1),)
    # The same call the report names as the orphan.
    (orphan,) = [f for f in result.findings if f.kind is FindingKind.ORPHAN_ATTACH]
    assert [(e.process, e.direction, e.seq) for e in orphan.events] == list(
        result.pairs.unpaired)


def test_the_book_keeps_what_align_paired_as_runs_of_seqs() -> None:
    # A gap in the seqs inside one run of the walk (the recorder lost extract 3): two runs.
    attaches, kept = _ends_with_a_lost_extract(6)
    found = align(attaches[:5], kept)
    book = PairBook()
    book.add(7, 9, attaches[:5], kept, found, found.orphans, found.unmatched, broadcast=True)
    pairs = book.pairs()
    assert [(r.attach_seq, r.extract_seq, r.length, r.broadcast) for r in pairs.runs] == [
        (0, 0, 3, True), (3, 4, 2, True)]
    assert [book.attach_of(9, e) for e in (0, 2, 3, 4, 5)] == [
        (7, 0), (7, 2), None, (7, 3), (7, 4)]
    assert [p for r in pairs.runs for p in r.seqs()] == [
        (0, 0), (1, 1), (2, 2), (3, 4), (4, 5)]


def test_the_book_splits_a_run_where_the_verdict_changes() -> None:
    attaches, kept = _ends_with_a_lost_extract(8)
    found = Alignment(runs=((0, 0, 7),), unshared=(), orphans=(), unmatched=())  # one walk run
    book = PairBook()
    # Pairs 1 and 2 differ (a stretch), and pair 4, after the gap (attach 4 with extract 5).
    book.add(7, 9, attaches[:7], kept, found, (), (), differing=[1, 2, 4])
    assert [(r.attach_seq, r.extract_seq, r.length, r.differs) for r in book.pairs().runs] == [
        (0, 0, 1, False), (1, 1, 2, True), (3, 4, 1, False), (4, 5, 1, True),
        (5, 6, 2, False)]


def test_the_analyzer_hands_over_a_verdict_per_pair_as_it_reports_them() -> None:
    run = Run(pp_size=2)
    for rows in (8, 8, 9, 9, 8, 8):  # the extract's shape differs at pairs 2 and 3
        run.attach([meta("scores", (8, 5))])
        run.extract([meta("scores", (rows, 5))])
    trace = run.trace()
    result = analysis(trace)
    assert [(r.attach_seq, r.length, r.differs) for r in result.pairs.runs] == [
        (0, 2, False), (2, 2, True), (4, 2, False)]
    (shape,) = [f for f in result.findings if f.kind is FindingKind.SHAPE_MISMATCH]
    assert shape.microbatch == 2 and shape.cascade == 1
