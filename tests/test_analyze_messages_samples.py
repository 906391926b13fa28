"""The message layer's findings on real traces: the sample pipeline's message faults, each found
under its own kind from its multi-process gloo run, and healthy pp and pp x tp runs with none."""

from __future__ import annotations

from pathlib import Path

import pytest
from pptrace_samples.faults import MESSAGE_FAULTS

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import Category, Finding, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageOp
from pptrace.report.groups import first_divergence
from pptrace.report.text import render_text
from tests.helpers_samples import run_sample

pytestmark = pytest.mark.slow
K = FindingKind


def _analyze(out: Path, **options: object) -> tuple[bool, list[Finding]]:
    result, _ = run_sample(str(out), **options)
    trace = load_paths([str(out)])
    assert not trace.problems, trace.problems
    return result.ok, analyze(trace)


@pytest.mark.parametrize(("ranks", "tp"), [(2, 1), (3, 1), (4, 2)])
def test_healthy_runs_give_no_finding(tmp_path: Path, ranks: int, tp: int) -> None:
    ok, findings = _analyze(tmp_path, ranks=ranks, tp=tp, steps=6)
    assert ok and findings == [], [f.message for f in findings]


def test_every_message_fault_names_its_own_kind() -> None:
    assert {f.finding for f in MESSAGE_FAULTS.values()} <= {k.value for k in FindingKind}


def test_key_dropped(tmp_path: Path) -> None:
    ok, findings = _analyze(tmp_path, ranks=3, steps=6, fault="key-dropped")
    assert ok
    (f,) = findings
    assert f.kind.value == MESSAGE_FAULTS["key-dropped"].finding == "message-keys-differ"
    assert f.message == ("rank 0 (pp0) received an `output` message from rank 2 with "
                         "`next_token_logprobs` (receive #2) and forwarded it to rank 1 (pp1) "
                         f"without it (send #{f.messages[1].seq})")


def test_tp_slice_not_replicated(tmp_path: Path) -> None:
    ok, findings = _analyze(tmp_path, ranks=4, steps=6, fault="tp-slice-not-replicated",
                            fingerprint=True)
    assert ok
    cause = findings[0]
    assert cause.kind.value == MESSAGE_FAULTS["tp-slice-not-replicated"].finding
    assert cause.microbatch == 2 and cause.channel == "pp1/tp0~tp1"
    assert cause.message.startswith("rank 2 (pp1/tp0) and rank 3 (pp1/tp1) sent "
                                    "`next_token_logprobs` as TP slices of different tensors in "
                                    "an `output` message #2")
    # each stage-0 TP rank's re-assembled tensor differs from what its sender sent: that follows
    assert [(f.kind, f.cause is cause) for f in findings[1:]] == [
        (K.MSG_CONTENT_MISMATCH, True), (K.MSG_CONTENT_MISMATCH, True)]


def test_wrong_kind_delivered(tmp_path: Path) -> None:
    ok, findings = _analyze(tmp_path, ranks=2, steps=6, fault="wrong-kind-delivered",
                            comm_timeout=4.0)
    assert not ok
    kinds = {f.kind for f in findings}
    assert K(MESSAGE_FAULTS["wrong-kind-delivered"].finding) is K.MSG_WRONG_KIND
    assert kinds <= {K.MSG_WRONG_KIND, K.MSG_HANG, K.MSG_STASH_UNCONSUMED}, kinds
    (label,) = [f for f in findings if f.kind is K.MSG_WRONG_KIND]
    assert "rank 0 (pp0) sent rank 1 (pp1) a message labelled `output`" in label.message
    assert "that carries the keys of its `proxy` messages" in label.message
    assert "which asked for a `proxy` message, stashed it as an `output` message" in label.message
    index = first_divergence(findings)
    assert index is not None and findings[index] is label  # before the waits it leads to


def test_recv_hangs_names_the_waiter_the_peer_and_the_kind(tmp_path: Path) -> None:
    ok, findings = _analyze(tmp_path, ranks=2, steps=4, fault="recv-hangs", comm_timeout=4.0)
    assert not ok
    hangs = [f for f in findings if f.kind.value == MESSAGE_FAULTS["recv-hangs"].finding]
    assert [f.kind for f in hangs] == [K.MSG_HANG, K.MSG_HANG]
    (waiter,) = [f for f in hangs if f.message.startswith("rank 1 (pp1) waits for a `proxy` "
                                                          "message from rank 0 (pp0)")]
    # How the receive ended is gloo's wording: a timeout, or the peer's connection closing
    # first when the peer gave up sooner (seen in CI); either way it failed, and says so.
    assert " s later with " in waiter.message and "rank 0 last sent it" in waiter.message
    assert "a cycle of waits (deadlock)" in waiter.message
    assert all(f.kind.category is Category.MESSAGE for f in findings)
    index = first_divergence(findings)
    assert index is not None and findings[index].kind is K.MSG_HANG
    text = render_text(load_paths([str(tmp_path)]), findings, Severity.ERROR)
    assert "First divergence (error, message-hang):" in text


def test_a_tp_broadcast_run_records_each_broadcast_and_pairs_it_with_every_member(
        tmp_path: Path) -> None:
    """``pptrace demo --tp 2 --tp-broadcast``: the last stage's TP rank 0 broadcasts each output
    dict to TP rank 1; each broadcast is paired with TP rank 1's receive, and a healthy run
    gives no finding."""
    from pptrace.analyze.analyzer import analysis

    steps = 6
    result, _ = run_sample(str(tmp_path), ranks=4, tp=2, steps=steps, tp_broadcast=True)
    assert result.ok
    trace = load_paths([str(tmp_path)])
    judged = analysis(trace)
    assert judged.findings == (), [f.message for f in judged.findings]
    by_rank = {p.rank.rank: i for i, p in enumerate(trace.processes)}
    source, member = trace.processes[by_rank[2]], trace.processes[by_rank[3]]
    sent = [m for m in source.messages if m.group]
    got = [m for m in member.messages if m.group and m.phase == "end"]
    assert len(sent) == len(got) == steps
    assert all(m.group == (2, 3) and m.peer == -1 for m in sent)
    assert all(m.peer == 2 and m.keys == s.keys for m, s in zip(got, sent, strict=True))
    # Numbered by the broadcast counters, apart from the point-to-point sends and receives.
    assert [m.seq for m in sent] == [m.seq for m in got] == list(range(steps))
    assert [m.seq for m in source.messages if m.op is MessageOp.SEND and not m.group] == list(
        range(steps))
    assert judged.broadcast_pairs == {
        MessageId.of(by_rank[2], s): (MessageId.of(by_rank[3], e),)
        for s, e in zip(sent, got, strict=True)}
