"""Every message channel is paired by the analyzer's one pairing walk (``pairing.align``), as
attaches pair with extracts: point-to-point channels with or without a known hole, and each
member of a broadcast. Before, a channel without a hole was zipped, a broadcast always was, and a
channel with a hole had its own first-agreeing skip: one message missing from the middle shifted
every pair after it into a cascade of false mismatches.
"""

from __future__ import annotations

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairing import align
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta
from tests.helpers_analyze import Run, mt
from tests.test_analyze_broadcast_messages import Bcast, bid

K = FindingKind
SEND, RECV = MessageOp.SEND, MessageOp.RECV


def _out(k: int) -> list[TensorMeta]:
    """A step's output: its batch (and so its shapes) changes from step to step, as a server's."""
    n = k % 4 + 1
    return [mt("next_token_ids", (n,), "int64"), mt("scores", (n, 5))]


def _ring() -> Run:
    """A healthy three-stage run: four steps of proxies stage to stage and outputs to stage 0."""
    run = Run(pp_size=3)
    for k in range(4):
        run.message("proxy", _out(k), frm=0, to=1)
        run.message("proxy", _out(k), frm=1, to=2)
        run.message("output", _out(k), frm=2, to=0)
    return run


def test_a_message_that_never_arrived_mid_run_is_one_finding_not_a_cascade() -> None:
    # The last stage sends 8 outputs; stage 0 receives all but #3 (sent, never delivered: a
    # misrouted or lost send), and goes on receiving the later ones.
    run = Run(pp_size=2)
    for k in range(8):
        run.send("output", _out(k), pp=1, to=0)
        if k != 3:
            run.recv("output", _out(k), pp=0, frm=1)
    result = analysis(run.trace())
    (f,) = result.findings
    assert f.kind is K.MSG_NEVER_RECEIVED
    assert f.messages == (MessageId(1, SEND, 3),)
    assert "(send #3)" in f.message
    # Every other send reached the receive that carried its payload.
    receives = [m for m in run.msgs[(0, 0)] if m.op is RECV and m.phase == "end"]
    assert [result.message_pairs[MessageId(1, SEND, k)] for k in (0, 1, 2, 4, 5, 6, 7)] == [
        MessageId(0, RECV, m.seq) for m in receives]


def test_a_real_difference_on_one_message_still_pairs_straight() -> None:
    # One receive got another dtype: a real mismatch, not a gap (skipping would explain
    # nothing that follows).
    run = Run(pp_size=2)
    for k in range(8):
        run.send("output", _out(k), pp=1, to=0)
        got = _out(k)
        if k == 3:
            got[1] = mt("scores", (4, 5), "bfloat16")
        run.recv("output", got, pp=0, frm=1)
    result = analysis(run.trace())
    assert [f.kind for f in result.findings] == [K.MSG_DTYPE_MISMATCH]
    assert result.findings[0].messages[0] == MessageId(1, SEND, 3)
    assert len(result.message_pairs) == 8


def test_a_broadcast_member_s_lost_receive_record_is_one_warning_not_a_cascade() -> None:
    # Member TP rank 1 lost one receive (its begin and end) to a hole its stats count; the rest
    # of its receives agree with the source's broadcasts once the walk skips the gap.
    b = Bcast()
    for k in range(8):
        b.step(_out(k))
    member = b.run.msgs[(1, 1)]
    lost = [m for m in member if m.phase == "end"][3]
    b.run.msgs[(1, 1)] = [m for m in member if m.seq != lost.seq]
    b.run.set_stats(1, 1, messages_recorded=len(member), messages_exported=len(member) - 2,
                    messages_dropped=2)
    result = analysis(b.run.trace())
    messages = [f for f in result.findings if f.kind.category.value == "message"]
    assert [(f.kind, f.severity) for f in messages] == [
        (K.MSG_NEVER_RECEIVED, Severity.WARNING)]
    assert messages[0].messages[0] == bid(3, SEND, 3)
    assert "hole in the trace" in messages[0].message


def _m(seq: int, tensors: list[TensorMeta], op: MessageOp = SEND) -> MessageEvent:
    return MessageEvent(op, "end", seq, keys=tuple(t.key for t in tensors),
                        tensors=tuple(tensors))


