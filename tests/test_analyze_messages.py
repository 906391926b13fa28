"""Table tests for the PP message layer's findings: hand-built sends and receives -> exactly the
expected kinds, with both sides named; healthy pp and pp x tp runs give none."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.model.findings import Category, Finding, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageOp
from pptrace.report.groups import first_divergence
from pptrace.report.text import render_text, to_json
from tests.helpers_analyze import Run, meta, mt

K = FindingKind
OUT = [mt("next_token_ids", (8,), "int64"), mt("scores", (8, 5))]
PROXY = [mt("hidden_states", (8, 16)), mt("residual", (8, 16))]


def step(run: Run, k: int = 0) -> None:
    """One healthy microbatch: proxy stage to stage, then the last stage's output to stage 0."""
    last = run.pp_size - 1
    for pp in range(last):
        run.message("proxy", PROXY, frm=pp, to=pp + 1)
    run.message("output", OUT, frm=last, to=0, carries=k)


def healthy(run: Run, n: int = 3) -> Run:
    for k in range(n):
        step(run, k)
    return run


# --- rows -------------------------------------------------------------------------------------


def clean_pp4() -> Run:
    return healthy(Run(pp_size=4), 4)


def clean_pp2_tp2_slices() -> Run:
    run = Run(pp_size=2, tp_size=2)
    sliced = [mt("hidden_states", (8, 16), sliced=True, fingerprint="f00d"),
              mt("lengths", (3,), "int64", fingerprint="beef")]
    for k in range(3):
        run.message("proxy", sliced, frm=0, to=1)
        run.message("output", OUT, frm=1, to=0, carries=k)
    return run


def clean_stash() -> Run:
    # pp1 asks for a proxy, an output arrives first: stashed, then taken by the next receive.
    run = Run(pp_size=2)
    run.send("output", OUT, pp=0, to=1)
    run.send("proxy", PROXY, pp=0, to=1)
    run.recv("output", OUT, pp=1, frm=0, expected="proxy", stashed=True)
    run.recv("proxy", PROXY, pp=1, frm=0)
    run.recv("output", OUT, pp=1, frm=0, from_stash=True)
    return run


def clean_in_flight() -> Run:
    # The last send happened after the receiver's trace stopped: in flight, not lost.
    run = healthy(Run(pp_size=2), 2)
    run.set_stats(0, final=False)
    run.send("output", OUT, pp=1, to=0)
    run.set_stats(1)
    return run


def one_pair(sent: list, got: list, *, keys: tuple[str, ...] | None = None,
             gather: int | None = None, tp_size: int = 1) -> Callable[[], Run]:
    def build() -> Run:
        run = healthy(Run(pp_size=2, tp_size=tp_size), 1)
        for tp in range(tp_size):
            run.send("output", sent, pp=1, to=0, tp=tp)
        for tp in range(tp_size):
            run.recv("output", got, pp=0, frm=1, tp=tp, keys=keys, gather=gather)
        return run
    return build


def tp_slices() -> Run:
    run = healthy(Run(pp_size=2, tp_size=2), 1)
    for tp in range(2):
        run.send("proxy", [mt("hidden_states", sliced=True, fingerprint=f"fp{tp}")], pp=0, to=1,
                 tp=tp)
    for tp in range(2):  # each receiver re-assembled a mix: neither sender's tensor
        run.recv("proxy", [mt("hidden_states", sliced=True, fingerprint="mix")], pp=1, frm=0,
                 tp=tp)
    return run


def wrong_kind() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.send("proxy", PROXY, pp=1, to=0)
    run.recv("proxy", PROXY, pp=0, frm=1, expected="output")
    return run


def key_dropped_on_a_hop() -> Run:
    # Stage 0 forwards the output message around the ring without one of its keys.
    run = Run(pp_size=3)
    logprobs = [*OUT, mt("next_token_logprobs", (8,))]
    for k in range(3):
        run.message("proxy", PROXY, frm=0, to=1)
        run.message("proxy", PROXY, frm=1, to=2)
        run.message("output", logprobs, frm=2, to=0, carries=k)
        run.message("output", logprobs if k != 1 else OUT, frm=0, to=1)
        run.message("output", logprobs, frm=1, to=2)
    return run


