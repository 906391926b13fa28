"""The one TP check: the TP ranks of one stage hold the same payload for the same transfer.

The attach layer's ``tp-disagree`` (the last stage's auxiliary output per microbatch) and the
message layer's ``message-slices-differ`` (what a sending stage sent as TP slices per send) used
to be two checks that disagreed on what "the same" is; the cases below are those disagreements,
each now judged by the one payload comparison (``pptrace.analyze.payload``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pptrace.analyze.analyzer import analyze
from pptrace.analyze.payload import Field
from pptrace.analyze.tp import TpRank, disagreements
from pptrace.model.findings import Finding, FindingKind
from pptrace.model.records import Direction, Event, RankInfo, TensorMeta
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, meta, mt

K = FindingKind
OUT = [mt("next_token_ids", (8,), "int64")]


def _run(tp0: Sequence[TensorMeta], tp1: Sequence[TensorMeta]) -> Trace:
    """A pp 2 x tp 2 run whose stage 0 TP ranks sent these proxies (each received as sent, so
    only the TP check can tell)."""
    run = Run(pp_size=2, tp_size=2)
    run.message("output", OUT, frm=1, to=0, carries=0)
    for tp, sent in enumerate((tp0, tp1)):
        run.send("proxy", sent, pp=0, to=1, tp=tp)
    for tp, sent in enumerate((tp0, tp1)):
        run.recv("proxy", sent, pp=1, frm=0, tp=tp)
    return run.trace()


def _proxies(tp0: Sequence[TensorMeta], tp1: Sequence[TensorMeta]) -> list[Finding]:
    return analyze(_run(tp0, tp1))


def _slices(findings: list[Finding]) -> list[str]:
    assert {f.kind for f in findings} <= {K.MSG_SLICES_DIFFER}, [f.message for f in findings]
    return [f.message for f in findings]


HEAD = "rank 0 (pp0/tp0) and rank 1 (pp0/tp1) sent "
TAIL = (": the receivers re-assemble a mix of them (a tensor that is not TP-replicated sent as "
        "slices: silent corruption)")


def test_replicated_slices_agree() -> None:
    x = mt("hidden_states", (8, 16), sliced=True, fingerprint="f")
    assert _proxies([x, mt("lengths", (3,), "int64", fingerprint="a")],
                    [x, mt("lengths", (3,), "int64", fingerprint="b")]) == []  # not sliced


def test_a_shape_and_a_content_difference_keep_their_wording() -> None:
    a = mt("hidden_states", (8, 16), sliced=True, fingerprint="f0")
    assert _slices(_proxies([a], [mt("hidden_states", (8, 8), sliced=True)])) == [
        HEAD + "`hidden_states` as TP slices of different tensors in a `proxy` message #0 "
        "(float32[8, 16]/tp on rank 0, float32[8, 8]/tp on rank 1)" + TAIL]
    assert _slices(_proxies([a], [a._replace(fingerprint="f1")])) == [
        HEAD + "`hidden_states` as TP slices of different tensors in a `proxy` message #0 "
        "(fingerprints f0 on rank 0, f1 on rank 1)" + TAIL]


def test_a_sliced_tensor_only_one_tp_rank_sent() -> None:
    # Bug: the message check skipped a key the reference rank lacked (and never looked at the
    # reference's keys the other lacked); the attach check calls a name on one side a
    # difference. The receivers' all-gathers then pair the slice with another tensor's.
    x = mt("hidden_states", (8, 16), sliced=True)
    extra = mt("residual", (8, 16), sliced=True)
    assert _slices(_proxies([x, extra], [x])) == [
        HEAD + "`residual` as TP slices of different tensors in a `proxy` message #0 "
        "(float32[8, 16]/tp on rank 0, nothing on rank 1)" + TAIL]
    assert _slices(_proxies([x], [x, extra])) == [
        HEAD + "`residual` as TP slices of different tensors in a `proxy` message #0 "
        "(nothing on rank 0, float32[8, 16]/tp on rank 1)" + TAIL]


def test_a_tensor_sliced_on_one_tp_rank_and_whole_on_the_other() -> None:
    # Bug: the message check compared shape, dtype and fingerprint only, so a tensor one TP
    # rank sent as its slice and the other whole (per-key all_gather_tensors that differ)
    # passed: the receivers disagree on whether to all-gather it.
    x = mt("residual", (8, 16), sliced=True)
    assert _slices(_proxies([x], [x._replace(sliced=False)])) == [
        HEAD + "`residual` as TP slices of different tensors in a `proxy` message #0 "
        "(float32[8, 16]/tp on rank 0, float32[8, 16] on rank 1)" + TAIL]


def test_tp_slices_in_another_order() -> None:
    # Bug: the message check matched slices by key and never compared their order; the
    # receivers all-gather in the order their own metadata lists, so the n-th gather mixes
    # one rank's `a` with the other's `b`. The attach check calls another order a difference.
    a, b = mt("a", (8, 16), sliced=True), mt("b", (8, 16), sliced=True)
    assert _slices(_proxies([a, b], [b, a])) == [
        HEAD + "`a` as TP slices of different tensors in a `proxy` message #0 "
        "(in the order `a`, `b` on rank 0, `b`, `a` on rank 1)" + TAIL]


def test_tp_slices_on_another_device_type() -> None:
    # Bug: the message check ignored the device type, which the one payload comparison (and
    # so the attach check) compares: a CPU slice and a CUDA slice are not one all-gather.
    x = mt("hidden_states", (8, 16), sliced=True, device="cuda")
    assert _slices(_proxies([x], [x._replace(device="cpu")])) == [
        HEAD + "`hidden_states` as TP slices of different tensors in a `proxy` message #0 "
        "(float32[8, 16]/tp on cuda on rank 0, float32[8, 16]/tp on cpu on rank 1)" + TAIL]


def test_the_attach_check_is_unchanged_by_the_device_index() -> None:
    run = Run(pp_size=2, tp_size=2)
    for _ in range(2):
        run.attach([meta("e", (8,), device="cuda:2", fingerprint="f")], tp=0)
        run.attach([meta("e", (8,), device="cuda:3", fingerprint="f")], tp=1)
        run.extract([meta("e", (8,), device="cuda:0", fingerprint="f")], tp=0)
        run.extract([meta("e", (8,), device="cuda:1", fingerprint="f")], tp=1)
    assert analyze(run.trace()) == []


def test_a_process_whose_tp_rank_is_unknown_is_not_another_tp_rank() -> None:
    # Bug: the message check sorted an unknown TP rank as TP 0 but then compared it with TP 0
    # as another rank (``None != 0``), claiming a mix of slices between two processes not
    # known to be two TP ranks; the attach check (and every channel) reads unknown as TP 0.
    trace = _run([mt("x", (8, 16), sliced=True, fingerprint="a")],
                 [mt("x", (8, 16), sliced=True, fingerprint="b")])
    procs = list(trace.processes)
    assert (procs[1].rank.pp_rank, procs[1].rank.tp_rank) == (0, 1)
    procs[1] = replace(procs[1], rank=replace(procs[1].rank, tp_rank=None))
    findings = analyze(replace(trace, processes=tuple(procs)))
    assert K.MSG_SLICES_DIFFER not in {f.kind for f in findings}, [f.message for f in findings]


def test_one_check_serves_both_layers() -> None:
    """Attaches and sends holding the same tensors get the same verdict from the one check."""
    a = (mt("x", (8,), fingerprint="a", device="cuda:0"), mt("y", (4,), "int64"))
    b = (mt("x", (8,), fingerprint="b", device="cuda:1"), mt("y", (4,), "int64"))

    def rank(tp: int) -> RankInfo:
        return RankInfo(rank=2 + tp, pp_rank=1, pp_size=2, tp_rank=tp, tp_size=2)

    def attach(tensors: tuple[TensorMeta, ...]) -> Event:
        return Event(Direction.ATTACH, 0, rank(0), 0, 0, 0, tensors=tensors)

    attaches = [TpRank(tp, rank(tp), "r", [attach(t)]) for tp, t in enumerate((a, b))]
    run = Run(pp_size=2, tp_size=2)
    sends = [TpRank(tp, rank(tp), "r", [run.send("output", t, pp=1, to=0, tp=tp)])
             for tp, t in enumerate((a, b))]
    (by_attach,) = disagreements(attaches)
    (by_send,) = disagreements(sends)
    assert by_attach.verdict == by_send.verdict
    assert [(line.name, line.differs) for line in by_send.verdict.differing] == [
        ("x", frozenset({Field.FINGERPRINT}))]  # the device index differs by design
    assert list(disagreements(sends, pick=lambda ts: ts[1:])) == []  # y alone agrees
