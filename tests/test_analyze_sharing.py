"""The analyzer's fast paths give the findings its slow paths give.

The loader shares one tensors tuple (and one keys tuple) between equal events, and the analyzer
leans on that: a pair whose ends are one tuple is not compared, a shape is judged once. The
factory builds a fresh tuple per event, so analysing its trace as built and with every equal
tuple shared (as the loader does) runs the two paths on one run: the findings must be equal.
``align`` must pair shared tuples as it pairs equal ones, and ``scan`` say what each
per-process check says alone.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pptrace.analyze.analyzer import analyze
from pptrace.analyze.pairing import align
from pptrace.analyze.rules import hygiene_specs
from pptrace.analyze.scan import scan
from pptrace.model import errors
from pptrace.model.records import PREFIX, Direction, Event, TensorMeta
from pptrace.model.trace import ProcessTrace, Trace
from tests.helpers_analyze import Run, meta

OPS = ("ok", "ok", "ok", "orphan", "lost", "extra", "dtype", "rename", "order", "content", "none",
       "tp-differs", "raises", "foreign-key", "leftover")


def _build(pp_size: int, tp_size: int, ops: list[tuple[str, int]]) -> Trace:
    """A run with one operation per step (``int``: which of a few shapes the step carries)."""
    run = Run(pp_size=pp_size, tp_size=tp_size)
    for op, k in ops:
        sent = [meta("scores", (k + 1, 4), fingerprint=f"f{k}"), meta("ids", (k + 1,), "int64")]
        got = list(sent)
        if op == "dtype":
            got[1] = meta("ids", (k + 1,), "int32")
        elif op == "rename":
            got[0] = meta("score", (k + 1, 4))
        elif op == "order":
            got.reverse()
        elif op == "content":
            got[0] = meta("scores", (k + 1, 4), fingerprint="other")
        for tp in range(tp_size):
            if op == "none":
                run.none_attach(tp=tp)
            elif op == "raises":
                run.attach([], tp=tp, error=("RuntimeError", errors.ATTACH_EMPTY))
            elif op == "foreign-key":
                run.attach(sent, tp=tp, keys_before=("next_token_ids", PREFIX + "stray"))
            elif op != "extra":
                differs = op == "tp-differs" and tp == tp_size - 1
                run.attach([meta("scores", (k + 2, 4))] + sent[1:] if differs else sent, tp=tp)
        for tp in range(tp_size):
            if op in ("none", "lost"):  # lost: stage 0 called, and found nothing
                run.extract([], tp=tp)
            elif op == "leftover":
                run.extract(got, tp=tp, keys_after=("next_token_ids", got[0].key))
            elif op not in ("orphan", "raises"):
                run.extract(got, tp=tp)
    return run.trace()


def _shared(trace: Trace) -> Trace:
    """The same trace with equal tuples shared between events, as the loader shares them."""
    pool: dict[Any, Any] = {}

    def one(value: Any) -> Any:
        return pool.setdefault(value, value)

    def event(ev: Event) -> Event:
        return ev._replace(tensors=one(ev.tensors), keys_before=one(ev.keys_before),
                           keys_after=one(ev.keys_after))

    procs = tuple(ProcessTrace(p.rank, tuple(event(e) for e in p.events), p.stats, p.sources)
                  for p in trace.processes)
    return Trace(processes=procs)


runs = st.tuples(st.integers(2, 3), st.integers(1, 2),
                 st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2)), max_size=25))


@settings(max_examples=80, deadline=None, database=None)
@given(runs)
def test_sharing_equal_tuples_changes_no_finding(spec: tuple[int, int, list[Any]]) -> None:
    trace = _build(*spec)
    assert analyze(_shared(trace)) == analyze(trace)


def test_a_shared_run_still_reports_its_differences() -> None:
    # The fast path skips shared pairs only: a changed dtype among shared tuples is still seen
    # (on both TP channels, the second time as a repeat), and so is a TP rank that differs
    # (from its peer, and from what stage 0 received).
    trace = _shared(_build(2, 2, [("ok", 0), ("dtype", 1), ("ok", 0), ("dtype", 1),
                                  ("tp-differs", 2)]))
    kinds = sorted((f.kind.value, f.channel, f.cascade) for f in analyze(trace))
    assert kinds == [("dtype-mismatch", "pp0<-pp1/tp0", 1), ("dtype-mismatch", "pp0<-pp1/tp1", 1),
                     ("shape-mismatch", "pp0<-pp1/tp1", 0), ("tp-disagree", "pp1/tp0~tp1", 0)]


def _channel(trace: Trace, tp: int = 0) -> tuple[list[Event], list[Event]]:
    def of(pp: int) -> ProcessTrace:
        return next(p for p in trace.processes if (p.rank.pp_rank, p.rank.tp_rank) == (pp, tp))

    last = of(max(p.rank.pp_rank or 0 for p in trace.processes))
    attaches = [e for e in last.events if e.direction is Direction.ATTACH and e.ok and e.tensors]
    extracts = [e for e in of(0).events if e.direction is Direction.EXTRACT and e.tensors]
    return attaches, extracts


@settings(max_examples=80, deadline=None, database=None)
@given(runs)
def test_align_pairs_shared_and_unshared_tuples_alike(spec: tuple[int, int, list[Any]]) -> None:
    # The walk's fast path (one tuple at both ends) must pair as its slow path (equal tuples).
    trace = _build(*spec)
    plain_a, plain_e = _channel(trace)
    shared_a, shared_e = _channel(_shared(trace))
    plain, shared = align(plain_a, plain_e), align(shared_a, shared_e)
    assert list(shared.pairs()) == list(plain.pairs())
    assert (shared.orphans, shared.unmatched) == (plain.orphans, plain.unmatched)
    for found, attaches, extracts in ((plain, plain_a, plain_e), (shared, shared_a, shared_e)):
        assert list(found.unshared) == [(i, j) for i, j in found.pairs()
                                        if attaches[i].tensors is not extracts[j].tensors]
        assert all(n > 0 for _, _, n in found.runs)


def test_a_healthy_shared_channel_is_one_run_with_nothing_to_compare() -> None:
    attaches, extracts = _channel(_shared(_build(2, 1, [("ok", k % 3) for k in range(40)])))
    found = align(attaches, extracts)
    assert found.runs == ((0, 0, 40),)
    assert found.unshared == ()


def test_a_gap_splits_the_runs() -> None:
    attaches, extracts = _channel(_shared(_build(2, 1, [("ok", 0)] * 5 + [("lost", 1)]
                                                 + [("ok", 2)] * 5)))
    found = align(attaches, extracts)
    assert found.runs == ((0, 0, 5), (6, 5, 5))
    assert found.orphans == (5,)


def _naive(events: tuple[Event, ...], pp_rank: int | None) -> dict[str, Any]:
    """What each per-process check computed on its own pass, before ``scan``."""
    missing = 0
    first: dict[Direction, int | None] = dict.fromkeys(Direction)
    for direction in Direction:
        seqs = [e.seq for e in events if e.direction is direction]
        if seqs:
            missing += max(seqs) + 1 - min(seqs) - len(seqs)
            first[direction] = min(seqs)
    flagged = [(e, hygiene_specs(e, pp_rank)) for e in events]
    return {
        "attaches": [e for e in events
                     if e.direction is Direction.ATTACH and e.ok and e.tensors],
        "extracts": [e for e in events if e.direction is Direction.EXTRACT and e.tensors],
        "failed": [e for e in events if not e.ok],
        "flagged": [(e, s) for e, s in flagged if s],
        "unobserved": [e for e in events if e.direction is Direction.EXTRACT and (
            e.subject_pp_capable is False or e.subject_type in ("NoneType", "None"))],
        "attach_calls": sum(e.direction is Direction.ATTACH for e in events),
        "missing_seq": missing,
        "first_attach": first[Direction.ATTACH],
        "first_extract": first[Direction.EXTRACT],
        "dropped": max((e.dropped_before for e in events), default=0),
    }


names = st.sampled_from(["scores", "", "next_token_ids", PREFIX + "x",
                         "__sampling_observer_output_y"])
keys = st.sampled_from(["next_token_ids", PREFIX + "scores", "__sampling_observer_output_z",
                        "__msg_type__"])


@st.composite
def process_events(draw: st.DrawFn) -> tuple[tuple[Event, ...], int | None]:
    run = Run(pp_size=2)
    pool = [tuple(TensorMeta(name=n, key=PREFIX + n) for n in draw(st.lists(names, max_size=2)))
            for _ in range(3)]
    before = [tuple(draw(st.lists(keys, max_size=3))) for _ in range(3)]
    out = []
    for _ in range(draw(st.integers(0, 30))):
        direction = draw(st.sampled_from(Direction))
        ev = Event(direction=direction, seq=draw(st.integers(-2, 40)), rank=run.rank(1),
                   start_ns=0, mono_ns=0, duration_ns=0,
                   subject_type=draw(st.sampled_from(["demo.Scores", "NoneType", "None"])),
                   subject_pp_capable=draw(st.sampled_from([True, False, None])),
                   tensors=draw(st.sampled_from(pool)), keys_before=draw(st.sampled_from(before)),
                   keys_after=draw(st.sampled_from(before)),
                   error_type=draw(st.sampled_from([None, None, "RuntimeError"])),
                   error_message=draw(st.sampled_from(
                       [None, errors.ATTACH_DUPLICATE.format(name="scores")])),
                   dropped_before=draw(st.integers(0, 3)))
        out.append(ev)
    return tuple(out), draw(st.sampled_from([None, 0, 1]))


@settings(max_examples=150, deadline=None, database=None)
@given(process_events())
def test_scan_finds_what_each_check_finds_alone(
        spec: tuple[tuple[Event, ...], int | None]) -> None:
    events, pp_rank = spec
    found = scan(events, pp_rank)
    assert {name: getattr(found, name) for name in _naive(events, pp_rank)} == _naive(
        events, pp_rank)