def mislabelled() -> Run:
    run = Run(pp_size=2)
    for k in range(3):  # stage 0 forwards each output to stage 1, as the ring does
        run.message("proxy", PROXY, frm=0, to=1)
        run.message("output", OUT, frm=1, to=0, carries=k)
        run.message("output", OUT, frm=0, to=1)
    run.send("output", PROXY, pp=0, to=1)  # a proxy that went out labelled 'output'
    run.recv("output", PROXY, pp=1, frm=0, expected="proxy", stashed=True)
    run.recv("output", PROXY, pp=1, frm=0, from_stash=True)
    return run


def stash_unconsumed() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.send("output", OUT, pp=0, to=1)
    run.send("proxy", PROXY, pp=0, to=1)
    run.recv("output", OUT, pp=1, frm=0, expected="proxy", stashed=True)
    run.recv("proxy", PROXY, pp=1, frm=0)
    return run


def never_received() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.send("output", OUT, pp=1, to=0)
    step(run, 1)  # the receiver goes on: the lost one was not in flight
    return run


def unmatched_recv() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.recv("output", OUT, pp=0, frm=1)
    return run


def raised() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.send("output", OUT, pp=1, to=0, error=("RuntimeError", "Connection closed by peer"))
    return run


def hang() -> Run:
    run = healthy(Run(pp_size=2), 2)
    run.send("proxy", PROXY, pp=1, to=0)  # not what stage 0 waits for
    run.recv("proxy", PROXY, pp=0, frm=1, expected="proxy")
    run.wait("output", pp=0, frm=1)
    # Stopped by SIGTERM, which drains: final stats, with the receive still open (killed
    # without stats, the trace could not tell the hang from a run read while it goes on).
    run.set_stats(0)
    return run


def deadlock() -> Run:
    run = healthy(Run(pp_size=2), 1)
    run.wait("output", pp=0, frm=1)
    run.wait("proxy", pp=1, frm=0)
    run.set_stats(0)  # both drained at SIGTERM: final stats, each receive still open
    run.set_stats(1)
    return run


def cut(*, stash: bool = False, drift: bool = False) -> Callable[[], Run]:
    def build() -> Run:
        run = Run(pp_size=2)
        # The oldest 40 messages of stage 1's output channel were rotated away at both ends.
        run.msg_seqs[(1, 0, MessageOp.SEND)] = run.msg_seqs[(0, 0, MessageOp.RECV)] = 40
        healthy(run, 2)
        if stash:
            run.send("output", OUT, pp=0, to=1)
            run.recv("output", OUT, pp=1, frm=0, expected="proxy", stashed=True)
            run.recv("output", OUT, pp=1, frm=0, from_stash=True)
            run.msg_seqs[(1, 0, MessageOp.RECV)] = 7
        if drift:
            run.send("output", [mt("x")], pp=1, to=0)
            run.recv("output", [mt("x", dtype="float16", nbytes=80)], pp=0, frm=1)
        run.send("output", OUT, pp=1, to=0)  # in flight at the end
        return run
    return build


def sender_kept_no_sends() -> Run:
    """A rotated TP-broadcast run once gave message-unmatched-recv here: the last stage's kept
    segments held none of its sends (only its last receives), stage 0's the last outputs."""
    run = Run(pp_size=2)
    run.msg_seqs[(0, 0, MessageOp.RECV)] = run.msg_seqs[(1, 0, MessageOp.RECV)] = 40
    run.msg_seqs[(0, 0, MessageOp.SEND)] = 40
    for _ in range(3):
        run.message("proxy", PROXY, frm=0, to=1)
        run.recv("output", OUT, pp=0, frm=1)  # its send went with a segment rotated away
    return run


