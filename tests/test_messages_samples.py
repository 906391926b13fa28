"""The sample pipeline through the message layer: real gloo processes, read back by the loader.

A healthy run (pp, pp x tp) has every send received, in order, with the same keys; each message
fault of ``MESSAGE_FAULTS`` leaves its evidence in the message spans (the analyzer's findings
for them are built next, on these traces).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pptrace_samples.faults import FAULTS, MESSAGE_FAULTS

from pptrace.load.loader import load_paths
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.trace import ProcessTrace, Trace
from tests.helpers_samples import run_sample

pytestmark = pytest.mark.slow


def _load(out: str) -> Trace:
    trace = load_paths([out])
    assert not trace.problems, trace.problems
    return trace


def _proc(trace: Trace, pp: int, tp: int = 0) -> ProcessTrace:
    (proc,) = [p for p in trace.processes if (p.rank.pp_rank, p.rank.tp_rank) == (pp, tp)]
    return proc


def _ends(proc: ProcessTrace, op: MessageOp) -> list[MessageEvent]:
    return [m for m in proc.messages if m.op is op and m.phase == "end" and not m.from_stash]


def test_registries_apart() -> None:
    assert not set(FAULTS) & set(MESSAGE_FAULTS)
    assert set(MESSAGE_FAULTS) == {"tp-slice-not-replicated", "wrong-kind-delivered",
                                   "wrong-gather-group", "key-dropped", "recv-hangs"}


@pytest.mark.parametrize("ranks,tp", [(2, 1), (4, 2)])
def test_healthy_every_send_received_in_order(tmp_path: Any, ranks: int, tp: int) -> None:
    result, _ = run_sample(str(tmp_path), ranks=ranks, tp=tp, steps=6)
    assert result.ok
    trace = _load(str(tmp_path))
    for proc in trace.processes:
        assert proc.messages
        me = proc.rank.rank
        for other in trace.processes:
            sent = [m for m in _ends(other, MessageOp.SEND) if m.peer == me]
            got = [m for m in _ends(proc, MessageOp.RECV) if m.peer == other.rank.rank]
            assert [(m.kind, m.keys) for m in sent] == [(m.kind, m.keys) for m in got]
            for s, r in zip(sent, got, strict=True):
                assert [t.shape for t in s.tensors] == [t.shape for t in r.tensors]
        assert not any(m.stashed for m in proc.messages)
    last = _proc(trace, 1)
    outputs = [m for m in _ends(last, MessageOp.SEND) if m.kind == "output"]
    assert [m.carries_attach for m in outputs] == list(range(6))
    assert all(t.sliced == (tp > 1 and t.nbytes > 0 and t.shape and
                            _numel(t.shape) % tp == 0)
               for m in outputs for t in m.tensors if t.is_tensor)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_key_dropped(tmp_path: Any) -> None:
    result, _ = run_sample(str(tmp_path), ranks=3, steps=6, fault="key-dropped")
    assert result.ok
    trace = _load(str(tmp_path))
    first = _proc(trace, 0)
    received = [m for m in _ends(first, MessageOp.RECV) if m.kind == "output"]
    forwarded = [m for m in _ends(first, MessageOp.SEND) if m.kind == "output"]
    assert "next_token_logprobs" in received[2].keys
    assert "next_token_logprobs" not in forwarded[2].keys
    assert all("next_token_logprobs" in m.keys for i, m in enumerate(forwarded) if i != 2)


def test_wrong_kind_delivered(tmp_path: Any) -> None:
    result, _ = run_sample(str(tmp_path), ranks=2, steps=6, fault="wrong-kind-delivered",
                           comm_timeout=4.0)
    assert not result.ok
    trace = _load(str(tmp_path))
    wrong = [m for m in _ends(_proc(trace, 1), MessageOp.RECV) if m.stashed]
    assert wrong and wrong[0].expected_kind == "proxy" and wrong[0].kind == "output"
    assert "hidden_states" in wrong[0].keys


def test_recv_hangs_shows_who_waited_for_what(tmp_path: Any) -> None:
    result, _ = run_sample(str(tmp_path), ranks=2, steps=4, fault="recv-hangs",
                           comm_timeout=4.0)
    assert not result.ok
    trace = _load(str(tmp_path))
    waiter = _proc(trace, 1)
    begins = {m.seq: m for m in waiter.messages if m.op is MessageOp.RECV and m.phase == "begin"}
    ends = {m.seq: m for m in waiter.messages if m.op is MessageOp.RECV and m.phase == "end"}
    unfinished = [b for s, b in begins.items() if s not in ends or not ends[s].ok]
    assert len(unfinished) == 1
    (wait,) = unfinished
    assert (wait.expected_kind, wait.peer, wait.peer_pp_rank) == ("proxy", 0, 0)
    peer_sends = _ends(_proc(trace, 0), MessageOp.SEND)
    assert Counter(m.kind for m in peer_sends)["proxy"] == 3  # the fourth was never sent


def test_tp_slice_not_replicated(tmp_path: Any) -> None:
    result, _ = run_sample(str(tmp_path), ranks=4, steps=6, fault="tp-slice-not-replicated",
                           fingerprint=True)
    assert result.ok
    trace = _load(str(tmp_path))
    sent = [{t.key: t for t in m.tensors}["next_token_logprobs"]
            for tp in (0, 1) for m in _ends(_proc(trace, 1, tp), MessageOp.SEND)
            if m.kind == "output"]
    tp0, tp1 = sent[:6], sent[6:]
    assert all(t.fingerprint for t in sent)
    assert tp0[2].sliced and tp1[2].sliced  # the differing one travelled as TP slices
    assert [a.fingerprint == b.fingerprint for a, b in zip(tp0, tp1, strict=True)] == [
        True, True, False, True, True, True]


def test_wrong_gather_group(tmp_path: Any) -> None:
    from pptrace.analyze.analyzer import analyze
    from pptrace.model.findings import FindingKind

    result, _ = run_sample(str(tmp_path), ranks=4, tp=2, steps=6, fault="wrong-gather-group",
                           fault_at=2)
    assert result.ok  # the engine goes on, with stage 0 holding forward 2's tensors doubled
    assert [result.reports[r].first_mismatch for r in (0, 1)] == [
        "forward 2: next_token_ids differ"] * 2
    trace = _load(str(tmp_path))
    for tp in (0, 1):
        sent = [m for m in _ends(_proc(trace, 1, tp), MessageOp.SEND) if m.kind == "output"]
        got = [m for m in _ends(_proc(trace, 0, tp), MessageOp.RECV) if m.kind == "output"]
        assert [m.gather_size for m in sent] == [2, 2, 1, 2, 2, 2]  # one sent with no group
        assert {m.gather_size for m in got} == {2}
        assert not any(t.sliced for t in sent[2].tensors)
        whole = {t.key: t.shape for t in sent[2].tensors if t.is_tensor}
        grown = {t.key: t.shape for t in got[2].tensors if t.is_tensor}
        assert grown == {k: (2 * v[0], *v[1:]) for k, v in whole.items()}  # TP times too large
    kinds = [f.kind for f in analyze(trace)]
    gather = FindingKind(MESSAGE_FAULTS["wrong-gather-group"].finding)
    assert gather is FindingKind.MSG_GATHER_GROUP and kinds.count(gather) == 2  # per TP rank
    assert set(kinds) <= {gather, FindingKind.SHAPE_MISMATCH}  # and the aux tensors it carried
