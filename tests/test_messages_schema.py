"""The message layer's span codec: records to attributes and back, and bad spans refused by name."""

from __future__ import annotations

import pytest

from pptrace.model import messages as M
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta

OUTPUT = MessageEvent(
    op=MessageOp.SEND, phase="end", seq=7, wall_ns=1_700_000_000_000_000_000, mono_ns=123,
    duration_ns=4567, thread_id=99, peer=0, peer_pp_rank=0, peer_tp_rank=1, kind="output",
    gather_size=2, carries_attach=7,
    keys=("next_token_ids", "__sampling_observer_output__.entropy", "__msg_type__"),
    tensors=(TensorMeta.of_key("next_token_ids", (6,), "int64", "cpu", 48, sliced=True),
             TensorMeta.of_key("__sampling_observer_output__.entropy", (6,), "float32", "cpu", 24,
                           sliced=True, fingerprint="b2:00ff"),
             TensorMeta.of_key("__msg_type__", (), "str", "", 0, is_tensor=False)),
)
WAITING = MessageEvent(op=MessageOp.RECV, phase="begin", seq=3, peer=6, expected_kind="output")
FAILED = MessageEvent(op=MessageOp.RECV, phase="end", seq=3, peer=6, kind="proxy",
                      expected_kind="output", stashed=True, error_type="RuntimeError",
                      error_message="Connection closed by peer")
#: A broadcast: the source's send to its whole group, a member's receive from the source.
BROADCAST = OUTPUT._replace(peer=-1, peer_pp_rank=None, peer_tp_rank=None, gather_size=1,
                            carries_attach=None, group=(6, 7))
BROADCAST_RECV = MessageEvent(op=MessageOp.RECV, phase="end", seq=4, duration_ns=80, peer=6,
                              kind="output", keys=OUTPUT.keys, tensors=OUTPUT.tensors,
                              group=(6, 7))


@pytest.mark.parametrize("event", [OUTPUT, WAITING, FAILED, MessageEvent(MessageOp.SEND, "end", 0),
                                   BROADCAST, BROADCAST_RECV, BROADCAST_RECV._replace(
                                       phase="begin", duration_ns=-1, kind="", keys=(),
                                       tensors=())],
                         ids=["output", "waiting", "failed", "bare", "broadcast",
                              "broadcast-recv", "broadcast-begin"])
def test_every_message_event_survives_its_span(event: MessageEvent) -> None:
    name = M.span_name(event)
    assert M.from_attributes(M.to_attributes(event), name) == event


def test_a_broadcast_carries_its_group_and_a_point_to_point_call_none() -> None:
    assert M.to_attributes(BROADCAST)[M.GROUP] == [6, 7] and BROADCAST.broadcast
    assert M.GROUP not in M.to_attributes(OUTPUT) and not OUTPUT.broadcast
    # A span written before broadcasts were recorded has no group: point-to-point.
    old = {k: v for k, v in M.to_attributes(OUTPUT).items() if k != M.GROUP}
    assert M.from_attributes(old, "pptrace.send").group == ()


def test_span_names_say_what_the_call_was() -> None:
    assert [M.span_name(e) for e in (OUTPUT, WAITING, FAILED)] == [
        "pptrace.send", "pptrace.recv.begin", "pptrace.recv"]


def test_a_slice_is_described_as_one() -> None:
    assert OUTPUT.tensors[0].describe() == "int64[6]/tp"
    assert OUTPUT.tensors[2].describe() == "non-tensor str"
    assert OUTPUT.total_bytes == 72


@pytest.mark.parametrize(("change", "message"), [
    ({M.OP: "push"}, "pptrace.msg.op: 'push' is not send or recv"),
    ({M.PHASE: "begin"}, "pptrace.msg.phase: 'begin' does not fit the span pptrace.send"),
    ({M.SEQ: "7"}, "pptrace.msg.seq: expected an integer"),
    ({M.T_NBYTES: [48, 24]}, "pptrace.msg.tensor.nbytes: expected 3 integers"),
    ({M.T_SLICED: [1, 1, 0]}, "pptrace.msg.tensor.sliced: expected 3 booleans"),
    ({M.T_SHAPES: ["6", "x", ""]}, "pptrace.msg.tensor.shapes: 'x' is not a shape"),
    ({M.GROUP: [6, "7"]}, "pptrace.msg.group: expected a list of global ranks"),
    ({M.GROUP: 6}, "pptrace.msg.group: expected a list of global ranks"),
])
def test_a_bad_span_is_refused_naming_the_attribute(change: dict[str, object],
                                                   message: str) -> None:
    attrs = {**M.to_attributes(OUTPUT), **change}
    with pytest.raises(M.BadMessageSpan, match=message.replace("(", r"\(").replace("[", r"\[")):
        M.from_attributes(attrs, "pptrace.send")