ROWS: list[tuple[str, Callable[[], Run], list[FindingKind]]] = [
    ("healthy pp4", clean_pp4, []),
    ("healthy pp2 x tp2, TP slices", clean_pp2_tp2_slices, []),
    ("a stash taken later", clean_stash, []),
    ("a send in flight when the receiver stopped", clean_in_flight, [K.STATS_NOT_FINAL]),
    ("a key lost on the way", one_pair(OUT, OUT[:1], keys=("next_token_ids", "__msg_type__")),
     [K.MSG_KEYS_DIFFER]),
    ("1015 against 1024", one_pair([mt("ids", (1024,), "int64")], [mt("ids", (1015,), "int64")]),
     [K.MSG_SHAPE_MISMATCH]),
    ("dtype drift", one_pair([mt("x")], [mt("x", dtype="float16", nbytes=160)]),
     [K.MSG_DTYPE_MISMATCH]),
    ("bytes drift", one_pair([mt("x")], [mt("x", nbytes=4)]), [K.MSG_BYTES_MISMATCH]),
    ("sent from the device, arrived on the host",
     one_pair([mt("x", device="cuda")], [mt("x", device="cpu")]), [K.MSG_DEVICE_MISMATCH]),
    # The device index differs between ranks by design, in a message as in an attach/extract
    # pair: one tensor record, one device_type (messages once compared the whole device text).
    ("a device index is no device mismatch",
     one_pair([mt("x", device="cuda:0")], [mt("x", device="cuda:1")]), []),
    # The one payload comparison judges a message's values as an attach/extract pair's:
    # A message is a dict read by key: the same values in another order are no finding (SGLang's
    # send_recv_tensor_dict hands its receiver the non-tensor values first, on a healthy run).
    ("the same values in another order",
     one_pair([mt("ids", (4,), "int64"), mt("x")], [mt("x"), mt("ids", (4,), "int64")]),
     []),
    ("another order and a lost key",
     one_pair([mt("a"), mt("b"), mt("c")], [mt("c"), mt("a")]),
     [K.MSG_KEYS_DIFFER]),
    # Every difference is named, by the rule attach/extract pairs are judged by (a dtype
    # change used to hide the shape change beside it).
    ("shape and dtype both", one_pair([mt("ids", (1024,), "int64")],
                                      [mt("ids", (1015,), "int32", nbytes=4060)]),
     [K.MSG_DTYPE_MISMATCH, K.MSG_SHAPE_MISMATCH]),
    ("content changed", one_pair([mt("x", fingerprint="aa")], [mt("x", fingerprint="bb")]),
     [K.MSG_CONTENT_MISMATCH]),
    ("wrong all-gather group", one_pair([mt("x", (8, 5))], [mt("x", (16, 5), sliced=True)],
                                        gather=2), [K.MSG_GATHER_GROUP]),
    ("TP slices of different tensors", tp_slices,
     [K.MSG_SLICES_DIFFER, K.MSG_CONTENT_MISMATCH, K.MSG_CONTENT_MISMATCH]),
    ("a kind where another was expected", wrong_kind, [K.MSG_WRONG_KIND]),
    ("a stashed kind never taken", stash_unconsumed, [K.MSG_STASH_UNCONSUMED]),
    ("a key dropped by a stage that forwards", key_dropped_on_a_hop, [K.MSG_KEYS_DIFFER]),
    ("a message under another kind's label", mislabelled, [K.MSG_WRONG_KIND]),
    ("a send never received", never_received, [K.MSG_NEVER_RECEIVED]),
    ("a receive with no send", unmatched_recv, [K.MSG_UNMATCHED_RECV]),
    ("a send that raised", raised, [K.MSG_RAISED]),
    ("the hang", hang, [K.MSG_HANG]),
    ("a cycle of waits", deadlock, [K.MSG_HANG, K.MSG_HANG]),
    ("rotated messages, paired by seq", cut(), []),
    ("a drift inside a rotated window", cut(drift=True), [K.MSG_DTYPE_MISMATCH]),
    ("rotated messages with a stash", cut(stash=True), [K.MSG_CUT, K.MSG_CUT]),
    ("a rotated sender that kept none of its sends", sender_kept_no_sends, []),
]


def _kinds(findings: list[Finding]) -> list[str]:
    return sorted(f.kind.value for f in findings)


@pytest.mark.parametrize(("build", "expected"), [(b, e) for _, b, e in ROWS],
                         ids=[name for name, _, _ in ROWS])
