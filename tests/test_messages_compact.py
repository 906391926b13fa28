"""Message spans in a trace file (schema version 2) leave out what their name, times and resource
say and what follows from the rest, and read back to the very events a version 1 file gives.

What version 2 may leave out is decided per value: a value is left out only when the reader's rule
gives it back, so each case below that breaks a rule (a tensor off the main device, a dtype of no
known size, a non-tensor whose type is named like a dtype, an end that lasted -1 ns) must keep that
one attribute and still round-trip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource
from pptrace.load.loader import load_paths
from pptrace.model import messages as M
from pptrace.model.messages import BadMessageSpan, MessageEvent, MessageOp
from pptrace.model.records import PREFIX, RankInfo, TensorMeta

RANK = RankInfo(rank=1, world_size=4, pp_rank=1, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=41)
MAIN = 140_310_644_915_072
RES = {"pptrace.schema_version": 2, "pptrace.thread.main_id": MAIN,
       "pptrace.tensor.main_device": "cuda"}

HIDDEN = TensorMeta.of_key("hidden_states", (4, 32), "bfloat16", "cuda", 256)
TYPE = TensorMeta.of_key(M.MSG_TYPE_KEY, (), "str", "", 0, is_tensor=False)
PROXY = MessageEvent(op=MessageOp.SEND, phase="end", seq=3, wall_ns=1_796_125_298_889_980_507,
                     mono_ns=11_039_236_520_768, duration_ns=542_238, thread_id=MAIN, peer=2,
                     peer_pp_rank=2, peer_tp_rank=0, kind="proxy",
                     keys=("hidden_states", M.MSG_TYPE_KEY), tensors=(HIDDEN, TYPE))
OUTPUT = MessageEvent(
    op=MessageOp.RECV, phase="end", seq=5, wall_ns=1_796_125_298_892_461_167, mono_ns=77,
    duration_ns=22_790_492, thread_id=MAIN, peer=3, kind="output", expected_kind="output",
    gather_size=2, carries_attach=None,
    keys=("next_token_ids", PREFIX + "topk", "lens", M.MSG_TYPE_KEY),
    tensors=(TensorMeta.of_key("next_token_ids", (4,), "int64", "cuda", 32, sliced=True),
             TensorMeta.of_key(PREFIX + "topk", (4, 4), "float32", "cuda", 64,
                           fingerprint="b2:43bdc14539b79684"),
             TensorMeta.of_key("lens", (), "list", "", 0, is_tensor=False), TYPE))
BEGIN = MessageEvent(op=MessageOp.RECV, phase="begin", seq=5, wall_ns=1_796_125_298_000_000_000,
                     mono_ns=70, thread_id=MAIN, peer=3, expected_kind="output")
FAILED = BEGIN._replace(phase="end", duration_ns=9_000, error_type="RuntimeError",
                        error_message="Connection closed by peer")

#: Each breaks one rule, and must keep the one attribute that rule would have given back.
BREAKS: dict[str, tuple[MessageEvent, str]] = {
    "off the main device": (PROXY._replace(tensors=(HIDDEN._replace(device="cpu"), TYPE)),
                            M.T_DEVICES),
    "a dtype of no known size": (PROXY._replace(tensors=(
        HIDDEN._replace(dtype="float4_e2m1", nbytes=64), TYPE)), M.T_NBYTES),
    "bytes that are not elements times size": (PROXY._replace(tensors=(
        HIDDEN._replace(nbytes=999), TYPE)), M.T_NBYTES),
    "a non-tensor named like a dtype": (PROXY._replace(tensors=(
        HIDDEN, TYPE._replace(dtype="int64"))), M.T_IS_TENSOR),
    "values not described": (PROXY._replace(tensors=()), M.T_KEYS),
    "values described out of order": (PROXY._replace(tensors=(TYPE, HIDDEN)), M.T_KEYS),
    "another thread": (PROXY._replace(thread_id=7), M.THREAD_ID),
    "an end of -1 ns": (PROXY._replace(duration_ns=-1), M.DURATION_NS),
    "a begin that has a duration": (BEGIN._replace(duration_ns=12), M.DURATION_NS),
    "a slice": (PROXY._replace(tensors=(HIDDEN._replace(sliced=True), TYPE)), M.T_SLICED),
}


def _round_trip(event: MessageEvent, resource: Any) -> tuple[dict[str, Any], MessageEvent]:
    attrs = M.to_attributes(event, resource)
    start, end = M.span_times(event)
    return attrs, M.from_attributes(attrs, M.span_name(event), resource, start, end)


BROADCAST = OUTPUT._replace(peer=-1, peer_pp_rank=None, peer_tp_rank=None, carries_attach=None,
                            gather_size=1, group=(4, 5, 6))


@pytest.mark.parametrize("event", [PROXY, OUTPUT, BEGIN, FAILED, BROADCAST,
                                   BEGIN._replace(group=(2, 3)),
                                   *(e for e, _ in BREAKS.values())])
@pytest.mark.parametrize("resource", [None, RES, {"pptrace.schema_version": 2},
                                      {"pptrace.schema_version": 1, **RES}],
                         ids=["v1", "v2", "v2-bare", "v1-resource"])
def test_every_event_reads_back_from_its_span(event: MessageEvent, resource: Any) -> None:
    attrs, back = _round_trip(event, resource)
    assert back == event
    compact = resource is not None and resource["pptrace.schema_version"] == 2
    assert (M.OP in attrs) is not compact and (M.WALL_NS in attrs) is not compact


def test_version_2_leaves_out_what_it_can_give_back() -> None:
    whole, _ = _round_trip(OUTPUT, None)
    compact, _ = _round_trip(OUTPUT, RES)
    assert set(whole) - set(compact) == {M.OP, M.PHASE, M.WALL_NS, M.DURATION_NS, M.THREAD_ID,
                                         M.T_KEYS, M.T_DEVICES, M.T_NBYTES, M.T_IS_TENSOR}
    assert M.T_SLICED in compact  # one value travelled as a slice
    assert len(json.dumps(compact)) < 0.6 * len(json.dumps(whole))


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_value_its_rule_cannot_give_back_is_written(case: str) -> None:
    event, kept = BREAKS[case]
    attrs, back = _round_trip(event, RES)
    assert kept in attrs and back == event


def test_a_compact_span_without_its_resource_is_refused_by_name() -> None:
    attrs = M.to_attributes(PROXY, RES)
    start, end = M.span_times(PROXY)
    with pytest.raises(BadMessageSpan, match=r"pptrace\.msg\.tensor\.devices: missing, and the "
                                             r"resource has no string 'pptrace\.tensor\.main"):
        M.from_attributes(attrs, M.SPAN_SEND, {"pptrace.schema_version": 2}, start, end)


def _write(path: Path, version: int, events: list[MessageEvent]) -> list[dict[str, Any]]:
    sink = FileSink(str(path), process_resource(RANK, "run1", version))
    sink.export_messages(events, RANK, "run1")
    sink.shutdown(1.0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [rs for line in lines for rs in line["resourceSpans"]]


def test_a_file_of_only_messages_learns_the_main_thread_and_device(tmp_path: Path) -> None:
    """A middle stage never attaches or extracts: its messages give the resource its main
    thread's id and device, and every message of either version loads to the same events."""
    events = [BEGIN, OUTPUT, PROXY, PROXY._replace(seq=4, mono_ns=99),
              FAILED._replace(seq=6, mono_ns=120)]
    loaded = {}
    for version in (1, 2):
        path = tmp_path / f"pptrace-rank1-pid41-v{version}.otlp.jsonl"
        (block,) = _write(path, version, events)
        res = {a["key"]: a["value"] for a in block["resource"]["attributes"]}
        spans = block["scopeSpans"][0]["spans"]
        keys = {a["key"] for span in spans for a in span["attributes"]}
        if version == 2:
            assert res["pptrace.thread.main_id"] == {"intValue": str(MAIN)}
            assert res["pptrace.tensor.main_device"] == {"stringValue": "cuda"}
            assert "pptrace.thread.main_name" not in res  # a message has no thread name
            assert not keys & {M.OP, M.WALL_NS, M.THREAD_ID, M.T_DEVICES, M.T_NBYTES}
        else:
            assert {M.OP, M.WALL_NS, M.THREAD_ID, M.T_DEVICES, M.T_NBYTES} <= keys
        trace = load_paths([str(path)])
        assert not trace.problems
        (proc,) = trace.processes
        loaded[version] = proc.messages
    assert loaded[1] == loaded[2]
    assert sorted(loaded[2], key=lambda e: (e.op.value, e.seq, e.phase)) == sorted(
        events, key=lambda e: (e.op.value, e.seq, e.phase))
