"""The message-layer wrapper: transparent to the code it wraps, and what it writes loads back.

Parity is differential: the same calls through the bare and the wrapped method give the same
objects, the same exceptions and the same dict effects. The class patch restores the exact
originals (an inherited method is deleted again). A receive's begin is buffered before the call
blocks. What a real ``Recorder`` writes through the ``FileSink`` (schema 1 and 2) loads into
``ProcessTrace.messages``, in call order, equal to what was recorded.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest
import torch

from pptrace.engines.sglang import ENGINE as SGLANG
from pptrace.load.loader import load_paths
from pptrace.model.config import Config
from pptrace.model.messages import MessageOp
from pptrace.model.records import PREFIX, RankInfo
from pptrace.record.message_patch import patch_class
from pptrace.record.messages import MessageLog, wrap_recv, wrap_send
from pptrace.record.recorder import Recorder

RANK = RankInfo(rank=3, world_size=4, pp_rank=1, pp_size=2, tp_rank=1, tp_size=2, host="h",
                pid=4242)

#: SGLang's GroupCoordinator patches, for the stand-in classes below (matched by name else).
COORDINATOR = [p for p in SGLANG.messages if p.cls == "GroupCoordinator"]


class Group:
    """A stand-in for SGLang's GroupCoordinator: the same signatures, an in-memory wire."""

    def __init__(self, rank_in_group: int = 1, world_size: int = 2,
                 wire: collections.deque[Any] | None = None) -> None:
        self.rank_in_group, self.world_size = rank_in_group, world_size
        self.ranks = [1, 3][:world_size]
        self.wire = wire if wire is not None else collections.deque()

    def send_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None,
                         all_gather_group: Any = None, async_send: bool = False) -> Any:
        assert isinstance(tensor_dict, dict), f"Expecting a dictionary, got {type(tensor_dict)}"
        if tensor_dict.get("boom"):
            raise RuntimeError("send failed")
        tensor_dict["sent"] = True  # a dict effect the wrapper must leave alone
        self.wire.append(dict(tensor_dict))
        return ["work"]

    def recv_tensor_dict(self, src: int | None = None,
                         all_gather_group: Any = None) -> dict[str, Any] | None:
        if not self.wire:
            raise TimeoutError("nothing to receive")
        return self.wire.popleft()  # type: ignore[no-any-return]


class Gather:
    world_size = 2
    rank_in_group = 0


def recorder(tmp_path: Any, version: int = 2) -> Recorder:
    from pptrace.export.sinks import build_sink

    cfg = Config(trace_dir=str(tmp_path), run_id="r1", flush_interval=0.05,
                 schema_version=version)
    return Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                    rank_provider=lambda: (RANK, True))


def payload() -> dict[str, Any]:
    return {"next_token_ids": torch.arange(4), "logits": torch.zeros(2, 3),
            PREFIX + "entropy": torch.ones(4), "lens": [0, 1], "__msg_type__": "output"}


def test_parity_same_objects_exceptions_and_effects(tmp_path: Any) -> None:
    bare, traced = Group(), Group()
    rec = recorder(tmp_path)
    log = MessageLog(rec)
    send = wrap_send(type(traced).send_tensor_dict, log, _peer, dict_arg=1)
    recv = wrap_recv(type(traced).recv_tensor_dict, log, _peer)
    d1, d2 = payload(), payload()
    r1 = bare.send_tensor_dict(d1, all_gather_group=Gather())
    r2 = send(traced, d2, all_gather_group=Gather())
    assert r1 == r2 and list(d1) == list(d2) and d2["sent"] is True
    waiting = traced.wire[0]
    got = recv(traced)
    assert got is waiting and list(got) == list(bare.recv_tensor_dict() or ())
    with pytest.raises(TimeoutError) as caught:
        recv(traced)
    with pytest.raises(TimeoutError) as caught_bare:
        bare.recv_tensor_dict()
    assert type(caught.value) is type(caught_bare.value)
    assert str(caught.value) == str(caught_bare.value)
    err = RuntimeError("x")

    def raises(*_: Any, **__: Any) -> Any:
        raise err

    with pytest.raises(RuntimeError) as same:
        wrap_send(raises, log, _peer, dict_arg=1)(traced, {})
    assert same.value is err
    with pytest.raises(AssertionError, match="Expecting a dictionary"):
        send(traced, "not a dict")
    events = log.take()
    assert [(e[0], e[1]) for e in events] == [
        (MessageOp.SEND, "end"), (MessageOp.RECV, "begin"), (MessageOp.RECV, "end"),
        (MessageOp.RECV, "begin"), (MessageOp.RECV, "end"), (MessageOp.SEND, "end"),
        (MessageOp.SEND, "end")]
    assert rec.internal_errors == 0


