"""SGLang 0.5.23's own ``GroupCoordinator.send_recv_tensor_dict`` (its NPU pp=2 path: one call
that sends a dict to the next stage and receives the previous stage's, through
``batch_isend_irecv``), traced on two real gloo processes: each call is recorded as the send and
the receive it makes, paired across the two stages with no finding; a stage that makes one
exchange its peer never makes is named as a wait on that peer.

The coordinator is the wheel's class built without its ``__init__`` (as in
``test_broadcast_sglang``): a PP group of two over gloo's world group. Each process runs the
exchanges bare, then through pptrace's wrappers (patched on the class by the SGLang adapter's
``MethodPatch``), and both runs must return the same dicts; the wrapped run is written by a real
``Recorder`` to a trace file, which the test loads and analyses. In the ``hang`` scenario stage 1
makes one more exchange, which fails at gloo's timeout.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.messages import MessageOp
from tests.helpers_startup import spawn_world

pytestmark = pytest.mark.slow
WORLD = 2
STEPS = 3


def _dict(rank: int, step: int) -> dict[str, Any]:
    import torch

    return {"hidden_states": torch.full((2, 3), float(step + 10 * rank)),
            "next_token_ids": torch.arange(4) + step, "__msg_type__": "proxy"}


def rank_main(rank: int, store: str, out: str, scenario: str) -> None:
    """One stage: the exchanges bare, then wrapped and traced; what it saw goes to JSON."""
    import torch.distributed as dist

    from pptrace.engines.sglang import ENGINE as sglang
    from pptrace.export.sinks import build_sink
    from pptrace.model.config import Config
    from pptrace.model.records import RankInfo
    from pptrace.record.message_patch import patch_class
    from pptrace.record.messages import MessageLog
    from pptrace.record.recorder import Recorder
    from tests.test_sglang_messages import describe, load_parallel_state

    ps = load_parallel_state()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=4))
    info = RankInfo(rank=rank, world_size=WORLD, pp_rank=rank, pp_size=WORLD, tp_rank=0,
                    tp_size=1, host="h", pid=os.getpid())
    group = object.__new__(ps.GroupCoordinator)
    group.rank_in_group, group.world_size, group.ranks = rank, WORLD, list(range(WORLD))
    group.rank, group.pynccl_comm = rank, None
    group.device_group = group.cpu_group = dist.group.WORLD
    seen: dict[str, Any] = {}
    cfg = Config(trace_dir=out, run_id=f"send-recv-{scenario}", flush_interval=0.2)
    recorder = Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                        rank_provider=lambda: (info, True))
    for run in ("bare", "wrapped"):
        if run == "wrapped":
            recorder.start()
            undo = patch_class(ps.GroupCoordinator, MessageLog(recorder), sglang)
        seen[run] = [describe(group.send_recv_tensor_dict(_dict(rank, step)))
                     for step in range(STEPS)]
    if scenario == "hang" and rank == 1:
        try:  # an exchange its peer never makes: gloo's timeout ends it
            group.send_recv_tensor_dict(_dict(rank, STEPS))
        except RuntimeError as exc:
            seen["hang"] = type(exc).__name__
    undo()
    recorder.shutdown()
    Path(out, f"seen{rank}.json").write_text(json.dumps(seen))


def _run(tmp_path: Path, scenario: str) -> tuple[Path, list[dict[str, Any]]]:
    return spawn_world(rank_main, WORLD, tmp_path, scenario)


def test_sglang_send_recv_is_recorded_as_a_send_and_a_receive_and_paired(
        tmp_path: Path) -> None:
    out, seen = _run(tmp_path, "healthy")
    for s in seen:  # the wrapper changes nothing the engine returns
        assert s["wrapped"] == s["bare"]
    trace = load_paths([str(out)])
    assert not trace.problems
    for p in trace.processes:
        other = 1 - p.rank.rank
        sends = [m for m in p.messages if m.op is MessageOp.SEND]
        ends = [m for m in p.messages if m.op is MessageOp.RECV and m.phase == "end"]
        assert len(sends) == len(ends) == STEPS
        assert all(m.peer == other for m in sends + ends)
        # The wheel rebuilds the received dict with its non-tensor values first: what
        # arrived is recorded in that order, and compared by key.
        assert [m.keys for m in ends] == [("__msg_type__", "hidden_states", "next_token_ids")] * 3
        sent = [m for m in trace.processes[other].messages if m.op is MessageOp.SEND]
        assert [sorted(m.tensors, key=lambda t: t.key) for m in ends] == [
            sorted(m.tensors, key=lambda t: t.key) for m in sent]
    judged = analysis(trace)
    assert [f.message for f in judged.findings if f.severity is not Severity.INFO] == []
    assert len(judged.message_pairs) == WORLD * STEPS


def test_an_exchange_its_peer_never_makes_is_named_as_a_wait(tmp_path: Path) -> None:
    out, seen = _run(tmp_path, "hang")
    assert seen[1]["hang"] == "RuntimeError"
    judged = analysis(load_paths([str(out)]))
    hangs = [f for f in judged.findings if f.kind is FindingKind.MSG_HANG]
    assert len(hangs) == 1, [f.message for f in judged.findings]
    assert hangs[0].message.startswith("rank 1 (pp1) waits for a message from rank 0 (pp0) "), (
        hangs[0].message)
