"""SGLang 0.5.23's own ``GroupCoordinator.broadcast_tensor_dict``, traced on three real gloo
processes: recorded as one send on the source and a receive on each other member, paired
one-to-many by the analyzer, and a member left waiting named as a wait on the source.

The coordinator is the wheel's class built without its ``__init__`` (as in
``test_sglang_messages``): a group of three over gloo's world group. Each process runs the same
broadcasts bare, then through pptrace's wrappers (patched on the class by the SGLang adapter's
``MethodPatch``), and both runs must return the same dicts; the wrapped run is written by a
real ``Recorder`` to a trace file, which the test loads and analyses. In the ``hang`` scenario
member 2 calls one more broadcast that its source never makes: it fails at gloo's timeout, and
the analyzer says who waited, from whom, and what that source last sent it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, MessageId
from pptrace.model.messages import MessageOp
from tests.helpers_startup import sglang_world_group, sglang_world_rank, spawn_world

pytestmark = pytest.mark.slow
WORLD = 3


def _dicts(step: int) -> list[tuple[int, dict[str, Any]]]:
    """(source index, dict) of one step: two from member 0, one from member 1."""
    import torch

    return [
        (0, {"next_token_ids": torch.arange(4) + step, "lens": [1, 2], "__msg_type__": "output",
             "empty": torch.zeros(0)}),
        (0, {"hidden_states": torch.full((2, 3), float(step))}),
        (1, {"scores": torch.ones(5, dtype=torch.float16) * step}),
    ]


def rank_main(rank: int, store: str, out: str, scenario: str) -> None:
    """One member: the broadcasts bare, then wrapped and traced; what it saw goes to JSON."""
    import torch.distributed as dist

    from pptrace.engines.sglang import ENGINE as sglang
    from pptrace.record.message_patch import patch_class
    from pptrace.record.messages import MessageLog
    from tests.test_sglang_messages import describe

    ps, recorder = sglang_world_rank(rank, store, WORLD, out, f"bcast-{scenario}",
                                     pp_rank=0, pp_size=1, tp_rank=rank, tp_size=WORLD)

    def coordinator() -> Any:
        return sglang_world_group(ps, rank, WORLD, mq_broadcaster=None)

    seen: dict[str, Any] = {}
    for run in ("bare", "wrapped"):
        if run == "wrapped":
            recorder.start()
            undo = patch_class(ps.GroupCoordinator, MessageLog(recorder), sglang)
        group = coordinator()
        got = []
        for step in range(2):
            for src, d in _dicts(step):
                mine = d if rank == src else None
                result = group.broadcast_tensor_dict(mine, src=src)
                got.append([describe(result), result is mine if mine is not None else None])
        seen[run] = got
    if scenario == "hang" and rank == 2:
        try:  # a broadcast its source never makes: gloo's timeout ends it
            group.broadcast_tensor_dict(None, src=0)
        except RuntimeError as exc:
            seen["hang"] = type(exc).__name__
    else:
        dist.barrier(group=dist.new_group([0, 1]) if scenario == "hang" else None)
    undo()
    recorder.shutdown()
    Path(out, f"seen{rank}.json").write_text(json.dumps(seen))


def _run(tmp_path: Path, scenario: str) -> tuple[Path, list[dict[str, Any]]]:
    return spawn_world(rank_main, WORLD, tmp_path, scenario)


def test_sglang_broadcasts_are_recorded_and_paired_one_to_many(tmp_path: Path) -> None:
    out, seen = _run(tmp_path, "healthy")
    for s in seen:  # the wrapper changes nothing the engine returns (the source's own dict)
        assert s["wrapped"] == s["bare"]
    trace = load_paths([str(out)])
    assert not trace.problems
    procs = {p.rank.rank: (i, p) for i, p in enumerate(trace.processes)}
    sends = {r: [m for m in p.messages if m.op is MessageOp.SEND] for r, (_, p) in procs.items()}
    ends = {r: [m for m in p.messages if m.op is MessageOp.RECV and m.phase == "end"]
            for r, (_, p) in procs.items()}
    # Member 0 sourced 4 broadcasts and received 2; member 1 the reverse; member 2 received 6.
    assert [len(sends[r]) for r in range(WORLD)] == [4, 2, 0]
    assert [len(ends[r]) for r in range(WORLD)] == [2, 4, 6]
    assert all(m.group == (0, 1, 2) for r in range(WORLD) for m in sends[r] + ends[r])
    assert [m.keys for m in ends[2][:3]] == [
        ("next_token_ids", "lens", "__msg_type__", "empty"), ("hidden_states",), ("scores",)]
    assert ends[2][0].kind == "output" and ends[2][2].tensors[0].dtype == "float16"
    assert [m.peer for m in ends[2]] == [0, 0, 1, 0, 0, 1]
    judged = analysis(trace)
    assert [f for f in judged.findings if f.kind.category.value == "message"] == []
    ids = {r: i for r, (i, _) in procs.items()}
    expected = {}
    for src in (0, 1):
        for n, m in enumerate(sends[src]):
            members = [r for r in range(WORLD) if r != src]
            expected[MessageId(ids[src], MessageOp.SEND, m.seq, broadcast=True)] = tuple(
                MessageId(ids[r], MessageOp.RECV, [e for e in ends[r] if e.peer == src][n].seq,
                          broadcast=True) for r in members)
    assert judged.broadcast_pairs == expected


def test_a_member_left_waiting_is_named_as_a_wait_on_its_source(tmp_path: Path) -> None:
    out, seen = _run(tmp_path, "hang")
    assert seen[2]["hang"] == "RuntimeError"
    judged = analysis(load_paths([str(out)]))
    hangs = [f for f in judged.findings if f.kind is FindingKind.MSG_HANG]
    assert len(hangs) == 1, [f.message for f in judged.findings]
    (f,) = hangs
    assert f.message.startswith("rank 2 (pp0/tp2) waits for a message from rank 0 (pp0/tp0) "
                                "since its broadcast receive #6 began, and it failed "), f.message
    assert "rank 0 last sent it a message (broadcast send #3" in f.message
    assert f.channel == "pp0/tp0->pp0/tp2"