def test_row(build: Callable[[], Run], expected: list[FindingKind]) -> None:
    findings = analyze(build().trace())
    assert _kinds(findings) == sorted(k.value for k in expected), [f.message for f in findings]


def test_every_message_kind_has_a_row() -> None:
    covered = {k for _, _, kinds in ROWS for k in kinds}
    message_kinds = {k for k in FindingKind if k.category is Category.MESSAGE}
    assert message_kinds and message_kinds <= covered, message_kinds - covered


def _one(findings: list[Finding], kind: FindingKind) -> Finding:
    found = [f for f in findings if f.kind is kind]
    assert len(found) == 1, [f.message for f in findings]
    return found[0]


def test_messages_name_both_sides() -> None:
    lost = _one(analyze(one_pair(OUT, OUT[:1], keys=("next_token_ids", "__msg_type__"))()
                        .trace()), K.MSG_KEYS_DIFFER)
    assert lost.message == ("`output` message #1 rank 1 (pp1) -> rank 0 (pp0) (receive #1): "
                            "arrived without `scores` that was sent")
    assert lost.channel == "pp1->pp0" and lost.ranks == (1, 0)
    assert lost.messages == (MessageId(1, MessageOp.SEND, 1), MessageId(0, MessageOp.RECV, 1))
    size = _one(analyze(ROWS[5][1]().trace()), K.MSG_SHAPE_MISMATCH)
    assert "`ids` sent int64[1024], arrived int64[1015] (1024 elements against 1015)" in (
        size.message)
    kind = _one(analyze(wrong_kind().trace()), K.MSG_WRONG_KIND)
    assert "rank 0 (pp0) asked rank 1 (pp1) for an `output` message and got a `proxy` message" in (
        kind.message)


def test_the_hang_names_the_waiter_the_kind_the_peer_and_what_it_last_sent() -> None:
    findings = analyze(hang().trace())
    f = _one(findings, K.MSG_HANG)
    assert f.message.startswith("rank 0 (pp0) waits for an `output` message from rank 1 (pp1) "
                                "since its receive #3 began")
    assert "rank 1 last sent it a `proxy` message (send #2, " in f.message
    assert f.severity is Severity.ERROR and f.ranks == (0, 1) and f.channel == "pp1->pp0"
    # the earliest-blocking thing is the first divergence
    index = first_divergence(findings)
    assert index is not None and findings[index] is f
    text = render_text(hang().trace(), findings, Severity.ERROR)
    assert "First divergence (error, message-hang):" in text


def test_a_cycle_of_waits_is_named() -> None:
    first, second = [f for f in analyze(deadlock().trace()) if f.kind is K.MSG_HANG]
    assert first.message.startswith("rank 0 (pp0) waits for an `output` message from rank 1")
    assert first.message.endswith("and waits too: for a `proxy` message from rank 0 (rank 0 -> "
                                  "rank 1 -> rank 0: a cycle of waits (deadlock))")
    assert second.message.startswith("rank 1 (pp1) waits for a `proxy` message from rank 0")
    assert "(rank 1 -> rank 0 -> rank 1: a cycle of waits (deadlock))" in second.message


def test_a_receive_that_failed_at_its_timeout_is_a_wait() -> None:
    run = healthy(Run(pp_size=2), 1)
    run.recv("output", pp=0, frm=1, error=("RuntimeError", "Timed out waiting 4000ms"))
    f = _one(analyze(run.trace()), K.MSG_HANG)
    assert "since its receive #1 began, and it failed 0.000 s later with RuntimeError: Timed " in (
        f.message)
    assert "rank 1 last sent it an `output` message (send #0, " in f.message


def test_a_chain_of_waits_that_is_no_cycle_names_the_chain() -> None:
    run = healthy(Run(pp_size=3), 1)
    run.wait("output", pp=0, frm=2)
    run.wait("proxy", pp=2, frm=1)
    findings = analyze(run.trace())
    hangs = [f for f in findings if f.kind is K.MSG_HANG]
    assert len(hangs) == 2
    assert hangs[0].message.endswith(
        "and waits too: for a `proxy` message from rank 1 (rank 0 -> rank 2 -> rank 1)")
    assert "rank 1 last sent it a `proxy` message" in hangs[1].message


