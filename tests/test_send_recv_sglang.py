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

import json
from pathlib import Path
from typing import Any

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.messages import MessageOp
from tests.helpers_startup import sglang_world_group, sglang_world_rank, spawn_world

pytestmark = pytest.mark.slow
WORLD = 2
STEPS = 3


def _dict(rank: int, step: int) -> dict[str, Any]:
    import torch

    return {"hidden_states": torch.full((2, 3), float(step + 10 * rank)),
            "next_token_ids": torch.arange(4) + step, "__msg_type__": "proxy"}


def rank_main(rank: int, store: str, out: str, scenario: str) -> None:
    """One stage: the exchanges bare, then wrapped and traced; what it saw goes to JSON."""
    from pptrace.engines.sglang import ENGINE as sglang
    from pptrace.record.message_patch import patch_class
    from pptrace.record.messages import MessageLog
    from tests.test_sglang_messages import describe

    ps, recorder = sglang_world_rank(rank, store, WORLD, out, f"send-recv-{scenario}",
                                     pp_rank=rank, pp_size=WORLD, tp_rank=0, tp_size=1)
    group = sglang_world_group(ps, rank, WORLD, pynccl_comm=None)
    seen: dict[str, Any] = {}
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
