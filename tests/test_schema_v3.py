"""Schema version 3 (issue 25, item 3): version 2 in fewer bytes, and the very same trace.

A version 3 trace file joins its string arrays into one string each (``pptrace.model.joined``)
and leaves out a message's peer PP/TP ranks where the usual layout implies them and a receive
end's expected kind where it got that kind. Nothing is lost: each case below decodes to the
event it was, every value it carries read back field by field, whether the rule gave the value
back or the span had to carry it (an unusual layout, an unknown rank, a receive that got another
kind, a key holding the separator). Files written as version 2 and as version 3 from the same
events load to identical traces (the loader's fast paths and its ordinary path alike), a real
demo's version 2 trace re-written as version 3 loads to the same trace, a collector is shipped
the same standard spans from either, and a reader refuses a version newer than its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource, scope_version
from pptrace.load.loader import load_paths
from pptrace.model import messages as M
from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import Trace
from pptrace.ship.posters import make_poster
from pptrace.ship.shipper import Shipper
from tests.otlp_receiver import Receiver

# Rank 5 of PP=4 x TP=2: stage 2, TP rank 1 (TP innermost).
RANK = RankInfo(rank=5, world_size=8, pp_rank=2, pp_size=4, tp_rank=1, tp_size=2, host="h",
                pid=41)
MAIN = 140_310_644_915_072
V2 = schema.resource_attributes(RANK, "run", 2, "MainThread", MAIN, "cuda", "m.Out")
V3 = schema.resource_attributes(RANK, "run", 3, "MainThread", MAIN, "cuda", "m.Out")

HIDDEN = TensorMeta.of_key("hidden_states", (4, 32), "bfloat16", "cuda", 256,
                           fingerprint="b2:fb0e3c14a14c9061")
TYPE = TensorMeta.of_key(M.MSG_TYPE_KEY, (), "str", "", 0, is_tensor=False)
# A send to rank 7 (stage 3, TP rank 1): the layout implies both of the peer's ranks.
PROXY = MessageEvent(op=MessageOp.SEND, phase="end", seq=3, wall_ns=1_796_125_298_889_980_507,
                     mono_ns=11_039_236_520_768, duration_ns=542_238, thread_id=MAIN, peer=7,
                     peer_pp_rank=3, peer_tp_rank=1, kind="proxy",
                     keys=("hidden_states", M.MSG_TYPE_KEY), tensors=(HIDDEN, TYPE))
# A typed receive from rank 3 (stage 1, TP rank 1) that got what it asked for.
OUTPUT = MessageEvent(
    op=MessageOp.RECV, phase="end", seq=5, wall_ns=1_796_125_298_892_461_167, mono_ns=77,
    duration_ns=22_790_492, thread_id=MAIN, peer=3, peer_pp_rank=1, peer_tp_rank=1,
    kind="output", expected_kind="output", gather_size=2,
    keys=("next_token_ids", PREFIX + "topk", "lens", M.MSG_TYPE_KEY),
    tensors=(TensorMeta.of_key("next_token_ids", (4,), "int64", "cuda", 32, sliced=True),
             TensorMeta.of_key(PREFIX + "topk", (4, 4), "float32", "cuda", 64,
                               fingerprint="b2:43bdc14539b79684"),
             TensorMeta.of_key("lens", (), "list", "", 0, is_tensor=False), TYPE))
BEGIN = MessageEvent(op=MessageOp.RECV, phase="begin", seq=5, wall_ns=1_796_125_298_000_000_000,
                     mono_ns=70, thread_id=MAIN, peer=3, peer_pp_rank=1, peer_tp_rank=1,
                     expected_kind="output")

#: Each must keep the attribute named (its rule does not give its value back) and round-trip.
KEPT: dict[str, tuple[MessageEvent, str]] = {
    "a layout that is not the usual one": (PROXY._replace(peer_pp_rank=1), M.PEER_PP),
    "a peer TP rank that is not the usual one": (PROXY._replace(peer_tp_rank=0), M.PEER_TP),
    "an unknown peer PP rank the layout would imply": (PROXY._replace(peer_pp_rank=None),
                                                       M.PEER_PP),
    "an unknown peer TP rank the layout would imply": (PROXY._replace(peer_tp_rank=None),
                                                       M.PEER_TP),
    "a broadcast that names a peer's ranks": (OUTPUT._replace(peer=-1, group=(1, 3, 5)),
                                              M.PEER_PP),
    "a typed receive that got another kind": (OUTPUT._replace(kind="proxy", stashed=True),
                                              M.EXPECTED),
    "an untyped receive that got a kind": (OUTPUT._replace(expected_kind=""), M.EXPECTED),
    "a begin (nothing arrived yet)": (BEGIN, M.EXPECTED),
    "a failed receive": (BEGIN._replace(phase="end", duration_ns=9_000,
                                        error_type="RuntimeError",
                                        error_message="Connection closed by peer"), M.EXPECTED),
    "a send that asked for a kind": (PROXY._replace(expected_kind="proxy"), M.EXPECTED),
}
#: Each leaves out the attributes named (their rule gives them back) and round-trips.
LEFT_OUT: dict[str, tuple[MessageEvent, tuple[str, ...]]] = {
    "a send": (PROXY, (M.PEER_PP, M.PEER_TP, M.EXPECTED)),
    "a typed receive that got its kind": (OUTPUT, (M.PEER_PP, M.PEER_TP, M.EXPECTED)),
    "an untyped receive of an untyped message": (OUTPUT._replace(kind="", expected_kind=""),
                                                 (M.PEER_PP, M.PEER_TP, M.EXPECTED)),
    "a broadcast (no single peer)": (OUTPUT._replace(peer=-1, peer_pp_rank=None,
                                                     peer_tp_rank=None, group=(1, 3, 5)),
                                     (M.PEER_PP, M.PEER_TP, M.EXPECTED)),
}


def _round_trip(event: MessageEvent, resource: Any) -> tuple[dict[str, Any], MessageEvent]:
    attrs = M.to_attributes(event, resource)
    attrs = json.loads(json.dumps(attrs))  # as a file gives them back: lists, not tuples
    start, end = M.span_times(event)
    return attrs, M.from_attributes(attrs, M.span_name(event), resource, start, end)


@pytest.mark.parametrize("case", list(KEPT))
def test_what_a_rule_does_not_give_back_is_kept_and_reads_back(case: str) -> None:
    event, key = KEPT[case]
    attrs, back = _round_trip(event, V3)
    assert key in attrs
    assert back == event  # field by field (MessageEvent is a NamedTuple)
    assert _round_trip(event, V2)[1] == event


@pytest.mark.parametrize("case", list(LEFT_OUT))
def test_what_a_rule_gives_back_is_left_out_and_reads_back(case: str) -> None:
    event, keys = LEFT_OUT[case]
    attrs, back = _round_trip(event, V3)
    assert not set(keys) & set(attrs)
    assert back == event
    assert _round_trip(event, V2)[1] == event


def test_without_a_tp_size_nothing_is_implied_and_a_rank_is_written() -> None:
    bare = {k: v for k, v in V3.items() if k != schema.TP_SIZE}
    attrs, back = _round_trip(PROXY, bare)
    assert (attrs[M.PEER_PP], attrs[M.PEER_TP]) == (3, 1) and back == PROXY
    unknown = PROXY._replace(peer_pp_rank=None, peer_tp_rank=None)
    attrs, back = _round_trip(unknown, bare)
    assert M.PEER_PP not in attrs and back == unknown


def test_string_arrays_are_joined_where_the_list_comes_back_and_kept_elsewhere() -> None:
    attrs, back = _round_trip(OUTPUT, V3)
    assert attrs[M.KEYS] == f"next_token_ids {PREFIX}topk lens {M.MSG_TYPE_KEY}"
    assert attrs[M.T_SHAPES] == "4 4,4  "  # a 0-d tensor's and a non-tensor's shape: ""
    assert attrs[M.T_FINGERPRINTS] == " b2:43bdc14539b79684  "
    spaced = OUTPUT._replace(keys=("a key", *OUTPUT.keys[1:]), tensors=(
        OUTPUT.tensors[0]._replace(key="a key", name="a key"), *OUTPUT.tensors[1:]))
    attrs, back = _round_trip(spaced, V3)
    assert attrs[M.KEYS] == ["a key", *OUTPUT.keys[1:]] and back == spaced
    assert attrs[M.T_DTYPES] == "int64 float32 list str"
    # An empty list stays an array: "" would come back as [""].
    empty = PROXY._replace(keys=(), tensors=())
    attrs, back = _round_trip(empty, V3)
    assert attrs[M.KEYS] == [] and back == empty


@pytest.mark.parametrize("stats", [
    RecorderStats(rank=RANK, time_ns=9, run_id="run"),
    RecorderStats(rank=RANK, time_ns=9, recorded=5, exported=3, dropped=2, overwritten=1,
                  internal_errors=1, export_errors=4, mode="flight", run_id="run", final=True,
                  messages_recorded=7, messages_exported=7, sink_dropped=(("otlp", 2),)),
])
def test_a_stats_span_leaves_out_the_readers_defaults_and_reads_back(
        stats: RecorderStats) -> None:
    attrs = schema.stats_to_attributes(stats, V3)
    defaults = {schema.S_RECORDED, schema.S_EXPORTED, schema.S_DROPPED, schema.S_OVERWRITTEN,
                schema.S_INTERNAL, schema.S_EXPORT_ERRORS, schema.S_MODE, schema.S_FINAL,
                schema.S_MSG_DROPPED}
    if stats.recorded:  # only what differs from a default is written
        assert not {schema.S_MSG_DROPPED} & set(attrs)
        assert attrs[schema.S_FINAL] is True and attrs[schema.S_DROPPED] == 2
    else:
        assert not defaults & set(attrs)
    assert schema.attributes_to_stats(attrs, resource=V3) == stats
    assert schema.attributes_to_stats(schema.stats_to_attributes(stats, V2), resource=V2) == stats


def _event(seq: int, **changes: Any) -> Event:
    topk = TensorMeta(name="topk", key=PREFIX + "topk", shape=(4, 4), dtype="float32",
                      device="cuda", nbytes=64, fingerprint=f"b2:{seq:016x}")
    ev = Event(direction=Direction.ATTACH, seq=seq, rank=RANK, start_ns=1_000 + seq,
               mono_ns=5 + seq, duration_ns=700, thread_id=MAIN, thread_name="MainThread",
               subject_type="m.Out", subject_pp_capable=True,
               tensors=(topk, topk._replace(name="ids", key=PREFIX + "ids", dtype="int64",
                                            nbytes=128, fingerprint=None)),
               keys_before=("next_token_ids", "lens"),
               keys_after=("next_token_ids", "lens", PREFIX + "topk", PREFIX + "ids"),
               run_id="run")
    return ev._replace(**changes)


EVENTS = [
    *(_event(i) for i in range(4)),  # one shape, four times: the fast path's templates
    _event(4, tensors=(_event(0).tensors[0]._replace(key="a key", name="a key"),),
           keys_after=("next_token_ids", "lens", "a key")),
    _event(5, error_type="RuntimeError", error_message="duplicate auxiliary PP tensor 'topk'",
           keys_after=("next_token_ids", "lens", PREFIX + "topk"),
           inserted_before_error=(PREFIX + "topk",)),
    _event(0, direction=Direction.EXTRACT, keys_before=("next_token_ids", PREFIX + "topk",
                                                        PREFIX + "ids", "lens"),
           keys_after=("next_token_ids", "lens"), returned_none=False),
]
# A receive's begin and end (one span in the file), a shape four times, then every case above
# (numbered apart: a loader keeps one event per op, seq, phase and group).
MESSAGES = [BEGIN, OUTPUT, *(PROXY._replace(seq=s, wall_ns=PROXY.wall_ns + s, tensors=(
    HIDDEN._replace(fingerprint=f"b2:{s:016x}"), TYPE)) for s in range(6, 10)), *(
        e._replace(seq=10 + i) for i, e in enumerate(
            [*(e for e, _ in KEPT.values()), *(e for e, _ in LEFT_OUT.values())]))]
STATS = RecorderStats(rank=RANK, time_ns=9_000, recorded=7, exported=7, run_id="run",
                      messages_recorded=len(MESSAGES), messages_exported=len(MESSAGES),
                      final=True)


def _write(directory: Path, version: int, compress: str = "") -> Path:
    directory.mkdir()
    path = directory / "pptrace-rank5-pid41.otlp.jsonl"
    if compress:
        from pptrace.export.segments import TraceSegments

        out: Any = TraceSegments(str(path), "gzip")  # (which names it .gz)
    else:
        out = str(path)
    sink = FileSink(out, process_resource(RANK, "run", version), scope_version())
    for k in (0, 100):  # twice: a second line of known shapes (the loaders' templates)
        sink.export([e._replace(seq=e.seq + k) for e in EVENTS])
        sink.export_messages([m._replace(seq=m.seq + k) for m in MESSAGES], RANK, "run")
    sink.export_stats(STATS)
    sink.shutdown(1.0)
    return path


def _same(a: Trace, b: Trace) -> None:
    """Field by field: every process's rank, events, messages and stats."""
    assert [p.rank for p in a.processes] == [p.rank for p in b.processes]
    for pa, pb in zip(a.processes, b.processes, strict=True):
        assert pa.events == pb.events
        assert pa.messages == pb.messages
        assert pa.stats == pb.stats
    assert not a.problems and not b.problems


