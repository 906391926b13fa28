"""One tensor record for both layers (``pptrace.model.records.TensorMeta``).

An attach's or extract's auxiliary value and a PP message's value are one record: one
``device_type``, one ``describe``, one name to compare by, one codec per span kind that gives it
back whole. Each rule here is one on which the two records of before disagreed.
"""

from __future__ import annotations

from pptrace.analyze.payload import Field, compare, same
from pptrace.model import messages as M
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import PREFIX, TensorMeta


def test_a_message_value_is_named_by_its_key() -> None:
    v = TensorMeta.of_key("hidden_states", (4, 32), "bfloat16", "cuda", 256, sliced=True)
    assert (v.name, v.key, v.sliced, v.contiguous) == ("hidden_states", "hidden_states", True,
                                                      True)
    assert v == TensorMeta("hidden_states", "hidden_states", (4, 32), "bfloat16", "cuda", 256,
                           sliced=True)


def test_the_device_type_drops_the_index_on_either_layer() -> None:
    # A message's record kept the device text as its type: "cuda:1" stayed "cuda:1".
    aux = TensorMeta("a", PREFIX + "a", (2,), "float32", "cuda:1", 8)
    value = TensorMeta.of_key("a", (2,), "float32", "cuda:1", 8)
    assert aux.device_type == value.device_type == "cuda"
    assert TensorMeta.of_key("a", device="cuda").device_type == "cuda"
    assert TensorMeta.of_key("a", device="").device_type == ""


def test_describe_marks_a_tp_slice_whatever_the_layer() -> None:
    assert TensorMeta.of_key("x", (8, 5), "float32", "cpu", 160).describe() == "float32[8, 5]"
    assert TensorMeta.of_key("x", (8, 5), "float32", "cpu", 160,
                             sliced=True).describe() == "float32[8, 5]/tp"
    assert TensorMeta.of_key("lens", (), "list", is_tensor=False).describe() == "non-tensor list"


def test_message_values_compare_by_the_one_payload_rule() -> None:
    # The one comparison pairs values by name; a message's value is named by its key, so the
    # message layer needs no comparison of its own.
    sent = (TensorMeta.of_key("ids", (4,), "int64", "cuda", 32),
            TensorMeta.of_key("x", (4, 8), "float32", "cuda", 128))
    got = (TensorMeta.of_key("ids", (4,), "int64", "cuda", 32),
           TensorMeta.of_key("x", (4, 8), "float16", "cuda", 64))
    verdict = compare(sent, got)
    assert [(line.name, line.differs) for line in verdict.differing] == [
        ("x", frozenset({Field.DTYPE, Field.BYTES}))]
    assert not same(sent, got) and same(sent, sent)


def test_a_message_span_gives_its_values_back_as_the_one_record() -> None:
    ts = (TensorMeta.of_key("next_token_ids", (6,), "int64", "cpu", 48, sliced=True),
          TensorMeta.of_key(M.MSG_TYPE_KEY or "__msg_type__", (), "str", "", 0,
                            is_tensor=False))
    ev = MessageEvent(op=MessageOp.SEND, phase="end", seq=3, peer=0, kind="output",
                      keys=tuple(t.key for t in ts), tensors=ts)
    back = M.from_attributes(M.to_attributes(ev), M.SPAN_SEND)
    assert back == ev
    assert all(type(t) is TensorMeta and t.name == t.key for t in back.tensors)
