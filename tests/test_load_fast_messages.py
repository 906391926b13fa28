"""The message layer's fast path (``pptrace.load.fast_messages``) keeps what makes it fast.

A trace file of many message spans of a few shapes, written by the real ``FileSink`` in both
schema versions, loads to exactly the events written, decoding each distinct shape a bounded
number of times (never once a span); the loader worker's result carries them as shapes and rows
and gives back the same events; a span that breaks its shape is still read exactly.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource
from pptrace.load import messages as load_messages
from pptrace.load import worker
from pptrace.load.loader import load_paths
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import RankInfo, TensorMeta

RANK = RankInfo(rank=1, world_size=4, pp_rank=1, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=41)


def _events(n: int, fingerprints: bool = False) -> list[MessageEvent]:
    """``n`` calls of 3 shapes per op (batch sizes cycle): a receive is a begin and an end;
    ``fingerprints``: each call's tensors with a content fingerprint of their own."""
    out: list[MessageEvent] = []
    seq = {MessageOp.SEND: 0, MessageOp.RECV: 0}
    for i in range(n):
        batch = (1, 4, 8)[i % 3]
        ts = (TensorMeta.of_key("hidden_states", (batch, 64), "bfloat16", "cuda", batch * 128,
                                fingerprint=f"b2:{i:016x}" if fingerprints else None),
              TensorMeta.of_key("__msg_type__", (), "str", "", 0, is_tensor=False))
        op = MessageOp.RECV if i % 2 else MessageOp.SEND
        common = dict(op=op, seq=seq[op], wall_ns=1_700_000_000_000_000_000 + i * 1000,
                      mono_ns=5_000 + i * 1000, thread_id=7, peer=0 if op is MessageOp.RECV
                      else 2, kind="proxy", keys=("hidden_states", "__msg_type__"), tensors=ts)
        seq[op] += 1
        if op is MessageOp.RECV:
            out.append(MessageEvent(phase="begin", duration_ns=-1, **common))  # type: ignore[arg-type]
        out.append(MessageEvent(phase="end", duration_ns=300 + i, **common))  # type: ignore[arg-type]
    return out


def _write(path: Path, version: int, events: list[MessageEvent]) -> None:
    sink = FileSink(str(path), process_resource(RANK, "run1", version))
    for i in range(0, len(events), 50):
        sink.export_messages(events[i:i + 50], RANK, "run1")
    sink.shutdown(1.0)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("fingerprints", [False, True])
def test_each_message_shape_is_decoded_a_bounded_number_of_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int,
        fingerprints: bool) -> None:
    # With fingerprints each call's text differs in them: they are cut out like the numbers,
    # or every span would be a shape of its own (parsed the slow way, each one).
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")  # in this process, where it is counted
    events = _events(600, fingerprints)
    path = tmp_path / f"pptrace-rank1-pid41-v{version}.otlp.jsonl"
    _write(path, version, events)
    decodes = 0
    real = load_messages.decode_span

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal decodes
        decodes += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(load_messages, "decode_span", counting)
    trace = load_paths([str(path)])
    (proc,) = trace.processes
    assert not trace.problems
    assert proc.messages == load_messages.in_call_order(events)
    # 9 shapes (send; receive begin; receive end; 3 batch sizes each): each read twice at most
    # (learned, then read the ordinary way once), against 900 spans.
    assert 9 <= decodes <= 18
    if not fingerprints:
        # The loaded events share their keys and tensors: a few tuples, not one each.
        assert len({id(m.tensors) for m in proc.messages}) <= 18  # (a learned span: its own)


@pytest.mark.parametrize("fingerprints", [False, True])
def test_the_worker_carries_messages_as_shapes_and_rows(fingerprints: bool) -> None:
    events = _events(90, fingerprints)
    packed = load_messages.pack(events)
    shapes, rows, prints = packed
    # Fingerprints travel beside the rows, not in the shapes: 9 shapes either way.
    assert len(shapes) == 9 and len(rows) == 5 * len(events) and len(prints) == len(events)
    assert load_messages.unpack(packed) == events


