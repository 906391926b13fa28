"""Table tests: records built by the factory -> exactly the expected findings.

One row per finding kind and per collision type, plus clean runs that must give nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.model import errors
from pptrace.model.findings import Category, FindingKind, Severity
from pptrace.model.records import PREFIX, TensorMeta
from pptrace.model.trace import Trace
from tests.helpers_analyze import ENGINE, Run, meta

K = FindingKind
RT = "RuntimeError"
A = [meta("scores"), meta("ids", (8,), "int64")]


def healthy(run: Run, n: int = 3) -> None:
    for i in range(n):
        run.step([meta("scores", (i + 1, 5)), meta("ids", (i + 1,), "int64")])


# --- rows: each builds a run and names the kinds it must produce, exactly ---------------------


def clean_pp2(run: Run) -> None:
    healthy(run, 5)
    run.none_attach()
    run.extract([])
    healthy(run, 2)


def clean_pp4_tp2() -> Run:
    run = Run(pp_size=4, tp_size=2)
    for i in range(4):
        run.step([meta("scores", (i + 1, 5), fingerprint=f"fp{i}")])
    return run


def clean_skip_configured(run: Run) -> None:
    # No aux output this step on the last stage, nothing arrives at stage 0: not a pair.
    healthy(run, 2)
    run.none_attach()
    run.extract([])
    healthy(run, 2)


def attach_error(message: str, kind_inserted: tuple[str, ...] = ()) -> Callable[[Run], None]:
    def build(run: Run) -> None:
        healthy(run, 2)
        run.attach([meta("scores")] if kind_inserted else [], error=(RT, message),
                   inserted=kind_inserted)
    return build


def duplicate(run: Run) -> None:
    healthy(run, 1)
    run.attach([], error=(RT, errors.ATTACH_DUPLICATE.format(name="scores")),
               keys_before=("next_token_ids", PREFIX + "scores"))


def call_raised(run: Run) -> None:
    healthy(run, 1)
    run.attach([], error=("ValueError", "boom"))


def extract_error(message: str, subject: str = "demo.Observer",
                  capable: bool | None = True) -> Callable[[Run], None]:
    def build(run: Run) -> None:
        healthy(run, 2)
        run.attach(A)
        run.extract(A, error=(RT, message), subject=subject, capable=capable)
    return build


def extract_not_tensor(run: Run) -> None:
    healthy(run, 1)
    run.attach(A)
    run.extract(A + [meta("history", (), "list", "", is_tensor=False)],
                error=(RT, errors.EXTRACT_NOT_TENSOR))


def orphan(run: Run) -> None:
    healthy(run, 3)
    run.attach(A)  # its send was skipped: stage 0 got a skip marker, no aux keys
    run.extract([])
    healthy(run, 3)


def orphan_no_stage0_call(run: Run) -> None:
    healthy(run, 3)
    run.attach(A)  # its send was skipped and stage 0 made no call at all for that slot
    healthy(run, 3)


def orphan_constant_shapes(run: Run) -> None:
    for _ in range(3):
        run.step(A)
    run.attach(A)
    run.extract([])
    for _ in range(3):
        run.step(A)


def periodic_shapes_one_divergence(run: Run) -> None:
    # Batch sizes cycle with period 4: skipping 4 extracts would also line the shapes up,
    # but one dtype change is one finding, not four unmatched extracts and four orphans.
    for k in range(12):
        b = (1, 3, 8, 16)[k % 4]
        run.attach([meta("scores", (b, 5))])
        run.extract([meta("scores", (b, 5), "float16" if k == 7 else "float32")])


def two_skipped_sends(run: Run) -> None:
    healthy(run, 3)
    for _ in range(2):
        run.attach(A)
        run.extract([])
    healthy(run, 4)


def unmatched(run: Run) -> None:
    healthy(run, 2)
    run.none_attach()
    run.extract(A)
    healthy(run, 2)


def pair_of(attached: list, extracted: list) -> Callable[[Run], None]:  # type: ignore[type-arg]
    def build(run: Run) -> None:
        healthy(run, 2)
        run.attach(attached)
        run.extract(extracted)
        healthy(run, 2)
    return build


def cascade(run: Run) -> None:
    healthy(run, 2)
    for _ in range(5):
        run.attach([meta("scores")])
        run.extract([meta("scores", dtype="float16")])


def tp_disagree() -> Run:
    run = Run(pp_size=2, tp_size=2)
    run.step([meta("entropy", (8,), fingerprint="aaaa")])
    run.attach([meta("entropy", (8,), fingerprint="bbbb")], tp=0)
    run.attach([meta("entropy", (8,), fingerprint="cccc")], tp=1)
    run.extract([meta("entropy", (8,), fingerprint="bbbb")], tp=0)
    run.extract([meta("entropy", (8,), fingerprint="cccc")], tp=1)
    return run


def foreign_before_attach(run: Run) -> None:
    healthy(run, 1)
    run.attach(A, keys_before=("next_token_ids", PREFIX + "seed"))
    run.extract(A + [meta("seed", (1,), "int64")])


def foreign_after_attach(run: Run) -> None:
    healthy(run, 1)
    run.attach(A)
    run.extract(A + [meta("sampler_seed", (1,), "int64")])


def near_prefix(run: Run) -> None:
    healthy(run, 1)
    run.attach(A, keys_before=("next_token_ids", "__sampling_observer_output__seed"))
    run.extract(A, extra_keys=("__sampling_observer_output__seed",))


def reserved(run: Run) -> None:
    healthy(run, 1)
    run.step([meta("next_token_ids", (8,), "int64")])


def empty_name(run: Run) -> None:
    healthy(run, 1)
    run.attach(A)
    run.extract(A + [meta("", key=PREFIX)])


def name_with_prefix(run: Run) -> None:
    healthy(run, 1)
    run.step([meta(PREFIX + "scores")])


def leftover(run: Run) -> None:
    healthy(run, 1)
    run.attach(A)
    run.extract(A, keys_after=("next_token_ids", "__msg_type__", PREFIX + "scores"))


def off_stage0() -> Run:
    run = Run(pp_size=3)
    healthy(run, 2)
    run.extract(A, pp=1)  # stage 1 extracts what stage 0 should have taken
    return run


def no_pp_observer(run: Run) -> None:
    run.attach(A)
    run.extract([], subject="NoneType", capable=None)  # nothing arrived; no observer either
    run.attach(A)
    run.extract([], subject="NoneType", capable=None)


def missing_stage0() -> Run:
    run = Run(pp_size=2)
    run.absent.add((0, 0))
    for _ in range(3):
        run.attach(A)
    return run


def dropped(run: Run) -> None:
    healthy(run, 3)
    run.set_stats(0, dropped=4, recorded=10)


def messages_dropped(run: Run) -> None:
    healthy(run, 3)
    run.set_stats(0, messages_dropped=2)  # the message layer's own counter


def broadcast(pp: int = 2, tp: int = 2, *,
              received: Callable[[int, int], list[TensorMeta]] | None = None,
              lost_tp1: bool = False) -> Callable[[], Run]:
    """A TP-broadcast layout: only the last stage's TP rank 0 attaches; every stage-0 TP rank
    extracts (``received(k, tp)``: what stage-0 TP rank tp extracted for microbatch k)."""
    def build() -> Run:
        run = Run(pp_size=pp, tp_size=tp)
        if lost_tp1:
            run.absent.add((pp - 1, 1))
        for k in range(6):
            sent = [meta("scores", (k + 1, 5)), meta("ids", (k + 1,), "int64")]
            run.attach(sent, tp=0)
            for j in range(tp):  # an empty list: the dict arrived without its auxiliary keys
                run.extract(sent if received is None else received(k, j), tp=j)
        return run
    return build


def _float16_on_tp1(k: int, tp: int) -> list[TensorMeta]:
    return [meta("scores", (k + 1, 5), "float16" if tp == 1 else "float32"),
            meta("ids", (k + 1,), "int64")]


def _none_on_tp1_at_2(k: int, tp: int) -> list[TensorMeta]:
    return [] if (k, tp) == (2, 1) else [meta("scores", (k + 1, 5)),
                                         meta("ids", (k + 1,), "int64")]


def rotated(run: Run) -> None:
    healthy(run, 6)
    # The last stage's oldest segment, with its first 3 attaches, was rotated away.
    run.events[(1, 0)] = [e for e in run.events[(1, 0)] if e.seq >= 3]
    run.set_stats(1, recorded=6, exported=6, rotated=3, rotated_segments=1)


def not_final(run: Run) -> None:
    healthy(run, 3)
    run.set_stats(1, recorded=3, exported=3, final=False)  # killed after a periodic flush


def no_stats(run: Run) -> None:
    healthy(run, 3)
    run.unfinished.add((0, 0))  # killed before it wrote any stats span


def round_trip(received: str, *, layout: bool = True) -> Callable[[], Run]:
    """One process attaching and extracting (pp_size 1, or no PP layout at all), as an engine's
    own unit test of its transport does; the dict's dtype becomes ``received`` in between."""
    def build() -> Run:
        run = Run(pp_size=1, layout=layout)
        for i in range(3):
            run.attach([meta("scores", (i + 1, 5))])
            run.extract([meta("scores", (i + 1, 5), received)])
        return run
    return build