@pytest.mark.parametrize("compress", ["", ".gz"])
def test_a_version_3_file_loads_to_the_trace_its_version_2_file_gives(tmp_path: Path,
                                                                      compress: str) -> None:
    v2 = _write(tmp_path / "v2", 2, compress)
    v3 = _write(tmp_path / "v3", 3, compress)
    two, three = load_paths([str(v2.parent)]), load_paths([str(v3.parent)])
    _same(two, three)
    (proc,) = three.processes
    assert len(proc.events) == 2 * len(EVENTS)
    assert set(proc.messages) == {m._replace(seq=m.seq + k) for m in MESSAGES for k in (0, 100)}
    if not compress:  # the same events, in fewer bytes
        text = v3.read_text()
        assert '"pptrace.msg.peer.pp_rank"' not in text.splitlines()[1].split('"name"')[1]
        assert v3.stat().st_size < 0.8 * v2.stat().st_size


def test_each_reader_of_a_version_3_file_gives_the_same_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast paths (a template per shape), the ordinary path (one JSON document a file,
    walked span by span) and a parallel loader worker."""
    from pptrace.load import worker as load_worker

    path = _write(tmp_path / "v3", 3)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    fast = load_paths([str(path)])
    whole = tmp_path / "whole"
    whole.mkdir()
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    one = {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}
    (whole / "trace.json").write_text(json.dumps(one, indent=1))
    _same(fast, load_paths([str(whole)]))
    # Two files (the worker takes one of them): the same process read twice, kept once.
    (tmp_path / "v3" / "pptrace-rank5-pid41-copy.otlp.jsonl").write_bytes(path.read_bytes())
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS")
    started: list[Any] = []
    real = load_worker.Worker.__init__
    monkeypatch.setattr(load_worker.Worker, "__init__",
                        lambda self, files: started.append(files) or real(self, files))
    parallel = load_paths([str(tmp_path / "v3")])
    assert started
    for a, b in zip(fast.processes, parallel.processes, strict=True):
        assert (a.rank, a.events, a.messages, a.stats) == (b.rank, b.events, b.messages, b.stats)


def test_the_fast_paths_decode_a_version_3_file_no_more_often_than_version_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fingerprints differ from call to call: cut out of a joined string as out of an array,
    spans of one shape share one template (one decode) in both versions."""
    decodes: list[str] = []
    real_event, real_message = schema.attributes_to_event, M.from_attributes
    monkeypatch.setattr(schema, "attributes_to_event",
                        lambda *a, **k: decodes.append("event") or real_event(*a, **k))
    monkeypatch.setattr(M, "from_attributes",
                        lambda *a, **k: decodes.append("message") or real_message(*a, **k))
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    counts = []
    for version in (2, 3):
        decodes.clear()
        load_paths([str(_write(tmp_path / f"v{version}", version))])
        counts.append((decodes.count("event"), decodes.count("message")))
    spans = 2 * (len(EVENTS) + len(MESSAGES) - 1)  # (a begin and its end: one span)
    assert counts[0] == counts[1] and sum(counts[1]) < spans - 10


