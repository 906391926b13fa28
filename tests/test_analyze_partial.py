"""Partial traces are not protocol failures (issue 24): a healthy run whose trace has a hole in
it (counted drops, sequence gaps, a killed or still-running rank, a receive that timed out and
was retried, damaged data the reader skipped) gives no error-level finding; the hole is said
once, as an ``incomplete-trace`` warning, and what it touches is weakened and says why.
docs/partial-traces.md lists these promises with their tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.model.findings import Finding, FindingKind, Severity
from pptrace.model.messages import MessageOp
from pptrace.model.records import Direction
from pptrace.model.trace import InputProblem, Trace
from tests.helpers_analyze import Run, mt

K = FindingKind
SEC = 1_000_000_000
PROXY = [mt("hidden_states", (8, 16)), mt("residual", (8, 16))]


def output(k: int) -> list:
    """Step k's output message: its batch size varies, as real batches do."""
    n = 4 + k % 5
    return [mt("next_token_ids", (n,), "int64"), mt("scores", (n, 5))]


def healthy(steps: int = 16, pp: int = 2) -> Run:
    run = Run(pp_size=pp)
    for k in range(steps):
        for s in range(pp - 1):
            run.message("proxy", PROXY, frm=s, to=s + 1)
        run.message("output", output(k), frm=pp - 1, to=0, carries=k)
    return run


def drop(run: Run, pp: int, op: MessageOp, seq: int, phase: str = "end") -> None:
    """Take one message record out of a process's trace."""
    msgs = run.msgs[(pp, 0)]
    (m,) = [m for m in msgs if m.op is op and m.seq == seq and m.phase == phase]
    msgs.remove(m)


def errors(findings: list[Finding]) -> list[str]:
    return [f"{f.kind.value}: {f.message}" for f in findings if f.severity is Severity.ERROR]


def kinds(findings: list[Finding]) -> set[FindingKind]:
    return {f.kind for f in findings}


def test_one_send_dropped_and_counted_leaves_the_pairing_aligned() -> None:
    # On main: 15 message-shape-mismatch errors (the pairing walked on misaligned).
    run = healthy()
    drop(run, 1, MessageOp.SEND, 4)  # stage 1's fifth output
    run.set_stats(1, messages_dropped=1)
    findings = analyze(run.trace())
    assert errors(findings) == []
    assert K.MSG_SHAPE_MISMATCH not in kinds(findings)
    (hole,) = [f for f in findings if f.kind is K.INCOMPLETE_TRACE]
    assert hole.severity is Severity.WARNING
    assert hole.message.startswith("rank 1's trace is incomplete (1 message record dropped, "
                                   "1 missing send number)")
    (extra,) = [f for f in findings if f.kind is K.MSG_UNMATCHED_RECV]
    assert extra.severity is Severity.WARNING and "(receive #4)" in extra.message
    assert "this may be a hole in the trace, not in the run" in extra.message


def test_a_sequence_gap_alone_weakens_too() -> None:
    run = healthy()
    drop(run, 1, MessageOp.SEND, 9)  # no counter says so: the numbers do
    findings = analyze(run.trace())
    assert errors(findings) == []
    assert K.MSG_SHAPE_MISMATCH not in kinds(findings)
    assert "1 missing send number" in next(
        f.message for f in findings if f.kind is K.INCOMPLETE_TRACE)


def test_a_real_difference_across_a_hole_is_still_found() -> None:
    run = healthy()
    drop(run, 1, MessageOp.SEND, 3)
    run.set_stats(1, messages_dropped=1)
    run.send("output", [mt("scores", (4, 5))], pp=1, to=0)
    run.recv("output", [mt("scores", (4, 5), "float16", nbytes=40)], pp=0, frm=1)
    (f,) = [f for f in analyze(run.trace()) if f.kind is K.MSG_DTYPE_MISMATCH]
    assert f.severity is Severity.WARNING and "sent float32[4, 5], arrived float16[4, 5]" in (
        f.message)


def test_one_receive_end_dropped_is_no_hang() -> None:
    # On main: a message-hang error for a rank that made 24 more receives.
    run = healthy(13)
    ends = [m.seq for m in run.msgs[(0, 0)] if m.op is MessageOp.RECV and m.phase == "end"]
    drop(run, 0, MessageOp.RECV, ends[1])
    run.set_stats(0, messages_dropped=1)
    findings = analyze(run.trace())
    assert errors(findings) == []
    assert K.MSG_HANG not in kinds(findings)
    (hole,) = [f for f in findings if f.kind is K.INCOMPLETE_TRACE]
    assert f"the end of receive #{ends[1]} missing though later receives ran" in hole.message