def attach_off_the_last_stage() -> Run:
    run = Run(pp_size=3)
    healthy(run, 2)
    run.attach(A, pp=1)  # stage 1 attaches: no channel pairs it with anything
    return run


OWN = "__aux__."  # a transport's own prefix, as each process's trace records it


def own_prefix(keys_before: tuple[str, ...], extra_keys: tuple[str, ...] = (),
               recorded: bool = True) -> Callable[[Run], None]:
    """A healthy pair under the prefix ``__aux__.`` with ``keys_before`` at the attach and
    ``extra_keys`` at stage 0; ``recorded``: the traces say the prefix (else: an older trace,
    read as SGLang's)."""
    def build(run: Run) -> None:
        own = [meta("scores", key=OWN + "scores")]
        run.attach(own, keys_before=keys_before)
        run.extract(own, extra_keys=extra_keys)
        for pp in (0, 1):
            run.set_stats(pp, recorded=1, exported=1, prefix=OWN if recorded else None)
    return build


ROWS: list[tuple[str, Callable[[Run], None] | Callable[[], Run], list[FindingKind]]] = [
    ("clean pp2", clean_pp2, []),
    ("clean pp4 tp2", clean_pp4_tp2, []),
    ("clean: no aux output this step", clean_skip_configured, []),
    ("attach not pp", attach_error(errors.ATTACH_NOT_PP), [K.ATTACH_NOT_PP]),
    ("attach empty", attach_error(errors.ATTACH_EMPTY), [K.ATTACH_EMPTY]),
    ("attach bad name", attach_error(errors.ATTACH_BAD_NAME, (PREFIX + "scores",)),
     [K.ATTACH_BAD_NAME]),
    ("attach not tensor", attach_error(errors.ATTACH_NOT_TENSOR.format(name="entropy")),
     [K.ATTACH_NOT_TENSOR]),
    ("attach duplicate", duplicate, [K.ATTACH_DUPLICATE]),
    ("call raised", call_raised, [K.CALL_RAISED]),
    ("extract no observer", extract_error(errors.EXTRACT_NO_OBSERVER, "NoneType", None),
     [K.EXTRACT_NO_OBSERVER]),
    ("extract not pp", extract_error(errors.EXTRACT_NOT_PP, "old.Observer", False),
     [K.EXTRACT_NOT_PP]),
    ("extract not tensor", extract_not_tensor, [K.EXTRACT_NOT_TENSOR, K.PREFIXED_FOREIGN_KEY]),
    ("extract not reconstructed", extract_error(errors.EXTRACT_NOT_RECONSTRUCTED),
     [K.EXTRACT_NOT_RECONSTRUCTED]),
    ("orphan attach (skipped send)", orphan, [K.ORPHAN_ATTACH]),
    ("orphan attach, constant shapes", orphan_constant_shapes, [K.ORPHAN_ATTACH]),
    ("orphan attach, no call on stage 0", orphan_no_stage0_call, [K.ORPHAN_ATTACH]),
    ("two skipped sends", two_skipped_sends, [K.ORPHAN_ATTACH]),
    ("periodic shapes, one divergence", periodic_shapes_one_divergence, [K.DTYPE_MISMATCH]),
    ("unmatched extract", unmatched, [K.UNMATCHED_EXTRACT]),
    ("names differ", pair_of([meta("a"), meta("b")], [meta("a")]), [K.NAMES_DIFFER]),
    ("names renamed", pair_of([meta("a")], [meta("b")]), [K.NAMES_DIFFER]),
    ("order differs", pair_of([meta("a"), meta("b")], [meta("b"), meta("a")]),
     [K.ORDER_DIFFERS]),
    ("shape", pair_of([meta("s", (8, 5))], [meta("s", (40,))]), [K.SHAPE_MISMATCH]),
    ("dtype", pair_of([meta("s")], [meta("s", dtype="float16")]), [K.DTYPE_MISMATCH]),
    ("shape and dtype", pair_of([meta("s")], [meta("s", (40,), "float16")]),
     [K.SHAPE_MISMATCH, K.DTYPE_MISMATCH]),
    ("bytes", pair_of([meta("s")], [meta("s", nbytes=80)]), [K.BYTES_MISMATCH]),
    ("device type", pair_of([meta("s", device="cuda:3")], [meta("s", device="cpu")]),
     [K.DEVICE_TYPE_MISMATCH]),
    ("device index differs by design", pair_of([meta("s", device="cuda:3")],
                                               [meta("s", device="cuda:0")]), []),
    ("content", pair_of([meta("s", fingerprint="ab12")], [meta("s", fingerprint="cd34")]),
     [K.CONTENT_MISMATCH]),
    ("cascade summarised", cascade, [K.DTYPE_MISMATCH]),
    ("tp disagree", tp_disagree, [K.TP_DISAGREE]),
    ("collision: prefixed key before attach", foreign_before_attach,
     [K.PREFIXED_FOREIGN_KEY]),
    ("collision: prefixed key after attach", foreign_after_attach, [K.PREFIXED_FOREIGN_KEY]),
    ("collision: key that looks like the prefix", near_prefix,
     [K.PREFIXED_FOREIGN_KEY]),
    ("collision: reserved name", reserved, [K.RESERVED_NAME]),
    ("collision: empty name", empty_name, [K.EMPTY_NAME, K.PREFIXED_FOREIGN_KEY]),
    ("collision: name carries the prefix", name_with_prefix, [K.NAME_HAS_PREFIX]),
    ("leftover keys", leftover, [K.LEFTOVER_KEYS]),
    ("extract off stage 0", off_stage0, [K.EXTRACT_OFF_STAGE0]),
    ("no pp observer", no_pp_observer, [K.NO_PP_OBSERVER, K.ORPHAN_ATTACH]),
    ("missing rank", missing_stage0, [K.MISSING_RANK]),
    ("events dropped", dropped, [K.EVENTS_DROPPED]),
    ("stats not final", not_final, [K.STATS_NOT_FINAL]),
    ("message records dropped", messages_dropped, [K.INCOMPLETE_TRACE]),
    ("window cut by rotation", rotated, [K.WINDOW_CUT]),
    ("clean tp broadcast pp2 tp2", broadcast(), []),
    ("clean tp broadcast pp4 tp4", broadcast(4, 4), []),
    ("tp broadcast: a dtype change on stage-0 tp 1", broadcast(received=_float16_on_tp1),
     [K.DTYPE_MISMATCH]),
    ("tp broadcast: an extract missing on stage-0 tp 1", broadcast(received=_none_on_tp1_at_2),
     [K.ORPHAN_ATTACH]),
    ("tp broadcast: the last stage's tp 1 left no trace", broadcast(lost_tp1=True),
     [K.MISSING_RANK]),
    ("no stats at all", no_stats, [K.STATS_NOT_FINAL]),
    ("round trip, pp_size 1: healthy", round_trip("float32"), []),
    ("round trip, pp_size 1: dtype changed", round_trip("float16"), [K.DTYPE_MISMATCH]),
    ("round trip, no PP layout: healthy", round_trip("float32", layout=False), []),
    ("round trip, no PP layout: dtype changed", round_trip("float16", layout=False),
     [K.DTYPE_MISMATCH]),
    ("attaches off the last stage are named, not judged", attach_off_the_last_stage,
     [K.UNPAIRED_CALLS]),
    ("own prefix: clean", own_prefix(ENGINE), []),
    ("own prefix: a key under it before attach", own_prefix(ENGINE + (OWN + "seed",)),
     [K.PREFIXED_FOREIGN_KEY]),
    ("own prefix: a key that looks like it", own_prefix(ENGINE, ("__aux__seed",)),
     [K.PREFIXED_FOREIGN_KEY]),
    ("own prefix: a key that looks like SGLang's is no one's business",
     own_prefix(ENGINE, ("__sampling_observer_output__seed",)), []),
    ("older trace, no prefix recorded: SGLang's", own_prefix(
        ENGINE, ("__sampling_observer_output__seed",), recorded=False), [K.PREFIXED_FOREIGN_KEY]),
]


