"""The engine seam: the registry's answers, and selection by name, detection and entry point."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from pptrace import engines
from pptrace.engines import select
from pptrace.engines.spec import Engine
from pptrace.model import errors, records, target


def test_sglang_is_the_default_transport_with_its_own_texts() -> None:
    sglang = engines.engine_named("sglang")
    assert sglang is not None and sglang.transport is engines.DEFAULT_TRANSPORT
    assert target.DEFAULT_MODULE == "sglang.srt.sampling.sampling_observer_pp"
    assert records.PREFIX == "__sampling_observer_output__."
    assert errors.ATTACH_DUPLICATE == "duplicate auxiliary PP tensor {name!r}"
    assert "__msg_type__" in engines.reserved_keys() and "next_token_ids" in engines.reserved_keys()


def test_vllm_records_the_async_pair_and_leaves_the_shells() -> None:
    vllm = engines.engine_named("VLLM")
    assert vllm is not None and vllm.transport is None
    roles = {p.method: p.role for p in vllm.messages}
    assert roles == {"isend_tensor_dict": "isend", "irecv_tensor_dict": "irecv",
                     "send_tensor_dict": "shell", "recv_tensor_dict": "shell",
                     "broadcast_tensor_dict": "broadcast",
                     "_pp_broadcast_prev_sampled_token_ids": "broadcast",
                     "_pp_receive_prev_sampled_token_ids_to_input_batch": "broadcast_irecv"}
    assert engines.engine_of_module("vllm.distributed.parallel_state") is vllm


class _Runner:
    """What the V1 runner's sampled-token decoders read of a runner."""

    def __init__(self, chunked: bool) -> None:
        self.chunked = chunked
        self.input_batch = types.SimpleNamespace(prev_sampled_token_ids="buffer")

    def _is_all_reqs_chunked_prefill(self) -> bool:
        return self.chunked


def test_vllm_sampled_token_broadcast_reads_the_pp_group_and_the_runners_skip(
        monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = engines.engine_named("vllm")
    assert vllm is not None
    by = {p.method: p for p in vllm.messages}
    source = by["_pp_broadcast_prev_sampled_token_ids"]
    member = by["_pp_receive_prev_sampled_token_ids_to_input_batch"]
    pp = _Group(0, 2)  # global ranks 1, 3: the last stage (index 1) is the source
    state = types.ModuleType("vllm.distributed.parallel_state")
    state.get_pp_group = lambda: pp  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", state)
    assert source.group is not None and member.group is not None
    assert source.group((_Runner(False), "ids"), {}) == ((1, 3), 1, 0)
    assert source.group((_Runner(True), "ids"), {}) is None  # the runner skips it
    assert member.group((_Runner(False),), {}) == ((1, 3), 1, 0)
    assert source.payload is not None and member.payload is not None
    assert source.payload((_Runner(False), "ids"), {}) == {"sampled_token_ids": "ids"}
    assert member.payload((_Runner(False),), {}) == {"sampled_token_ids": "buffer"}
    assert member.work == "_pp_recv_work"
    pp = _Group(0, 1)
    assert member.group((_Runner(False),), {}) is None  # a PP group of one


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_a_broadcast_group_is_read_as_broadcast_tensor_dict_reads_it(name: str) -> None:
    engine = engines.engine_named(name)
    assert engine is not None
    (patch,) = [p for p in engine.messages if p.method == "broadcast_tensor_dict"]
    assert patch.role == "broadcast" and patch.dict_arg == 1 and patch.group is not None
    # (group's global ranks, the source's index: src, default 0, the caller's index)
    assert patch.group((_Group(1, 2), None), {}) == ((1, 3), 0, 1)
    assert patch.group((_Group(0, 3), {}, 2), {}) == ((1, 3, 5), 2, 0)
    assert patch.group((_Group(0, 3), {}), {"src": 1}) == ((1, 3, 5), 1, 0)
    assert patch.group((_Group(0, 1), {}), {}) is None  # a group of one: returned at once


def test_sglang_send_recv_is_read_as_a_send_and_a_receive() -> None:
    sglang = engines.engine_named("sglang")
    assert sglang is not None
    (patch,) = [p for p in sglang.messages if p.method == "send_recv_tensor_dict"]
    assert patch.role == "send_recv" and patch.peer is not None and patch.recv_peer is not None
    # A PP group of two (global ranks 1, 3): the next stage and the previous one by default.
    assert patch.peer((_Group(0, 2), {}), {}) == (3, 1, 1)
    assert patch.recv_peer((_Group(0, 2), {}), {}) == (3, 1, 1)
    assert patch.peer((_Group(1, 2), {}, 0, None, _Group(0, 2)), {}) == (1, 0, 2)
    assert patch.recv_peer((_Group(1, 2), {}), {"recv_src": 0,
                                               "recv_all_gather_group": _Group(0, 4)}) == (1, 0, 4)
    assert patch.peer((_Group(0, 1), {}), {}) is None


class _Group:
    def __init__(self, rank_in_group: int, world_size: int) -> None:
        self.rank_in_group, self.world_size = rank_in_group, world_size
        self.ranks = [r * 2 + 1 for r in range(world_size)]  # a PP group of TP rank 1


def test_vllm_peer_decoders_compute_what_the_method_computes() -> None:
    vllm = engines.engine_named("vllm")
    assert vllm is not None
    peer = {p.method: p.peer for p in vllm.messages}
    send, recv = peer["isend_tensor_dict"], peer["irecv_tensor_dict"]
    assert send is not None and recv is not None
    assert send((_Group(0, 2), {}), {}) == (3, 1, 1)  # dst = next stage, as global rank
    assert send((_Group(0, 2), {}), {"all_gather_group": _Group(0, 2)}) == (3, 1, 2)
    assert recv((_Group(1, 2),), {}) == (1, 0, 1)
    assert send((_Group(0, 1), {}), {}) is None  # a group of one moves nothing


def test_an_unknown_engine_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(select.UnknownEngineError, match=r"PPTRACE_ENGINE='tgi'.*sglang, vllm"):
        select.selected("tgi")
    assert select.selected("vllm, sglang") == (engines.engine_named("vllm"),
                                                engines.engine_named("sglang"))


def test_detection_keeps_the_installed_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(select, "module_status",
                        lambda name: None if name.startswith("vllm.") else "absent")
    assert select.selected() == (engines.engine_named("vllm"),)


MINE = Engine(name="mine", title="Mine", detect=("mine.pp",))


def test_a_third_party_engine_comes_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    points = [EntryPoint("mine", "tests.test_engines:MINE", select.ENTRY_POINTS),
              EntryPoint("broken", "tests.no_such_module:ENGINE", select.ENTRY_POINTS)]

    def entry_points(**kwargs: Any) -> list[EntryPoint]:
        assert kwargs == {"group": select.ENTRY_POINTS}
        return points

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    assert select.selected("mine", on_error=said.append) == (MINE,)
    assert len(said) == 1 and "engine 'broken'" in said[0]