def test_timeouts_retried_and_successful_are_no_deadlock() -> None:
    # On main: 4 message-hang errors naming "a cycle of waits (deadlock)".
    run = Run(pp_size=2)
    for k in range(4):
        run.clock += 10 * SEC
        run.recv("output", pp=0, frm=1, error=("RuntimeError", "Timed out waiting 1000ms"))
        run.recv("proxy", pp=1, frm=0, error=("RuntimeError", "Timed out waiting 1000ms"))
        run.message("proxy", PROXY, frm=0, to=1)
        run.message("output", output(k), frm=1, to=0, carries=k)
    findings = analyze(run.trace())
    assert errors(findings) == []
    hangs = [f for f in findings if f.kind is K.MSG_HANG]
    assert hangs and all(f.severity is Severity.WARNING for f in hangs)
    assert not any("deadlock" in f.message for f in hangs)
    assert "and was retried: its receive #1 began" in hangs[0].message


def test_a_timeout_not_retried_is_still_an_error() -> None:
    run = healthy(2)
    run.recv("output", pp=0, frm=1, error=("RuntimeError", "Timed out waiting 1000ms"))
    (f,) = [f for f in analyze(run.trace()) if f.kind is K.MSG_HANG]
    assert f.severity is Severity.ERROR


def test_a_sender_killed_within_a_flush_interval() -> None:
    # On main: message-unmatched-recv errors at full severity (the in-flight rule covered
    # sends only). The sender's last sends were made after its last flush: not in its trace.
    run = healthy(6)
    run.unfinished.add((1, 0))
    for k in (6, 7):
        run.recv("output", output(k), pp=0, frm=1)
    findings = analyze(run.trace())
    assert errors(findings) == []
    (f,) = [f for f in findings if f.kind is K.MSG_UNMATCHED_RECV]
    assert f.severity is Severity.INFO and f.cascade == 1
    assert "the send may not have been flushed" in f.message


def test_a_receive_with_no_send_from_a_finished_sender_is_still_an_error() -> None:
    run = healthy(6)
    run.recv("output", output(6), pp=0, frm=1)
    (f,) = [f for f in analyze(run.trace()) if f.kind is K.MSG_UNMATCHED_RECV]
    assert f.severity is Severity.ERROR


def test_a_healthy_run_read_while_it_runs() -> None:
    # On main: 6 unmatched-receive and 2 hang errors (what `view --follow` showed). Each rank's
    # trace is what it had flushed when it was read: two receives blocking right now, and
    # receives whose sends were made after their sender's last flush.
    run = healthy(8, pp=4)
    run.unfinished |= {(pp, 0) for pp in range(4)}
    run.send("proxy", PROXY, pp=0, to=1)
    run.wait("output", pp=0, frm=3)  # rank 0's trace ends here
    run.recv("proxy", PROXY, pp=1, frm=0)
    run.send("proxy", PROXY, pp=1, to=2)
    run.wait("proxy", pp=1, frm=0)  # rank 1's trace ends here
    run.recv("proxy", PROXY, pp=2, frm=1)  # rank 2's send after it is not flushed yet
    run.recv("proxy", PROXY, pp=3, frm=2)
    findings = analyze(run.trace())
    assert errors(findings) == []
    hangs = [f for f in findings if f.kind is K.MSG_HANG]
    assert len(hangs) == 2 and all("still running, or killed" in f.message for f in hangs)
    (early,) = [f for f in findings if f.kind is K.MSG_UNMATCHED_RECV]
    assert early.severity is Severity.INFO and early.channel == "pp2->pp3"


def test_damaged_data_the_reader_skipped_makes_the_trace_partial() -> None:
    # On main: a corrupt zstd frame mid-file read as a message-hang. The reader says which
    # file it skipped data in; whatever was there (here a receive's end, the final stats).
    run = healthy(10)
    ends = [m.seq for m in run.msgs[(0, 0)] if m.op is MessageOp.RECV and m.phase == "end"]
    drop(run, 0, MessageOp.RECV, ends[-1])
    run.unfinished.add((0, 0))
    base = run.trace()
    procs = tuple(p if p.rank.pp_rank else type(p)(p.rank, p.events, p.stats, ("r0.otlp.zst",),
                                                   p.messages) for p in base.processes)
    damaged = Trace(processes=procs, problems=(InputProblem(
        "r0.otlp.zst", None, "compressed data damaged in the zstd frame at byte 4,096; the "
        "rest of the file skipped"),))
    findings = analyze(damaged)
    assert errors(findings) == []
    (hole,) = [f for f in findings if f.kind is K.INCOMPLETE_TRACE]
    assert "damaged data skipped in r0.otlp.zst" in hole.message
    (hang,) = [f for f in findings if f.kind is K.MSG_HANG]
    assert hang.severity is Severity.WARNING and "the receive's end may be one of them" in (
        hang.message)