def _build(builder: Callable[..., object]) -> Run:
    # A row either fills the default Run it is given or makes its own (another layout).
    if inspect.signature(builder).parameters:
        run = Run()
        builder(run)
        return run
    result = builder()
    assert isinstance(result, Run)
    return result


@pytest.mark.parametrize(("builder", "expected"), [(b, e) for _, b, e in ROWS],
                         ids=[name for name, _, _ in ROWS])
def test_row_gives_exactly_the_expected_findings(
    builder: Callable[..., object], expected: list[FindingKind]
) -> None:
    findings = analyze(_build(builder).trace())
    assert sorted(f.kind.value for f in findings) == sorted(k.value for k in expected)


def test_every_kind_has_a_row() -> None:
    # The message layer's kinds have their rows in test_analyze_messages.
    covered = {k for _, _, kinds in ROWS for k in kinds}
    assert covered == {k for k in FindingKind if k.category is not Category.MESSAGE}


def test_messages_name_both_sides() -> None:
    run = Run()
    pair_of([meta("scores")], [meta("scores", dtype="float16")])(run)
    (f,) = analyze(run.trace())
    assert f.message == "rank 1 attached `scores` float32[8, 5]; rank 0 extracted float16[8, 5]"
    assert f.ranks == (1, 0)
    assert f.microbatch == 2
    assert f.channel == "pp0<-pp1/tp0"
    assert f.severity is Severity.ERROR
    assert [e.direction.value for e in f.events] == ["attach", "extract"]
    trace = run.trace()
    assert trace.event(f.events[0]).tensors[0].dtype == "float32"
    assert trace.event(f.events[1]).tensors[0].dtype == "float16"