def test_a_reader_refuses_a_newer_version_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "v3", 3)
    newer = tmp_path / "v4" / path.name
    newer.parent.mkdir()
    newer.write_text(path.read_text().replace(
        '"pptrace.schema_version","value":{"intValue":"3"}',
        '"pptrace.schema_version","value":{"intValue":"4"}'))
    with pytest.raises(SchemaVersionError) as info:
        load_paths([str(newer)])
    message = str(info.value)
    assert message == (f"{newer}:1: pptrace schema version 4 is not supported (this pptrace "
                       "reads versions 1 to 3; upgrade pptrace)")


def _shipped(directory: Path, protocol: str) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    with Receiver(protocol) as rx:
        poster = make_poster({"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
                              "OTEL_EXPORTER_OTLP_PROTOCOL": rx.env_protocol})
        state = Shipper(str(directory), poster, drain=30.0, linger=0.0, poll=0.01,
                        alive=lambda pid: False).run()
        assert state.totals()["events_lost"] == 0
        return rx.spans()


@pytest.mark.parametrize("protocol", ["json", "http", "grpc"])
def test_the_shipper_sends_the_standard_spans_of_a_version_3_file(tmp_path: Path,
                                                                  protocol: str) -> None:
    """What a collector gets from a version 3 file is what it gets from a version 2 file of the
    same events: version 1 spans, every standard attribute name, arrays as arrays, the peer's
    ranks and the expected kind the file left out put back."""
    _write(tmp_path / "v2", 2)
    v3 = _write(tmp_path / "v3", 3)
    from_v2, from_v3 = _shipped(tmp_path / "v2", protocol), _shipped(tmp_path / "v3", protocol)
    assert from_v3 == from_v2
    sends = [attrs for _, attrs, name in from_v3 if name == M.SPAN_SEND
             and attrs[M.SEQ] % 100 in range(6, 10)]  # the shape written four times
    assert len(sends) == 8 and all(
        (a[M.PEER_PP], a[M.PEER_TP], a[M.KEYS], a[M.T_DTYPES], a[schema.VERSION])
        == (3, 1, ["hidden_states", M.MSG_TYPE_KEY], ["bfloat16", "str"], 1) for a in sends)
    receives = [attrs for _, attrs, name in from_v3 if name == M.SPAN_RECV
                and attrs[M.SEQ] % 100 == OUTPUT.seq]
    assert len(receives) == 2 and all(a[M.EXPECTED] == "output" for a in receives)
    attaches = [attrs for _, attrs, name in from_v3 if name == schema.SPAN_ATTACH]
    assert len(attaches) == 2 * (len(EVENTS) - 1)
    assert all(isinstance(a[schema.T_NAMES], list) for a in attaches)
    text = v3.read_text()  # ... where the file had none of them
    assert f'"{M.PEER_PP}","value":{{"intValue":"3"}}' not in text
    assert '"stringValue":"hidden_states __msg_type__"' in text