@pytest.mark.slow
def test_a_real_zstd_frame_corrupted_mid_file(tmp_path: Path) -> None:
    """The same, through the loader: a file of the sample pipeline (real message spans),
    compressed a frame a line, its middle frame's bytes flipped."""
    import importlib

    from pptrace.load.loader import load_paths
    from tests.helpers_partial import healthy_trace_dir

    zstandard = importlib.import_module("zstandard")
    src = healthy_trace_dir()
    assert errors(analyze(load_paths([str(src)]))) == []
    for f in sorted(src.iterdir()):
        lines = f.read_bytes().splitlines(keepends=True)
        frames = [zstandard.ZstdCompressor().compress(line) for line in lines]
        if f.name.startswith("pptrace-rank0"):
            mid = frames[len(frames) // 2]
            frames[len(frames) // 2] = mid[:8] + bytes(b ^ 0x5A for b in mid[8:])
        (tmp_path / (f.name + ".zst")).write_bytes(b"".join(frames))
    trace = load_paths([str(tmp_path)])
    assert trace.problems, "the corruption was not noticed"
    findings = analyze(trace)
    assert errors(findings) == []
    assert K.INCOMPLETE_TRACE in kinds(findings)


def test_a_rotated_trace_counts_segments_not_records() -> None:
    # A middle stage records messages only; its stats count the segments rotated away, not the
    # records: fewer records than it wrote is the cut, by design. A gap inside what it kept is
    # still a hole (it weakens, and no error comes of it).
    run = healthy(10, pp=3)
    run.set_stats(1, rotated_segments=3, messages_exported=500)
    assert analyze(run.trace()) == []
    drop(run, 1, MessageOp.SEND, 4)
    findings = analyze(run.trace())
    assert errors(findings) == []
    assert "1 missing send number" in next(
        f.message for f in findings if f.kind is K.INCOMPLETE_TRACE)


def test_extracts_before_a_cut_sender_window_are_not_judged() -> None:
    # On main: one unmatched-extract error per extract between the two ends' cuts once their
    # numberings drifted apart by more than a few calls (stage 0's extract numbers ran ahead
    # by 6 calls rotated away): 149 of them in a real rotated run.
    from tests.helpers_analyze import meta

    run = Run(pp_size=2)
    run.seqs[(0, 0, Direction.EXTRACT)] = 6
    for k in range(20):
        run.step([meta("scores", (2 + k % 3, 5))])
    for (pp, _), evs in run.events.items():
        first = 10 if pp == 1 else 9
        run.events[(pp, 0)] = [e for e in evs if e.seq >= first]
        run.set_stats(pp, rotated=len(evs) - len(run.events[(pp, 0)]), rotated_segments=2,
                      recorded=len(evs), exported=len(evs))
    findings = analyze(run.trace())
    assert errors(findings) == []
    assert [f.kind for f in findings] == [K.WINDOW_CUT]


def test_a_forward_dropped_at_a_stage_that_forwards_is_no_lost_key() -> None:
    # Stage 0 forwards each output around the ring; one forward's record dropped (counted)
    # shifted the walk that compares what a stage received with what it forwarded.
    run = Run(pp_size=3)
    for k in range(8):
        out = output(k) + ([mt("next_token_logprobs", (4,))] if k % 2 else [])
        run.message("proxy", PROXY, frm=0, to=1)
        run.message("proxy", PROXY, frm=1, to=2)
        run.message("output", out, frm=2, to=0, carries=k)
        run.message("output", out, frm=0, to=1)
        run.message("output", out, frm=1, to=2)
    forwards = [m.seq for m in run.msgs[(0, 0)] if m.op is MessageOp.SEND and m.kind == "output"]
    drop(run, 0, MessageOp.SEND, forwards[2])
    run.set_stats(0, messages_dropped=1)
    findings = analyze(run.trace())
    assert errors(findings) == []


@pytest.mark.parametrize(("after_ms", "bound_ms", "said"), [
    (5, 0, None),  # one clock: the sender went on after the receive ended: evidence
    (5, 20, "within the clocks' uncertainty (±20.000 ms) of when this receive ended"),
    (50, 20, None),  # beyond the bound: evidence
    (5, float("inf"), "0.005 s after this receive ended, on clocks"),
    (-5, 20, "before this receive ended"),
])
def test_a_sender_s_trace_going_on_after_the_receive_is_evidence_only_beyond_the_clocks(
        after_ms: int, bound_ms: float, said: str | None) -> None:
    # Before: decided on the aligned times alone, so a sender whose trace stopped a few ms
    # "after" the receive on a clock aligned within ±20 ms made the receive an error.
    from types import SimpleNamespace

    from pptrace.analyze.holes import Holes
    from pptrace.analyze.message_align import unflushed
    from pptrace.model.messages import MessageEvent
    from pptrace.model.records import RankInfo

    ended = 10 * SEC
    sender = SimpleNamespace(index=0, rank=RankInfo(rank=1, pp_rank=1, pp_size=2),
                             last_ns=lambda: ended + after_ms * 1_000_000)
    receiver = SimpleNamespace(index=1)
    e = MessageEvent(op=MessageOp.RECV, phase="end", kind="output", peer=1, seq=3,
                     wall_ns=ended - 1_000_000, duration_ns=1_000_000)
    holes = [Holes(final=False), Holes()]
    note = unflushed(holes, sender, receiver, e,  # type: ignore[arg-type]
                     lambda a, b: bound_ms * 1_000_000)
    if said is None:
        assert note == ""
    else:
        assert said in note and "the send may not have been flushed" in note
    holes[0] = Holes(final=True)  # a sender that shut down counted everything: evidence
    assert unflushed(holes, sender, receiver, e,  # type: ignore[arg-type]
                     lambda a, b: bound_ms * 1_000_000) == ""