def _peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int | None, int]:
    from pptrace.engines.sglang import coordinator_send_peer

    return coordinator_send_peer(args, kwargs)


def test_begin_is_buffered_before_the_receive_blocks(tmp_path: Any) -> None:
    log = MessageLog(recorder(tmp_path))
    seen: list[int] = []

    def blocking_recv(self: Any, src: int | None = None, all_gather_group: Any = None) -> Any:
        seen.append(log.pending)  # what the recorder thread could write while we wait
        return {"__msg_type__": "proxy", "hidden_states": torch.zeros(2)}

    from pptrace.engines.sglang import coordinator_recv_peer

    wrap_recv(blocking_recv, log, coordinator_recv_peer)(Group())
    assert seen == [1]
    begin, end = log.take()
    assert begin[1] == "begin" and begin[7] == 1 and end[1] == "end"


def test_patch_methods_restores_the_exact_originals() -> None:
    class Base:
        def recv_tensor_dict(self, src: int | None = None, all_gather_group: Any = None) -> Any:
            return None

    class Coordinator(Base):
        def send_tensor_dict(self, tensor_dict: Any, dst: Any = None,
                             all_gather_group: Any = None, async_send: bool = False) -> Any:
            return None

    own = Coordinator.__dict__["send_tensor_dict"]
    inherited = Base.__dict__["recv_tensor_dict"]
    rec = Recorder(Config(), rank_provider=lambda: (RANK, True))
    restore = patch_class(Coordinator, MessageLog(rec), SGLANG, COORDINATOR)
    assert Coordinator.__dict__["send_tensor_dict"] is not own
    assert "recv_tensor_dict" in Coordinator.__dict__
    restore()
    assert Coordinator.__dict__["send_tensor_dict"] is own
    assert "recv_tensor_dict" not in Coordinator.__dict__
    assert Base.__dict__["recv_tensor_dict"] is inherited


def test_a_failing_peer_lookup_is_counted_never_raised(tmp_path: Any) -> None:
    rec = recorder(tmp_path)
    log = MessageLog(rec)

    def broken(args: Any, kwargs: Any) -> Any:
        raise KeyError("no rank")

    group = Group()
    assert wrap_send(Group.send_tensor_dict, log, broken, dict_arg=1)(group, payload()) == [
        "work"]
    assert rec.internal_errors == 1 and log.pending == 0 and len(group.wire) == 1


@pytest.mark.parametrize("version", [1, 2])
def test_written_and_loaded_back(tmp_path: Any, version: int) -> None:
    rec = recorder(tmp_path, version).start()
    log = MessageLog(rec)
    group = Group()
    patched = type("G", (Group,), {})
    restore = patch_class(patched, log, SGLANG, COORDINATOR)
    try:
        g = patched(wire=group.wire)
        g.send_tensor_dict(payload(), all_gather_group=Gather())
        g.send_tensor_dict({"hidden_states": torch.zeros(3, 2), "__msg_type__": "proxy"})
        g.recv_tensor_dict(all_gather_group=Gather())
    finally:
        restore()
        rec.shutdown()
    assert log.dropped == 0 and log.exported == 4
    files = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path)]
    trace = load_paths(files)
    assert not trace.problems
    (proc,) = trace.processes
    assert proc.rank.rank == 3 and proc.rank.tp_rank == 1
    sends = [m for m in proc.messages if m.op is MessageOp.SEND]
    recvs = [m for m in proc.messages if m.op is MessageOp.RECV]
    assert [m.kind for m in sends] == ["output", "proxy"]
    out = sends[0]
    assert (out.peer, out.peer_pp_rank, out.peer_tp_rank, out.gather_size) == (1, 0, 1, 2)
    assert out.carries_attach == 0 and sends[1].carries_attach is None
    assert out.keys == ("next_token_ids", "logits", PREFIX + "entropy", "lens", "__msg_type__")
    t = {m.key: m for m in out.tensors}
    assert t["next_token_ids"].describe() == "int64[4]/tp"
    assert t["logits"].nbytes == 24 and t["logits"].sliced
    assert not t["lens"].is_tensor and t["lens"].dtype == "list"
    assert [m.phase for m in recvs] == ["begin", "end"]
    assert recvs[1].kind == "output" and recvs[1].seq == recvs[0].seq == 0
    assert "sent" in recvs[1].keys  # what arrived, as it arrived


