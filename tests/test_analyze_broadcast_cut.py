"""Broadcasts numbered apart from point-to-point messages (``MessageLog.bseq``), judged where a
rotation cut them (``pptrace.analyze.broadcasts``, ``holes``, ``waits``): a cut broadcast
channel is paired by seq when its seqs are its own, with no false finding for what lies before
either end's window; it says why when they are not; a source whose broadcast raised is
``message-raised``.
"""

from __future__ import annotations

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.holes import find_holes
from pptrace.model.findings import Category, Finding, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.report.text import finding_json, message_ref_json
from tests.helpers_analyze import mt
from tests.test_analyze_broadcast_messages import Bcast, _payload, bid

K = FindingKind
SEND, RECV = MessageOp.SEND, MessageOp.RECV
OUT = [mt("next_token_ids", (3,), "int64")]


def _messages(found: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in found if f.kind.category is Category.MESSAGE
            or f.kind is K.INCOMPLETE_TRACE]


def _rotated(first: int = 40) -> Bcast:
    """A PP=2 x TP=3 run rotated at different points: the source (rank 3) kept its broadcasts
    from #40, member tp1 (rank 4) its receives from #38 (the sends of #38 and #39 went with the
    source's rotated segments), member tp2 (rank 5) from #42 (its receives of #40 and #41
    went with its own); every rank also sends point-to-point, numbered by its own counters,
    cut too (stage 1 sends its outputs to stage 0 from send #10 on)."""
    b = Bcast()
    b.seqs[(0, SEND)], b.seqs[(1, RECV)], b.seqs[(2, RECV)] = first, first - 2, first + 2
    b.run.msg_seqs[(1, 0, SEND)] = b.run.msg_seqs[(0, 0, RECV)] = 10
    b.recv(1, _payload(0))  # broadcast #38 and #39: their sends are outside the source's window
    b.recv(1, _payload(1))
    for k in range(6):
        b.step(_payload(k), {2: None} if k < 2 else None)
        b.run.send("output", OUT, pp=1, to=0)
        b.run.recv("output", OUT, pp=0, frm=1)
    for tp in range(3):
        b.run.set_stats(1, tp, rotated_segments=3)
    b.run.set_stats(0, rotated_segments=2)
    return b


def test_a_rotated_run_that_cut_away_broadcasts_pairs_the_rest_without_findings() -> None:
    b = _rotated()
    trace = b.run.trace()
    judged = analysis(trace)
    assert _messages(judged.findings) == [], [f.message for f in judged.findings]
    # Broadcast #40 and #41 reached member tp1 alone (tp2's window starts at #42).
    assert judged.broadcast_pairs == {
        bid(3, SEND, k): ((bid(4, RECV, k),) if k < 42 else (bid(4, RECV, k), bid(5, RECV, k)))
        for k in range(40, 46)}
    # The point-to-point channel is paired by seq, unconfused by the broadcasts' numbers.
    assert judged.message_pairs == {MessageId(3, SEND, k): MessageId(0, RECV, k)
                                    for k in range(10, 16)}
    assert not any(h.lossy for h in find_holes(trace))


def test_a_difference_inside_a_cut_broadcast_window_is_found() -> None:
    b = _rotated()
    b.send(_payload(7))
    b.recv(1, _payload(7))
    b.recv(2, [mt("next_token_ids", (2,), "int32"), mt("scores", (2, 5))])
    found = _messages(analysis(b.run.trace()).findings)
    assert [(f.kind, f.severity, f.channel) for f in found] == [
        (K.MSG_DTYPE_MISMATCH, Severity.ERROR, "pp1/tp0->pp1/tp2")]
    assert found[0].messages[:2] == (bid(3, SEND, 46), bid(5, RECV, 46))
    assert "(broadcast receive #46)" in found[0].message


def test_a_cut_broadcast_channel_whose_seqs_are_not_its_own_says_why() -> None:
    """The source also broadcasts in a second group: where the first group's broadcasts start
    in its seqs cannot be told, so nothing is claimed, and a message-cut info says why."""
    b = _rotated()
    t = b.run._tick()
    b._add(0, MessageEvent(SEND, "end", b._seq(0, SEND), wall_ns=t, mono_ns=t,
                           duration_ns=300, kind="output", group=(3, 4)))
    b._add(1, MessageEvent(RECV, "end", b._seq(1, RECV), wall_ns=t, mono_ns=t, peer=3,
                           duration_ns=300, kind="output", group=(3, 4)))
    judged = analysis(b.run.trace())
    found = _messages(judged.findings)
    assert {(f.kind, f.severity) for f in found} == {(K.MSG_CUT, Severity.INFO)}
    assert sorted(f.ranks for f in found) == [(3,), (4,), (5,)]
    (source,) = [f for f in found if f.ranks == (3,)]
    assert source.message.startswith(
        "rank 3 (pp1/tp0) kept its messages from send #10 and broadcast send #40 on"), (
        source.message)
    assert source.message.endswith("(rank 3 broadcasts in more than one group, or receives "
                                   "broadcasts in this one: where the channel starts in its "
                                   "broadcast seqs cannot be told)")
    assert judged.broadcast_pairs == {}
    # The point-to-point channel of the same ranks is still paired by its own seqs.
    assert len(judged.message_pairs) == 6


def test_a_member_waiting_in_a_broadcast_is_a_hang_though_its_other_receives_number_higher(
        ) -> None:
    """Its point-to-point receive #2 on the same thread returned, and #5 began later: numbered
    apart, neither says that its broadcast receive #2 returned."""
    b = Bcast(tp=2)
    for k in range(2):
        b.step(_payload(k))
    for _ in range(6):  # receives #0-#5 on the member's one thread
        b.run.send("proxy", OUT, pp=0, to=1, tp=1)
        b.run.recv("proxy", OUT, pp=1, frm=0, tp=1)
    b.begin(1)  # broadcast receive #2: the source never makes it
    trace = b.run.trace()
    assert find_holes(trace)[3].lost_bends == ()
    found = _messages(analysis(trace).findings)
    assert [(f.kind, f.severity, f.messages) for f in found] == [
        (K.MSG_HANG, Severity.ERROR, (bid(3, RECV, 2),))]


def test_a_broadcast_that_raised_on_its_source_is_message_raised() -> None:
    b = Bcast()
    b.step(_payload(0))
    t = b.run._tick()
    b._add(0, MessageEvent(SEND, "end", b._seq(0, SEND), wall_ns=t, mono_ns=t, duration_ns=300,
                           kind="output", group=b.group, error_type="RuntimeError",
                           error_message="Connection closed by peer"))
    b.step(_payload(1))
    found = _messages(analysis(b.run.trace()).findings)
    assert [(f.kind, f.severity, f.channel, f.messages) for f in found] == [
        (K.MSG_RAISED, Severity.ERROR, "pp1/tp0", (bid(3, SEND, 1),))]
    assert found[0].message == (
        "rank 3 (pp1/tp0) broadcast send #1 of an `output` message to its group [3, 4, 5] "
        "raised RuntimeError: Connection closed by peer")
    # The JSON report marks a broadcast's reference; a point-to-point one reads as before.
    assert finding_json(found[0])["messages"] == [
        {"process": 3, "op": "send", "seq": 1, "broadcast": True}]
    assert message_ref_json(MessageId(3, SEND, 1)) == {"process": 3, "op": "send", "seq": 1}