@pytest.mark.parametrize("fingerprints", [False, True])
def test_a_worker_loaded_trace_equals_the_one_read_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fingerprints: bool) -> None:
    """Two files, the second read by the loader worker (its size threshold lowered)."""
    events = _events(300, fingerprints)
    _write(tmp_path / "pptrace-rank1-pid41.otlp.jsonl", 2, events)
    other = RankInfo(rank=2, world_size=4, pp_rank=2, pp_size=4, tp_rank=0, tp_size=1,
                     host="h", pid=42)
    sink = FileSink(str(tmp_path / "pptrace-rank2-pid42.otlp.jsonl"),
                    process_resource(other, "run1", 2))
    sink.export_messages(events, other, "run1")
    sink.shutdown(1.0)
    monkeypatch.setattr(worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    files = sorted(str(f) for f in tmp_path.iterdir())
    assert worker.split_files(files, {f: Path(f).stat().st_size for f in files}) == 1
    parallel = load_paths([str(tmp_path)])
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    serial = load_paths([str(tmp_path)])
    assert [p.messages for p in parallel.processes] == [p.messages for p in serial.processes]
    assert [p.messages for p in serial.processes] == [load_messages.in_call_order(events)] * 2


@pytest.mark.parametrize("fingerprints", [False, True])
def test_the_worker_sends_cached_message_spans_as_int64_rows(tmp_path: Path,
                                                            fingerprints: bool) -> None:
    """As attach/extract spans: a cached shape's span is 5 int64s, not a packed JSON event."""
    import json

    from pptrace.load.builder import TraceBuilder
    from pptrace.load.files import read_files

    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    _write(path, 2, _events(300, fingerprints))
    builder = TraceBuilder()
    builder.fast.rows = array("q")
    builder.fast.messages.rows = array("q")
    assert read_files([str(path)], {str(path): path.stat().st_size}, builder, None) == []
    data, rows = worker._encode(builder, [], None)
    result = json.loads(data)
    as_json = sum(len(ms[-1][1]) // 5 for ms in result["messages"])  # the packed rows
    as_rows = len(rows) // 8 // 5 - result["message_rows_at"]
    assert as_json <= 18 and as_rows >= 400  # 450 spans: those that taught a shape as JSON
    assert len(result["message_prints"]) == (as_rows if fingerprints else 0)


def test_a_process_is_found_once_per_shape_not_once_per_span(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path's shapes of one process share one rank object, so the builder finds the
    process by identity; the worker's rows find theirs once per shape, not per row."""
    import json

    from pptrace.load.builder import TraceBuilder
    from pptrace.load.files import read_files

    events = _events(300)
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    _write(path, 2, events)
    interned = 0
    real_intern = TraceBuilder.intern_rank

    def intern(self: TraceBuilder, rank: RankInfo) -> RankInfo:
        nonlocal interned
        interned += 1
        return real_intern(self, rank)

    monkeypatch.setattr(TraceBuilder, "intern_rank", intern)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    (proc,) = load_paths([str(path)]).processes
    assert proc.messages == load_messages.in_call_order(events)
    assert interned <= 20  # 9 shapes (their spans read the ordinary way) against 450 spans
    builder = TraceBuilder()  # the worker's side: rows
    builder.fast.rows = array("q")
    builder.fast.messages.rows = array("q")
    assert read_files([str(path)], {str(path): path.stat().st_size}, builder, None) == []
    data, rows = worker._encode(builder, [], None)
    hashed = 0
    real_hash = RankInfo.__hash__

    def hash_rank(self: RankInfo) -> int:
        nonlocal hashed
        hashed += 1
        return real_hash(self)

    monkeypatch.setattr(RankInfo, "__hash__", hash_rank)
    here = TraceBuilder()
    assert worker.take(here, json.loads(data), rows) == ([], None)
    assert hashed <= 30  # about 430 rows
    monkeypatch.undo()
    (proc,) = here.build([str(path)]).processes
    assert proc.messages == load_messages.in_call_order(events)


def test_a_span_that_breaks_its_shape_is_read_exactly(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A span of a cached shape whose duration its times cannot give back writes the duration
    (a new shape): it must load as written, not as the template's rule would rebuild it."""
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    events = _events(30)
    odd = events[-1]._replace(seq=99, duration_ns=-1, mono_ns=10**9)  # an end with no duration
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    _write(path, 2, [*events, odd])
    (proc,) = load_paths([str(path)]).processes
    assert proc.messages[-1] == odd


def test_call_order_is_the_one_its_docstring_defines() -> None:
    """(mono_ns, send before receive, seq, begin before end), the first of a duplicate kept:
    the C-speed sorts against that definition written out, on random events with ties."""
    import random

    def reference(events: list[MessageEvent]) -> tuple[MessageEvent, ...]:
        seen: set[tuple[str, int, str]] = set()
        out = []
        for ev in sorted(events, key=lambda e: (e.mono_ns, e.op is MessageOp.RECV, e.seq,
                                                 e.phase == "end")):
            if (ev.op.value, ev.seq, ev.phase) not in seen:
                seen.add((ev.op.value, ev.seq, ev.phase))
                out.append(ev)
        return tuple(out)

    rnd = random.Random(5)
    for _ in range(300):
        events = [MessageEvent(op=rnd.choice(list(MessageOp)), phase=rnd.choice(["begin", "end"]),
                               seq=rnd.randrange(6), mono_ns=rnd.randrange(5),
                               peer=rnd.randrange(3)) for _ in range(rnd.randrange(30))]
        assert load_messages.in_call_order(events) == reference(events)


@pytest.mark.parametrize("version", [1, 2])
def test_broadcasts_load_exactly_beside_point_to_point_messages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Broadcast spans (a group on each) among ordinary ones, through the fast path and the
    loader worker alike: every event as written, its group included; the worker's result too."""
    events = _events(120)
    # Every third event becomes a broadcast of the group (1, 2, 3): a source's send or a
    # member's receive from rank 2, with the shape's other values unchanged.
    events = [e._replace(group=(1, 2, 3), peer=-1 if e.op is MessageOp.SEND else 2)
              if i % 3 == 0 else e for i, e in enumerate(events)]
    path = tmp_path / f"pptrace-rank1-pid41-v{version}.otlp.jsonl"
    _write(path, version, events)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    (proc,) = load_paths([str(path)]).processes
    assert proc.messages == load_messages.in_call_order(events)
    assert sum(1 for m in proc.messages if m.group == (1, 2, 3)) == len(events) // 3 == 60
    assert load_messages.unpack(load_messages.pack(events)) == events
    monkeypatch.setattr(worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    (parallel,) = load_paths([str(path)]).processes
    assert parallel.messages == proc.messages


@pytest.mark.parametrize("workers", [False, True])
def test_a_send_and_its_receive_hold_one_fingerprinted_tensors_tuple(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: bool) -> None:
    """Fingerprinted tensors are each call's own, most of a fingerprinted trace's memory: the
    send's and the receive's (equal values, in two files) are one tuple once loaded."""
    sends = [e for e in _events(60, fingerprints=True) if e.op is MessageOp.SEND]
    recvs = [e._replace(op=MessageOp.RECV, peer=1) for e in sends]
    other = RankInfo(rank=2, world_size=4, pp_rank=2, pp_size=4, tp_rank=0, tp_size=1,
                     host="h", pid=42)
    _write(tmp_path / "pptrace-rank1-pid41.otlp.jsonl", 2, sends)
    sink = FileSink(str(tmp_path / "pptrace-rank2-pid42.otlp.jsonl"),
                    process_resource(other, "run1", 2))
    sink.export_messages(recvs, other, "run1")
    sink.shutdown(1.0)
    if workers:
        monkeypatch.setattr(worker, "MIN_PARALLEL_BYTES", 0)
        monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    else:
        monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    sent, got = (p.messages for p in load_paths([str(tmp_path)]).processes)
    assert [m.tensors for m in sent] == [m.tensors for m in got] == [m.tensors for m in sends]
    # (A span that teaches its shape is decoded the ordinary way, its tensors its own: one a
    # shape and file, 3 shapes here.)
    apart = sum(a.tensors is not b.tensors for a, b in zip(sent, got, strict=True))
    assert len(sent) == 30 and apart <= 6