def test_stats_span_counts_the_messages(tmp_path: Any) -> None:
    rec = recorder(tmp_path)  # not started: nothing is written before the exit flush
    log = MessageLog(rec, capacity=2)
    send = wrap_send(Group.send_tensor_dict, log, _peer, dict_arg=1)
    group = Group()
    for _ in range(3):  # the third finds the buffer full: dropped, counted
        send(group, payload())
    rec.shutdown()
    files = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path)]
    (proc,) = load_paths(files).processes
    stats = proc.stats
    assert stats is not None and stats.final
    assert (stats.messages_recorded, stats.messages_exported, stats.messages_dropped) == (3, 2, 1)
    assert len(proc.messages) == 2 and stats.recorded == 0  # attach/extract counted apart


def test_stats_attributes_round_trip_the_message_counts() -> None:
    from pptrace.model import schema
    from pptrace.model.records import RecorderStats

    stats = RecorderStats(rank=RANK, time_ns=5, messages_recorded=7, messages_exported=4,
                          messages_dropped=3)
    attrs = schema.stats_to_attributes(stats)
    assert attrs[schema.S_MSG_DROPPED] == 3
    assert schema.attributes_to_stats(attrs) == stats
    assert schema.S_MSG_RECORDED not in schema.stats_to_attributes(
        RecorderStats(rank=RANK, time_ns=5))  # a process without messages carries none


def test_otlp_sink_writes_message_spans(tmp_path: Any) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pptrace.export.spans import SdkSpanSink, pptrace_provider, process_resource
    from pptrace.model import messages

    log = MessageLog(Recorder(Config(), rank_provider=lambda: (RANK, True)))
    group = Group()
    wrap_send(Group.send_tensor_dict, log, _peer, dict_arg=1)(group, payload())
    recv = wrap_recv(Group.recv_tensor_dict, log, _peer)
    recv(group)
    with pytest.raises(TimeoutError):
        recv(group)
    provider = pptrace_provider(process_resource(RANK, "r1"))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sink = SdkSpanSink(provider, owns_provider=True)
    events = messages_events(log)
    sink.export_messages(events, RANK, "r1")
    spans = memory.get_finished_spans()
    assert [s.name for s in spans] == [messages.span_name(e) for e in events]
    assert [messages.from_attributes(dict(s.attributes or {}), s.name) for s in spans] == events
    assert spans[-1].status.status_code.name == "ERROR" and spans[0].start_time == events[0].wall_ns


def messages_events(log: MessageLog) -> list[Any]:
    from pptrace.record.messages import iter_events

    return list(iter_events(log, RANK))


def test_a_message_s_device_reads_as_an_attach_s(tmp_path: Any) -> None:
    """One tensor record: a message names a tensor's device as the attach/extract converter
    does (``cuda:1``, not the type alone), so that a rank's tensors on the wrong GPU show in
    both layers. Seen on a GPU, where messages said ``cuda`` and attaches ``cuda:0``; here the
    real raw of a send, with its device object set to cuda:1 (torch makes one without CUDA)."""
    from pptrace.record.convert import _tensor_meta
    from pptrace.record.messages import convert

    log = MessageLog(recorder(tmp_path))
    send = wrap_send(lambda d, dst: None, log, lambda a, k: (0, 0, 1))
    send({"hidden_states": torch.zeros(2, 3)}, 0)
    (raw,) = log.take()
    at = raw.index(torch.device("cpu"))  # the value's device slot: (key, shape, dtype, device)
    cuda1 = torch.device("cuda", 1)
    moved = (*raw[:at], cuda1, *raw[at + 1:])
    (tensor,) = convert(moved, RANK, lambda fp: None).tensors
    attach = _tensor_meta("hidden_states", ((2, 3), torch.float32, cuda1, True), "", None)
    assert tensor.device == attach.device == "cuda:1"
    assert tensor.device_type == "cuda"