def test_the_walk_takes_no_hint_from_a_process_s_seqs_on_a_message_channel() -> None:
    # A process numbers its sends across peers, kinds and failed calls: here its send #4 raised
    # (no message left, none received), so the step between the two ends' numbers changes on a
    # healthy channel.
    sends = [_m(k, _out(0)) for k in range(11) if k != 4]
    receives = [_m(k, _out(0), RECV) for k in range(10)]
    found = align(sends, receives, False, keyed=True, stepped=False)
    assert (found.runs, found.orphans, found.unmatched) == (((0, 0, 10),), (), ())
    # With the hint (as for attaches and extracts, whose numbers count one channel's calls),
    # the walk would skip a receive to keep the step: a false loss on each side.
    hinted = align(sends, receives, False, keyed=True)
    assert (hinted.orphans, hinted.unmatched) == ((9,), (4,))


def test_each_message_channel_is_walked_once_per_analysis(monkeypatch) -> None:
    # The clocks' pass pairs the messages first; the judging pass reuses its alignments (the
    # shift to one clock moves no call in its channel's list) instead of walking again.
    from pptrace.analyze import message_align

    walked: list[int] = []
    real = message_align.align

    def counting(out, got, *args, **kwargs):  # type: ignore[no-untyped-def]
        walked.append(len(out))
        return real(out, got, *args, **kwargs)

    monkeypatch.setattr(message_align, "align", counting)
    result = analysis(_ring().trace())
    assert result.findings == ()
    assert walked == [4, 4, 4]  # three channels, one walk each
    assert len(result.message_pairs) == 12


def test_a_receiver_that_lists_the_keys_in_another_order_is_still_realigned() -> None:
    # SGLang's send_recv_tensor_dict hands the receiver the non-tensor values first: a healthy
    # receive may list the sender's keys in another order, which the payload comparison allows.
    # The walk compares shapes in key order too, so a lost message is still one finding.
    run = Run(pp_size=2)
    for k in range(8):
        sent = [*_out(k), mt("step", (), "int", is_tensor=False)]
        run.send("output", sent, pp=1, to=0)
        if k != 3:
            run.recv("output", sent[::-1], pp=0, frm=1)
    result = analysis(run.trace())
    assert [(f.kind, f.messages) for f in result.findings] == [
        (K.MSG_NEVER_RECEIVED, (MessageId(1, SEND, 3),))]


def test_an_earlier_alignment_is_reused_only_for_lists_it_covers() -> None:
    # The judging pass takes the clocks' pass's alignment of a channel by its key; should the key
    # name other lists there (runs joined on one side of the shift, apart on the other), the
    # alignment does not cover them and the channel is walked again.
    from pptrace.analyze.message_align import pair_channel
    from pptrace.analyze.pairing import Alignment

    ends = [(None, _m(k, _out(k))) for k in range(4)]
    got = [(None, _m(k, _out(k), RECV)) for k in range(4)]
    kept = Alignment(((0, 0, 4),), (), (), ())
    pairs, left, extra, found = pair_channel(ends, got, kept)  # type: ignore[arg-type]
    assert found is kept and len(pairs) == 4 and not left and not extra
    stale = Alignment(((0, 0, 2),), (), (), ())  # two calls of each: not these lists
    pairs, left, extra, found = pair_channel(ends, got, stale)  # type: ignore[arg-type]
    assert found is not stale and found.runs == ((0, 0, 4),) and len(pairs) == 4


def test_one_trace_s_messages_are_sorted_out_once_per_analysis(monkeypatch) -> None:
    # Where the clocks shift nothing the judging pass reads the very trace the clocks' pass
    # read: it takes that pass's sorted records and channel lists instead of making them again.
    from pptrace.analyze import message_sides

    sorted_out: list[int] = []
    real = message_sides.sort_out

    def counting(index, *args, **kwargs):  # type: ignore[no-untyped-def]
        sorted_out.append(index)
        return real(index, *args, **kwargs)

    monkeypatch.setattr(message_sides, "sort_out", counting)
    from pptrace.analyze import messages  # (where it once imported sort_out by name)
    monkeypatch.setattr(messages, "sort_out", counting, raising=False)
    result = analysis(_ring().trace())
    assert result.findings == () and not any(result.clocks.offsets)
    assert sorted(sorted_out) == [0, 1, 2]  # once per process (twice each before)
    assert len(result.message_pairs) == 12