def test_cascade_is_counted_not_flooded() -> None:
    run = Run()
    cascade(run)
    (f,) = analyze(run.trace())
    assert f.cascade == 4
    assert f.microbatch == 2
    assert "(and 4 more like this through microbatch 6)" in f.message


def test_orphan_is_the_skipped_microbatch_and_nothing_cascades() -> None:
    for build in (orphan, orphan_constant_shapes, orphan_no_stage0_call):
        run = Run()
        build(run)
        (f,) = analyze(run.trace())
        assert f.microbatch == 3, build.__name__
        assert f.severity is Severity.WARNING


def test_engine_error_says_where() -> None:
    run = Run(pp_size=4)
    attach_error(errors.ATTACH_EMPTY)(run)
    (f,) = analyze(run.trace())
    assert f.message.startswith("rank 3 (pp3, tp 0) attach #2 raised RuntimeError: "
                                + errors.ATTACH_EMPTY)
    assert "output type demo.Scores" in f.message


def test_losses_lower_absence_findings() -> None:
    run = Run()
    orphan(run)
    run.set_stats(0, dropped=2, recorded=16)
    kinds = {f.kind: f for f in analyze(run.trace())}
    assert set(kinds) == {K.ORPHAN_ATTACH, K.EVENTS_DROPPED}
    assert kinds[K.ORPHAN_ATTACH].severity is Severity.INFO
    assert "recording gap" in kinds[K.ORPHAN_ATTACH].message


