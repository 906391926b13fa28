"""TP-broadcast layouts (issue 16, item 2): only the last stage's attention-TP rank 0 attaches,
the dict reaches its other TP ranks by ``broadcast_tensor_dict``, and every stage-0 TP rank
extracts. Each stage-0 TP rank's extracts pair with TP rank 0's attaches; a healthy run gives
nothing, and every real mismatch is still found.
"""

from __future__ import annotations

from pptrace.analyze.analyzer import analysis, analyze
from pptrace.analyze.channels import Channel
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.records import TensorMeta
from tests.helpers_analyze import Run, meta

K = FindingKind


def _sent(k: int) -> list[TensorMeta]:
    return [meta("scores", (k % 5 + 1, 5)), meta("ids", (k % 5 + 1,), "int64")]


def _broadcast(pp: int = 2, tp: int = 2, steps: int = 12) -> Run:
    run = Run(pp_size=pp, tp_size=tp)
    for k in range(steps):
        run.attach(_sent(k), tp=0)
        for j in range(tp):
            run.extract(_sent(k), tp=j)
    return run


def test_a_healthy_broadcast_layout_pairs_every_stage0_tp_rank_with_tp_rank_0() -> None:
    result = analysis(_broadcast(pp=4, tp=2).trace())
    assert result.findings == ()
    # processes: rank = pp * 2 + tp; the last stage's TP rank 0 is process 6
    assert result.channels == (
        Channel("pp0<-pp3/tp0", sender=6, receiver=0, tp=0),
        Channel("pp0/tp1<-pp3/tp0", sender=6, receiver=1, tp=1, broadcast=True),
    )


def test_a_dtype_change_on_one_stage0_tp_rank() -> None:
    run = Run(pp_size=2, tp_size=2)
    for k in range(12):
        run.attach(_sent(k), tp=0)
        run.extract(_sent(k), tp=0)
        got = _sent(k)
        if k >= 5:
            got[0] = meta("scores", (k % 5 + 1, 5), "bfloat16")
        run.extract(got, tp=1)
    (f,) = analyze(run.trace())
    assert (f.kind, f.channel, f.microbatch, f.cascade) == (K.DTYPE_MISMATCH,
                                                            "pp0/tp1<-pp1/tp0", 5, 6)
    assert f.message.startswith("rank 2 attached `scores` float32[1, 5]; rank 1 extracted "
                                "bfloat16[1, 5]")


def test_an_extract_missing_on_stage0_tp_1() -> None:
    run = Run(pp_size=2, tp_size=2)
    for k in range(12):
        run.attach(_sent(k), tp=0)
        run.extract(_sent(k), tp=0)
        run.extract([] if k == 7 else _sent(k), tp=1)  # the dict came without its aux keys
    (f,) = analyze(run.trace())
    assert (f.kind, f.severity, f.channel, f.microbatch) == (K.ORPHAN_ATTACH, Severity.WARNING,
                                                             "pp0/tp1<-pp1/tp0", 7)
    assert f.message.startswith("rank 2 attached `scores`, `ids` (attach #7); rank 1 never "
                                "extracted it")


def test_a_last_stage_tp_rank_that_really_lost_its_trace_is_still_a_missing_rank() -> None:
    # No process for the last stage's TP rank 1: no evidence of a broadcast layout.
    run = _broadcast()
    run.absent.add((1, 1))
    (f,) = analyze(run.trace())
    assert (f.kind, f.channel) == (K.MISSING_RANK, "pp0<-pp?/tp1")
    assert f.message.startswith("no trace from the last stage (tp 1): 12 extracts on rank 1")


def test_a_quiet_tp_rank_that_was_killed_is_no_evidence() -> None:
    # The last stage's TP rank 1 wrote no final stats (killed after a periodic flush): its
    # silence may be attaches it never flushed.
    run = _broadcast()
    run.set_stats(1, 1, final=False)
    kinds = sorted(f.kind.value for f in analyze(run.trace()))
    assert kinds == ["missing-rank"]


def test_one_quiet_tp_rank_is_evidence_enough_for_the_others() -> None:
    # tp 4: the last stage's TP rank 3 left no trace; 1 and 2 are traced and never attach.
    run = _broadcast(tp=4)
    run.absent.add((1, 3))
    result = analysis(run.trace())
    assert result.findings == ()
    assert [c.name for c in result.channels] == ["pp0<-pp1/tp0", "pp0/tp1<-pp1/tp0",
                                                 "pp0/tp2<-pp1/tp0", "pp0/tp3<-pp1/tp0"]


def test_a_second_attaching_tp_rank_means_the_per_rank_layout() -> None:
    # TP rank 1 attaches too: the per-rank layout, and TP rank 2's silence is a missing rank.
    run = Run(pp_size=2, tp_size=3)
    for k in range(6):
        for j in (0, 1):
            run.attach(_sent(k), tp=j)
        for j in range(3):
            run.extract(_sent(k), tp=j)
    assert [(f.kind, f.channel) for f in analyze(run.trace())] == [
        (K.MISSING_RANK, "pp0<-pp?/tp2")]


def test_stage0_tp_1_not_traced_in_a_broadcast_layout() -> None:
    run = _broadcast()
    run.absent.add((0, 1))
    (f,) = analyze(run.trace())
    assert (f.kind, f.channel) == (K.MISSING_RANK, "pp0/tp1<-pp1/tp0")
    assert f.message.startswith("no trace from stage 0 (tp 1): 12 attaches on rank 2")


def test_a_broadcast_layout_whose_windows_were_cut() -> None:
    run = _broadcast(steps=40)
    run.events[(1, 0)] = [e for e in run.events[(1, 0)] if e.seq >= 10]
    run.set_stats(1, 0, recorded=40, exported=40, rotated=10, rotated_segments=1)
    run.events[(0, 1)] = [e for e in run.events[(0, 1)] if e.seq >= 25]
    run.set_stats(0, 1, recorded=40, exported=40, rotated=25, rotated_segments=2)
    findings = analyze(run.trace())
    assert sorted((f.kind.value, f.channel) for f in findings) == [
        ("window-cut", "pp0/tp1<-pp1/tp0"), ("window-cut", "pp0<-pp1/tp0")]
    by_channel = {f.channel: f.message for f in findings}
    assert by_channel["pp0/tp1<-pp1/tp0"].startswith("microbatches 0-24 are outside the kept "
                                                     "window of rank 1")
    assert by_channel["pp0<-pp1/tp0"].startswith("microbatches 0-9 are outside the kept window "
                                                 "of rank 2")
