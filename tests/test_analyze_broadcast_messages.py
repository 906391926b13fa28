"""Broadcasts in the message layer (``pptrace.analyze.broadcasts``): one source's send paired with a
receive on every other member of its group, first in first out, each receive's payload compared
with the source's; a member that never received, or waits, and a member whose payload differs,
named with both ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from pptrace.analyze.analyzer import analysis
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta
from tests.helpers_analyze import Run, msg_keys, mt

K = FindingKind
SEND, RECV = MessageOp.SEND, MessageOp.RECV


def bid(process: int, op: MessageOp, seq: int) -> MessageId:
    """A broadcast's send or receive (numbered apart from point-to-point messages)."""
    return MessageId(process, op, seq, broadcast=True)


class Bcast:
    """A PP=2 x TP=3 run whose last stage's TP rank 0 broadcasts to its TP ranks 1 and 2
    (global ranks 3, 4, 5); process index = global rank."""

    def __init__(self, tp: int = 3) -> None:
        self.run = Run(pp_size=2, tp_size=tp)
        self.group = tuple(self.run.rank(1, j).rank or 0 for j in range(tp))
        self.seqs: dict[tuple[int, MessageOp], int] = {}

    def _seq(self, tp: int, op: MessageOp) -> int:
        n = self.seqs.get((tp, op), 0)
        self.seqs[(tp, op)] = n + 1
        return n

    def _add(self, tp: int, m: MessageEvent) -> MessageEvent:
        self.run.msgs.setdefault((1, tp), []).append(m)
        return m

    def send(self, tensors: Sequence[TensorMeta]) -> MessageEvent:
        t = self.run._tick()
        return self._add(0, MessageEvent(
            SEND, "end", self._seq(0, SEND), wall_ns=t, mono_ns=t, duration_ns=300,
            kind="output", keys=msg_keys(tensors), tensors=tuple(tensors), group=self.group))

    def begin(self, tp: int) -> MessageEvent:
        t = self.run._tick()
        return self._add(tp, MessageEvent(RECV, "begin", self._seq(tp, RECV), wall_ns=t,
                                          mono_ns=t, peer=self.group[0], group=self.group))

    def recv(self, tp: int, tensors: Sequence[TensorMeta]) -> MessageEvent:
        b = self.begin(tp)
        t = self.run._tick()
        return self._add(tp, b._replace(phase="end", wall_ns=t, mono_ns=t, duration_ns=300,
                                        kind="output", keys=msg_keys(tensors),
                                        tensors=tuple(tensors)))

    def step(self, tensors: Sequence[TensorMeta],
             received: dict[int, Sequence[TensorMeta] | None] | None = None) -> None:
        """The source broadcasts ``tensors``; each member receives them (or ``received[tp]``;
        None there: it never calls)."""
        self.send(tensors)
        for tp in range(1, len(self.group)):
            got = (received or {}).get(tp, tensors)
            if got is not None:
                self.recv(tp, got)


def _payload(k: int) -> list[TensorMeta]:
    return [mt("next_token_ids", (k % 3 + 1,), "int64"), mt("scores", (k % 3 + 1, 5))]


def test_a_healthy_broadcast_pairs_the_source_with_every_member() -> None:
    b = Bcast()
    for k in range(4):
        b.step(_payload(k))
    result = analysis(b.run.trace())
    assert [f for f in result.findings if f.kind.category.value == "message"] == []
    assert result.message_pairs == {}  # a broadcast is not a point-to-point pair
    assert result.broadcast_pairs == {
        bid(3, SEND, k): (bid(4, RECV, k), bid(5, RECV, k)) for k in range(4)}


def test_a_member_whose_payload_differs_is_named_with_the_source() -> None:
    b = Bcast()
    for k in range(4):
        changed = [mt("next_token_ids", (k % 3 + 1,), "int32"), mt("scores", (k % 3 + 1, 5))]
        b.step(_payload(k), {2: changed if k == 2 else None} if k == 2 else None)
    (f,) = [f for f in analysis(b.run.trace()).findings if f.kind is K.MSG_DTYPE_MISMATCH]
    assert f.channel == "pp1/tp0->pp1/tp2"
    assert f.message.startswith("broadcast of an `output` message #2 rank 3 (pp1/tp0) -> rank 5 "
                                "(pp1/tp2) (broadcast receive #2): `next_token_ids` sent int64[3], "
                                "arrived int32[3]"), f.message
    assert f.messages[:2] == (bid(3, SEND, 2), bid(5, RECV, 2))


def test_a_member_that_never_received_is_named() -> None:
    b = Bcast()
    for k in range(4):
        b.step(_payload(k), {1: None} if k == 3 else None)
    b.run.set_stats(1, 1)  # its trace goes on: final stats after the last broadcast
    found = [f for f in analysis(b.run.trace()).findings if f.kind.category.value == "message"]
    kinds = sorted((f.kind.value, f.channel) for f in found)
    # Member tp1 took 3 of 4. A collective matches calls in order, as FIFO pairs them: the
    # source's last broadcast is the one that member never received (its trace goes on).
    assert kinds == [("message-never-received", "pp1/tp0->pp1/tp1")], kinds
    assert found[0].message.startswith(
        "rank 3 (pp1/tp0) broadcast an `output` message (broadcast send #3) to its group "
        "[3, 4, 5]; "
        "rank 4 (pp1/tp1) never received it")


def test_a_member_that_waits_for_a_broadcast_is_a_hang_on_the_source() -> None:
    b = Bcast()
    for k in range(3):
        b.step(_payload(k))
    b.begin(2)  # member tp2 waits for a fourth broadcast its source never makes
    found = [f for f in analysis(b.run.trace()).findings if f.kind.category.value == "message"]
    assert [(f.kind, f.severity, f.channel) for f in found] == [
        (K.MSG_HANG, Severity.ERROR, "pp1/tp0->pp1/tp2")]
    assert found[0].message.startswith(
        "rank 5 (pp1/tp2) waits for a message from rank 3 (pp1/tp0) since its broadcast receive "
        "#3 began"), found[0].message
    assert "rank 3 last sent it an `output` message (broadcast send #2" in found[0].message
    assert found[0].messages == (bid(5, RECV, 3),)


def test_a_receive_with_no_broadcast_is_unmatched() -> None:
    b = Bcast(tp=2)
    b.step(_payload(0))
    b.recv(1, _payload(1))
    found = [f for f in analysis(b.run.trace()).findings if f.kind.category.value == "message"]
    assert [(f.kind, f.channel) for f in found] == [(K.MSG_UNMATCHED_RECV, "pp1/tp0->pp1/tp1")]