def test_sequence_gaps_count_as_losses() -> None:
    run = Run()
    healthy(run, 2)
    run.attach(A, seq=10)  # seqs 2..9 of the last stage were never exported
    run.extract(A)
    (f,) = analyze(run.trace())
    assert f.kind is K.EVENTS_DROPPED
    assert "8 missing sequence numbers" in f.message


def test_unknown_layout_pairs_by_role() -> None:
    # Ranks that could not learn their PP layout: the roles come from what they did.
    from tests.helpers_analyze import with_rank

    run = Run()
    pair_of([meta("s")], [meta("s", dtype="float16")])(run)
    for evs in run.events.values():
        evs[:] = [with_rank(e, pp_rank=None, pp_size=None, tp_rank=None) for e in evs]
    (f,) = analyze(run.trace(all_ranks=False))
    assert f.kind is K.DTYPE_MISMATCH


def test_runs_loaded_together_pair_within_each_run() -> None:
    good, bad = Run(run_id="good"), Run(run_id="bad")
    healthy(good, 3)
    pair_of([meta("s")], [meta("s", dtype="float16")])(bad)
    procs = []
    for run, offset in ((good, 0), (bad, 50)):
        for proc in run.trace().processes:  # other pids: other processes
            rank = replace(proc.rank, pid=proc.rank.pid + offset)
            events = tuple(e._replace(rank=rank) for e in proc.events)
            procs.append(replace(proc, rank=rank, events=events))
    procs.sort(key=lambda p: (p.rank.rank, -p.rank.pid))  # interleave the runs
    (f,) = analyze(Trace(processes=tuple(procs)))
    assert f.kind is K.DTYPE_MISMATCH
    assert f.channel == "bad:pp0<-pp1/tp0"