def test_tp_slices_differ_is_the_cause_of_the_receivers_content_mismatch() -> None:
    findings = analyze(tp_slices().trace())
    cause = _one(findings, K.MSG_SLICES_DIFFER)
    assert "rank 0 (pp0/tp0) and rank 1 (pp0/tp1) sent `hidden_states` as TP slices of " in (
        cause.message)
    assert "fingerprints fp0 on rank 0, fp1 on rank 1" in cause.message
    effects = [f for f in findings if f.kind is K.MSG_CONTENT_MISMATCH]
    assert effects and all(f.cause is cause for f in effects)
    assert findings.index(cause) < min(findings.index(f) for f in effects)


def test_a_payload_finding_says_which_output_message_carried_it() -> None:
    run = Run(pp_size=2)
    healthy(run, 1)
    run.attach([meta("scores")])
    run.extract([meta("scores", dtype="float16")])
    run.message("output", OUT, frm=1, to=0, carries=0)
    f = _one(analyze(run.trace()), K.DTYPE_MISMATCH)
    assert f.message.endswith("(carried by output message #1 pp1->pp0)"), f.message


def test_a_message_finding_cascades_and_reaches_the_json() -> None:
    run = healthy(Run(pp_size=2), 1)
    for _ in range(5):
        run.send("output", [mt("x")], pp=1, to=0)
        run.recv("output", [mt("x", dtype="float16", nbytes=80)], pp=0, frm=1)
    trace = run.trace()
    findings = analyze(trace)
    f = _one(findings, K.MSG_DTYPE_MISMATCH)
    assert f.cascade == 4 and "(and 4 more like this)" in f.message
    doc = to_json(trace, findings, Severity.ERROR)
    row = doc["findings"][0]
    assert row["kind"] == "message-dtype-mismatch"
    assert row["messages"] == [{"process": 1, "op": "send", "seq": 1},
                               {"process": 0, "op": "recv", "seq": 1}]
    assert doc["summary"]["messages"] == 14
    assert doc["processes"][0]["receives"] == 6 and doc["processes"][1]["sends"] == 6
    assert "7 messages sent, 7 received" in render_text(trace, findings, Severity.ERROR)


def test_a_stash_unconsumed_is_info_when_the_trace_ends_early() -> None:
    run = stash_unconsumed()
    run.unfinished.add((1, 0))
    f = _one(analyze(run.trace()), K.MSG_STASH_UNCONSUMED)
    assert f.severity is Severity.INFO and "a later receive may have taken it" in f.message


def test_a_send_to_a_rank_that_left_no_trace_is_not_judged() -> None:
    run = healthy(Run(pp_size=2), 1)
    run.send("output", OUT, pp=1, to=0)
    run.absent.add((0, 0))
    assert [f.kind for f in analyze(run.trace()) if f.kind.category is Category.MESSAGE] == []


def test_a_hop_and_a_label_name_both_messages() -> None:
    hop = _one(analyze(key_dropped_on_a_hop().trace()), K.MSG_KEYS_DIFFER)
    assert hop.message == ("rank 0 (pp0) received an `output` message from rank 2 with "
                           "`next_token_logprobs` (receive #1) and forwarded it to rank 1 (pp1) "
                           "without it (send #3)")
    assert hop.channel == "pp0->pp1"
    label = _one(analyze(mislabelled().trace()), K.MSG_WRONG_KIND)
    assert label.message == (
        "rank 0 (pp0) sent rank 1 (pp1) a message labelled `output` (send #6) that carries the "
        "keys of its `proxy` messages (`__msg_type__`, `hidden_states`, `residual`); rank 1's "
        "receive #6, which asked for a `proxy` message, stashed it as an `output` message")