# --- a real demo ------------------------------------------------------------------------------

def _demo(out: Path, schema_version: str) -> Trace:
    env = {**os.environ, "PPTRACE_SCHEMA": schema_version}
    subprocess.run([sys.executable, "-m", "pptrace", "demo", "--steps", "6", "--out", str(out),
                    "--no-analyze", "--no-view"], env=env, check=True, timeout=240,
                   stdout=subprocess.DEVNULL)
    return load_paths([str(out)])


def _rewrite(trace: Trace, directory: Path, version: int) -> Trace:
    """Every process of ``trace`` written again as ``version``, by the one encoder."""
    directory.mkdir()
    for proc in trace.processes:
        path = directory / f"pptrace-rank{proc.rank.rank}-pid{proc.rank.pid}.otlp.jsonl"
        assert proc.stats is not None
        run_id = proc.stats.run_id
        sink = FileSink(str(path), process_resource(proc.rank, run_id, version), scope_version())
        sink.export(list(proc.events))
        sink.export_messages(list(proc.messages), proc.rank, run_id)
        if proc.stats is not None:
            sink.export_stats(proc.stats)
        sink.shutdown(1.0)
    return load_paths([str(directory)])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_demo_reads_the_same_in_version_3(tmp_path: Path) -> None:
    """A real demo's version 2 trace, written again as version 3, is the same trace field by
    field; a demo written as version 3 by the real recorder reads as a whole trace too."""
    two = _demo(tmp_path / "v2", "2")
    assert {p.rank.rank for p in two.processes} == {0, 1, 2, 3}
    assert all(p.messages for p in two.processes) and sum(len(p.events)
                                                          for p in two.processes) == 12
    _same(two, _rewrite(two, tmp_path / "v3", 3))
    three = _demo(tmp_path / "v3-real", "3")
    texts = [p.read_text() for p in (tmp_path / "v3-real").iterdir()]
    assert all('"pptrace.schema_version","value":{"intValue":"3"}' in t for t in texts)
    _same(three, _rewrite(three, tmp_path / "v2-again", 2))
    for trace in (two, three):  # every call, once
        sends = sum(m.op is MessageOp.SEND for p in trace.processes for m in p.messages)
        ends = sum(m.op is MessageOp.RECV and m.phase == "end"
                   for p in trace.processes for m in p.messages)
        assert sends == ends > 0