def test_flight_mode_rings_that_cover_different_windows() -> None:
    # Each process kept only its last 8 calls; stage 0's ring ends one call later.
    run = Run()
    for k in range(24, 32):
        run.attach([meta("s", (k % 3 + 1, 5))], seq=k)
    for k in range(25, 33):
        run.extract([meta("s", (k % 3 + 1, 5))], seq=k)
    run.set_stats(0, recorded=33, overwritten=25)
    run.set_stats(1, recorded=32, overwritten=24)
    findings = analyze(run.trace())
    kinds = sorted((f.kind.value, f.severity.name) for f in findings)
    # Microbatch 24 lies before stage 0's window: not judged. Inside the window nothing was
    # lost, so the extract #32 that no attach matches (the last stage made 32 in all) is an
    # error.
    assert kinds == [("unmatched-extract", "ERROR"), ("window-cut", "INFO")]
    cut = next(f for f in findings if f.kind is K.WINDOW_CUT)
    assert cut.message.startswith("microbatches 0-24 are outside the kept window of rank 0 "
                                  "(its flight ring kept only its last events (25 overwritten))")


def test_unfinished_stats_lower_absence_findings_and_say_why() -> None:
    run = Run()
    orphan(run)
    run.unfinished.add((0, 0))
    kinds = {f.kind: f for f in analyze(run.trace())}
    assert set(kinds) == {K.ORPHAN_ATTACH, K.STATS_NOT_FINAL}
    assert kinds[K.STATS_NOT_FINAL].message.startswith(
        "rank 0 wrote no stats at all (still running, killed, or out of time at exit)")
    assert kinds[K.ORPHAN_ATTACH].severity is Severity.INFO
    assert "rank 0 wrote no stats at all: this may be a recording gap" in (
        kinds[K.ORPHAN_ATTACH].message)


def test_another_sinks_losses_do_not_weaken_this_traces_findings() -> None:
    # The OTLP exporter lost 500 events; the trace file has every one: an unmatched extract
    # in the file stays an error (a down collector must not hide it from CI).
    run = Run()
    unmatched(run)
    n = len(run.events[(1, 0)])
    run.set_stats(1, recorded=n, exported=n, sink_dropped=(("otlp", 500),))
    (f,) = analyze(run.trace())
    assert f.kind is K.UNMATCHED_EXTRACT
    assert f.severity is Severity.ERROR