def test_a_channel_that_cannot_be_paired_after_a_cut_says_why() -> None:
    (f,) = [f for f in analyze(cut(stash=True)().trace()) if f.ranks == (1,)]
    assert f.kind is K.MSG_CUT and f.severity is Severity.INFO
    assert f.message == ("rank 1 (pp1) kept its messages from send #40 and receive #0 on (the "
                         "older ones were rotated away or overwritten): a channel of it is not "
                         "paired (rank 1 stashed: its seqs are not the channel's)")


def test_the_analysis_hands_out_each_send_with_the_receive_it_reached() -> None:
    """The viewer shows a message beside its other end from this, never pairing by itself."""
    from pptrace.analyze.analyzer import analysis

    trace = clean_pp4().trace()
    pairs = analysis(trace).message_pairs
    sends = [MessageId(i, MessageOp.SEND, m.seq) for i, p in enumerate(trace.processes)
             for m in p.messages if m.op is MessageOp.SEND]
    assert set(pairs) == set(sends)  # every healthy send reached a receive
    assert len(sends) == 4 * 4  # 4 microbatches: 3 proxy hops and 1 output each
    for send, recv in pairs.items():
        sent = trace.processes[send.process].messages
        got = trace.processes[recv.process].messages
        m = next(x for x in sent if x.op is MessageOp.SEND and x.seq == send.seq)
        e = next(x for x in got if x.op is MessageOp.RECV and x.seq == recv.seq and
                 x.phase == "end")
        assert recv.op is MessageOp.RECV
        assert (m.peer, m.kind, m.keys) == (trace.processes[recv.process].rank.rank, e.kind,
                                            e.keys)


def test_each_send_s_receive_is_made_on_first_use_and_the_same_as_made_at_once() -> None:
    """A long run's trace holds a million pairs: the analysis hands them over as its own
    pairing, made into ``MessageId``s when a reader (the viewer, the Perfetto export) first
    asks; ``pptrace analyze`` never does."""
    from pptrace.analyze.analyzer import analysis
    from pptrace.analyze.pairs import SentTo

    trace = clean_pp4().trace()
    pairs = analysis(trace).message_pairs
    assert isinstance(pairs, SentTo)
    assert pairs._built is None and len(pairs) == 16  # counted without being made
    assert pairs._built is None
    made = {k: v for k, v in pairs.items()}
    assert pairs._built is not None and made == pairs == dict(pairs)
    assert all(pairs[k] is v and pairs.get(k) is v and k in pairs for k, v in made.items())
    assert pairs.get(MessageId(0, MessageOp.RECV, 0)) is None
    assert MessageId(0, MessageOp.RECV, 0) not in pairs
    again = analysis(trace).message_pairs  # compared before it was made: as a mapping
    assert again == made and made == again and again != {}


def test_the_summary_counts_a_failed_receive_apart_from_the_received() -> None:
    # A receive that failed at its timeout ended without a message: "received" counts only the
    # receives that returned one (a run once read "93 messages sent, 95 received").
    from pptrace.model.messages import MessageEvent
    from pptrace.model.records import RankInfo
    from pptrace.model.trace import ProcessTrace, Trace

    def rank(r: int) -> RankInfo:
        return RankInfo(rank=r, world_size=2, pp_rank=r, pp_size=2, tp_rank=0, tp_size=1,
                        host="n", pid=10 + r)

    send = MessageEvent(MessageOp.SEND, "end", 0, wall_ns=1_000, peer=1, kind="proxy",
                        keys=("h",))
    begin = MessageEvent(MessageOp.RECV, "begin", 0, wall_ns=900, peer=0,
                         expected_kind="proxy")
    got = begin._replace(phase="end", duration_ns=500, kind="proxy", keys=("h",))
    begin2 = begin._replace(seq=1, wall_ns=2_000)
    failed = begin2._replace(phase="end", duration_ns=9_000, error_type="RuntimeError")
    waiting = begin._replace(seq=2, wall_ns=20_000)
    trace = Trace((ProcessTrace(rank(0), (), None, ("r0",), (send,)),
                   ProcessTrace(rank(1), (), None, ("r1",),
                                (begin, got, begin2, failed, waiting))))
    line = render_text(trace, [], Severity.ERROR).splitlines()[0]
    assert "1 message sent, 1 received, 1 receive failed, 1 receive still waiting" in line
