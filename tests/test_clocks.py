"""Clock offsets from causal pairs (pptrace.analyze.clocks): NTP-style bounds from two-way
exchanges, a one-way process moved only as far as causality needs, contradictions refused."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from pptrace.analyze.aligned import Clocks, Unit
from pptrace.analyze.analyzer import analysis
from pptrace.analyze.clocks import Before, Offset, estimate, message_constraints
from pptrace.model.findings import Finding, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageOp
from pptrace.model.records import Direction
from pptrace.model.trace import Trace
from pptrace.report.perfetto import MESSAGE_FLOW, to_chrome_trace
from pptrace.report.text import render_text, to_json
from tests.helpers_analyze import Run, meta, mt
from tests.helpers_clocks import MS, arrows_back, backwards, on_hosts, skewed


def _exchanges(skew_ns: int, n: int = 20, latency: int = MS) -> list[Before]:
    """Process 1's clock runs ``skew_ns`` ahead; messages both ways, 1 ms each way."""
    rng = random.Random(7)
    out = []
    t = 10_000 * MS
    for _ in range(n):
        t += rng.randrange(MS, 5 * MS)
        out.append(Before(0, t, 1, t + latency + skew_ns))  # 0 -> 1
        t += rng.randrange(MS, 5 * MS)
        out.append(Before(1, t + skew_ns, 0, t + latency))  # 1 -> 0
    return out


@pytest.mark.parametrize("skew", [0, 20 * MS, -20 * MS, 250 * MS, -250 * MS, 5000 * MS, -5000 * MS])
def test_a_two_way_exchange_recovers_the_skew_within_its_bounds(skew: int) -> None:
    found = estimate(_exchanges(skew), 2)
    one = found.offsets[1]
    assert found.consistent and one.certain
    assert one.low_ns <= skew <= one.high_ns
    assert abs(one.offset_ns - skew) <= MS  # within the one-way latency
    for c in _exchanges(skew):  # after alignment no receive ends before its send began
        assert found.aligned(c.a, c.a_ns) <= found.aligned(c.b, c.b_ns)


def test_one_way_messages_move_a_clock_only_as_far_as_causality_needs() -> None:
    behind = [Before(0, 100 * MS, 1, 40 * MS)]  # 1 received 60 ms "before" 0 sent
    found = estimate(behind, 2)
    assert not found.offsets[1].certain
    assert found.offsets[1].offset_ns == -60 * MS
    assert found.aligned(0, 100 * MS) <= found.aligned(1, 40 * MS)
    assert estimate([Before(0, 10, 1, 50)], 2).offsets[1].offset_ns == 0  # already causal


def test_contradicting_constraints_apply_nothing() -> None:
    found = estimate([Before(0, 100, 1, 0), Before(1, 100, 0, 0)], 2)
    assert not found.consistent and found.aligned(1, 5) == 5


def test_bounds_chain_through_a_third_process() -> None:
    skew = 250 * MS
    via = [Before(c.a, c.a_ns, c.b, c.b_ns) for c in _exchanges(0)]  # 0 <-> 1 agree
    via += [Before(c.a + 1, c.a_ns, c.b + 1, c.b_ns) for c in _exchanges(skew)]  # 1 <-> 2
    found = estimate(via, 3)
    assert found.offsets[2].certain and abs(found.offsets[2].offset_ns - skew) <= 2 * MS


def _shifted(trace: Trace, process: int, skew: int) -> Trace:
    """What that process's host would have written with its clock ``skew`` ahead."""
    procs = list(trace.processes)
    p = procs[process]
    procs[process] = dataclasses.replace(
        p, events=tuple(ev._replace(start_ns=ev.start_ns + skew) for ev in p.events),
        messages=tuple(m._replace(wall_ns=m.wall_ns + skew) for m in p.messages))
    return Trace(processes=tuple(procs))


@pytest.mark.parametrize("skew", [20 * MS, -250 * MS, 5000 * MS])
def test_the_analyzers_message_pairs_give_the_offset_of_a_shifted_host(skew: int) -> None:
    run = Run(pp_size=2)
    for _ in range(6):
        run.message("proxy", [mt("hidden")], frm=0, to=1)
        run.message("output", [mt("next_token_ids", (8,), "int64")], frm=1, to=0)
    trace = _shifted(run.trace(), 1, skew)
    pairs = analysis(trace).message_pairs
    constraints = message_constraints(trace, pairs)
    assert len(constraints) == 12
    found = estimate(constraints, len(trace.processes))
    one = found.offsets[1]
    assert one.certain and one.low_ns <= skew <= one.high_ns
    for c in constraints:
        assert found.aligned(c.a, c.a_ns) <= found.aligned(c.b, c.b_ns)


def _exchange(pp_size: int = 2, rounds: int = 4) -> Run:
    """A healthy ring: proxies forward, outputs back to stage 0."""
    run = Run(pp_size=pp_size)
    for _ in range(rounds):
        for stage in range(pp_size):
            kind = "output" if stage == pp_size - 1 else "proxy"
            run.message(kind, [mt("hidden")], frm=stage, to=(stage + 1) % pp_size)
    return run


def _two_hosts(trace: Trace) -> Trace:
    return on_hosts(trace, lambda p: f"node{p.rank.pp_rank}")


@pytest.mark.parametrize("skew", [0, 20 * MS, -250 * MS, 5000 * MS])
def test_the_analysis_judges_and_hands_on_the_trace_on_one_clock(skew: int) -> None:
    trace = skewed(_two_hosts(_exchange().trace()), {1}, skew)
    assert bool(backwards(trace, analysis(trace).message_pairs)) is (skew != 0)
    result = analysis(trace)
    assert result.clocks.applied and result.clocks.consistent
    assert result.clocks.by == "host" and result.clocks.source == "message pair"
    assert result.clocks.offsets[0] == 0 and abs(result.clocks.offsets[1] - skew) < MS
    assert backwards(result.trace, result.message_pairs) == []
    doc = to_chrome_trace(result.trace, result.findings, pairs=result.pairs,
                          message_pairs=result.message_pairs)
    assert doc["otherData"]["flows"][MESSAGE_FLOW] == 8
    assert arrows_back(doc, MESSAGE_FLOW) == []
    # the monotonic clock, which orders a process's own records, is left alone
    assert [m.mono_ns for m in result.trace.processes[1].messages] == [
        m.mono_ns for m in trace.processes[1].messages]
    assert result.findings == ()


def test_the_report_says_the_offsets_it_applied() -> None:
    base = _two_hosts(_exchange().trace())
    for skew in (0, 250 * MS):
        result = analysis(skewed(base, {1}, skew))
        report = render_text(result.trace, result.findings, Severity.ERROR,
                             clocks=result.clocks)
        assert ("clock offsets applied, from 8 message pairs, against host node0: host node1 "
                f"+{skew // MS}.000 ms (±0.002 ms); times are on host node0's clock") in report
        doc = to_json(result.trace, list(result.findings), Severity.ERROR, clocks=result.clocks)
        assert doc["clocks"]["applied"] is True
        assert doc["clocks"]["offsets_ns"] == [0, result.clocks.offsets[1]]
        assert [c["name"] for c in doc["clocks"]["clocks"]] == ["host node0", "host node1"]
    one_host = analysis(_exchange().trace())
    assert render_text(one_host.trace, one_host.findings, Severity.ERROR,
                       clocks=one_host.clocks).count("clock") == 0


def test_one_host_name_with_two_clocks_is_aligned_process_by_process() -> None:
    """Containers on two machines that report one hostname: the host's pairs contradict each
    other, so each process gets its own clock."""
    result = analysis(skewed(_exchange().trace(), {1}, -250 * MS))
    assert result.clocks.by == "process" and result.clocks.applied
    assert backwards(result.trace, result.message_pairs) == [] and result.findings == ()
    report = render_text(result.trace, result.findings, Severity.ERROR, clocks=result.clocks)
    assert ("clock offsets applied per process (one host name, several clocks), from 8 message "
            "pairs, against rank 0 (pp 0/2, tp 0): rank 1 (pp 1/2, tp 0) -250.000 ms") in report


def test_pairs_that_contradict_each_other_apply_nothing_and_say_so() -> None:
    run = _exchange()
    trace = run.trace()
    # rank 1's clock stepped back 1 s half way: no single offset fits its messages
    p = trace.processes[1]
    half = len(p.messages) // 2
    stepped = p.messages[:half] + tuple(m._replace(wall_ns=m.wall_ns - 1000 * MS)
                                        for m in p.messages[half:])
    trace = Trace(processes=(trace.processes[0], dataclasses.replace(p, messages=stepped)))
    result = analysis(trace)
    assert not result.clocks.consistent and not result.clocks.applied
    report = render_text(result.trace, result.findings, Severity.ERROR, clocks=result.clocks)
    assert "clocks not aligned: the 8 message pairs contradict each other" in report


def test_attach_extract_pairs_align_a_trace_without_messages() -> None:
    run = Run(pp_size=2)
    for k in range(4):
        run.step([meta("scores", (k + 1, 5))])
    trace = _two_hosts(run.trace())
    late = skewed(trace, {0}, -300 * MS)  # stage 0 extracts "before" the attach
    result = analysis(late)
    assert result.clocks.source == "attach/extract pair" and result.clocks.applied
    assert result.findings == analysis(trace).findings == ()
    for r in result.pairs.runs:
        for a, e in r.seqs():
            attach = next(ev for ev in result.trace.processes[r.attach_process].events
                          if ev.seq == a and ev.direction is Direction.ATTACH)
            extract = next(ev for ev in result.trace.processes[r.extract_process].events
                           if ev.seq == e and ev.direction is Direction.EXTRACT)
            assert attach.start_ns <= extract.end_ns


def _in_flight(skew: int) -> Trace:
    """Stage 0 sends a last proxy after stage 1's trace stopped (stage 1 exited): in flight."""
    run = _exchange()
    run.send("proxy", [mt("hidden")], pp=0, to=1)
    run.set_stats(0)
    trace = _two_hosts(run.trace())
    stop = max(m.wall_ns + m.duration_ns for m in trace.processes[1].messages)
    p = trace.processes[1]
    trace = Trace(processes=(trace.processes[0], dataclasses.replace(
        p, stats=dataclasses.replace(p.stats, time_ns=stop))))
    return skewed(trace, {1}, skew)


@pytest.mark.parametrize("skew", [-5000 * MS, -250 * MS, -20 * MS, 20 * MS, 250 * MS,
                                  5000 * MS])
def test_a_send_in_flight_stays_in_flight_whatever_the_skew(skew: int) -> None:
    assert analysis(_in_flight(0)).findings == ()
    assert analysis(_in_flight(skew)).findings == ()


def _hang(skew: int) -> Trace:
    """Stage 1 waits for a proxy stage 0 never sends; stage 0 sent its last one 2 ms before."""
    run = _exchange()
    run.send("proxy", [mt("hidden")], pp=0, to=1)
    run.clock += 2 * MS
    run.wait("proxy", pp=1, frm=0)
    run.unfinished.add((1, 0))
    return skewed(_two_hosts(run.trace()), {1}, skew)


@pytest.mark.parametrize("skew", [-5000 * MS, -250 * MS, 20 * MS, 5000 * MS])
def test_a_hang_report_says_before_whatever_the_skew(skew: int) -> None:
    (plain,) = [f.message for f in analysis(_hang(0)).findings
                if f.kind is FindingKind.MSG_HANG]
    assert "(send #4, 0.002 s before the wait began)" in plain, plain
    (shifted,) = [f.message for f in analysis(_hang(skew)).findings
                  if f.kind is FindingKind.MSG_HANG]
    assert shifted == plain


@pytest.mark.parametrize("skew", [20 * MS, 250 * MS, -20 * MS, -250 * MS])
def test_one_host_name_no_messages_either_clock_ahead_stays_clean(skew: int) -> None:
    """One host name on two machines, no message layer: the same-host hint (an extract that
    began before its attach is not its partner) must not pair on the raw times of two clocks."""
    run = Run(pp_size=2)
    for k in range(4):
        run.step([meta("scores", (k + 1, 5))])
    assert analysis(run.trace()).findings == ()
    result = analysis(skewed(run.trace(), {1}, skew))
    assert result.findings == ()
    assert len(list(result.pairs.runs[0].seqs())) == 4
    if skew > 0:  # the last stage ahead: its attaches "after" their extracts on one clock
        assert result.clocks.by == "process" and result.clocks.applied
        assert result.clocks.source == "attach/extract pair"


def _hang_at(skew: int, gap_ns: int) -> Trace:
    """Stage 1 waits for a proxy that stage 0 never sends; stage 0's last send began
    ``gap_ns`` (plus the 1 µs of the record between) before the wait; stage 1's host
    ``skew`` ahead."""
    run = _exchange()
    run.send("proxy", [mt("hidden")], pp=0, to=1)
    run.clock += gap_ns
    run.wait("proxy", pp=1, frm=0)
    run.unfinished.add((1, 0))
    return skewed(_two_hosts(run.trace()), {1}, skew)


def _hang_said(trace: Trace) -> str:
    (said,) = [f.message for f in analysis(trace).findings if f.kind is FindingKind.MSG_HANG]
    return said


@pytest.mark.parametrize("skew", [0, -5000 * MS, -250 * MS, 20 * MS, 5000 * MS])
def test_two_hosts_times_closer_than_the_clocks_uncertainty_have_no_order(skew: int) -> None:
    """The ring's messages bound node1's clock to ±2.3 µs: a send 1 µs before the wait is
    within it (which came first is not known), one 2 ms before is not, whatever the skew."""
    result = analysis(_hang_at(skew, 0))
    assert result.clocks.uncertainty_ns(0, 1) == 2300 == result.clocks.uncertainty_ns(1, 0)
    near = _hang_said(_hang_at(skew, 0))
    assert ("(send #4, within the clocks' uncertainty (±0.002 ms) of when the wait began); "
            "its trace ends with final stats within the clocks' uncertainty (±0.002 ms) of "
            "when the wait began") in near, near
    assert not re.search(r" s (before|after) ", near), near
    (lost,) = [f for f in result.findings if f.kind is FindingKind.MSG_NEVER_RECEIVED]
    assert ("(its trace stops within the clocks' uncertainty (±0.002 ms) of when the send "
            "began: it may have been in flight)") in lost.message
    far = _hang_said(_hang_at(skew, 2 * MS))
    assert "(send #4, 0.002 s before the wait began)" in far, far
    assert "its trace ends with final stats 0.002 s before the wait began" in far, far
    (lost,) = [f for f in analysis(_hang_at(skew, 2 * MS)).findings
               if f.kind is FindingKind.MSG_NEVER_RECEIVED]
    assert "(its trace goes on after the send)" in lost.message, lost.message


def test_one_clock_orders_any_two_times() -> None:
    """On one host the processes share a clock: 1 µs apart is an order."""
    run = _exchange()
    run.send("proxy", [mt("hidden")], pp=0, to=1)
    run.wait("proxy", pp=1, frm=0)
    run.unfinished.add((1, 0))
    result = analysis(on_hosts(run.trace(), lambda p: "node0"))
    assert result.clocks.uncertainty_ns(0, 1) == 0
    (said,) = [f.message for f in result.findings if f.kind is FindingKind.MSG_HANG]
    assert "(send #4, 0.000 s before the wait began)" in said, said


@pytest.mark.parametrize("skew", [0, 5000 * MS])
def test_a_clock_bounded_one_way_says_its_times_are_not_aligned(skew: int) -> None:
    """Messages one way only bound node1's clock on one side: the report gives the times as
    they are, and says the clocks are not aligned both ways."""
    run = Run(pp_size=2)
    for _ in range(3):
        run.message("proxy", [mt("hidden")], frm=0, to=1)
    run.wait("proxy", pp=1, frm=0)
    run.unfinished.add((1, 0))
    trace = skewed(_two_hosts(run.trace()), {1}, skew)
    assert analysis(trace).clocks.uncertainty_ns(0, 1) == float("inf")
    said = _hang_said(trace)
    assert (f"(send #2, {skew / 1e9:.3f} s before the wait began, on clocks the pairs do not "
            "align both ways)") in said, said


def _two_errors(apart_ns: int) -> list[Finding]:
    """Two errors, no consequence of each other: one on process 0, one on process 1
    ``apart_ns`` later."""
    t = 10_000 * MS
    return [Finding(FindingKind.DTYPE_MISMATCH, Severity.ERROR, "one", ranks=(0,), time_ns=t,
                    messages=(MessageId(0, MessageOp.SEND, 3),)),
            Finding(FindingKind.MSG_HANG, Severity.ERROR, "two", ranks=(1,), time_ns=t + apart_ns,
                    messages=(MessageId(1, MessageOp.RECV, 4),))]


def _clocks(bound_ns: float) -> Clocks:
    """Process 1 on a clock of its own, aligned to process 0's within ±``bound_ns``."""
    return Clocks((0, 0), True, (Unit("host a", (0,), Offset(0, 0, 0, 0, True)),
                                 Unit("host b", (1,), Offset(1, 0, -bound_ns, bound_ns,
                                                             bound_ns < float("inf")))))


@pytest.mark.parametrize(("apart", "bound", "tie"), [
    (10 * MS, 15 * MS, True), (-10 * MS, 15 * MS, True), (20 * MS, 15 * MS, False),
    (10 * MS, 0, False), (10 * MS, float("inf"), False)])
def test_the_first_divergence_says_when_the_clocks_cannot_tell_it_came_first(
        apart: int, bound: float, tie: bool) -> None:
    """Two errors on two clocks closer than the clocks' uncertainty: the report still opens on
    the earlier by the aligned times, and says which came first is not known. Further apart,
    or on one clock, it says nothing more; a clock not aligned is the clock line's to say."""
    findings = sorted(_two_errors(apart), key=lambda f: f.time_ns or 0)
    trace = _two_hosts(_exchange().trace())
    report = render_text(trace, findings, Severity.ERROR, clocks=_clocks(bound))
    first = findings[0]
    other = findings[1]
    unsure = (f"; within the clocks' uncertainty (±15.000 ms) of the {other.kind.value} on "
              f"rank {other.ranks[0]}: which came first is not known")
    head = f"First divergence (error, {first.kind.value}{unsure if tie else ''}):"
    assert head in report, report


@pytest.mark.parametrize("skew", [0, 20 * MS, -250 * MS])
def test_a_send_just_after_the_receiver_stopped_is_said_within_the_clocks_uncertainty(
        skew: int) -> None:
    """Stage 0 sends a proxy 0.8 µs after stage 1's trace stopped. One clock orders them (in
    flight: no finding). Two hosts' clocks, bound to ±2.3 µs, cannot: a warning says it may have
    been in flight, as for one just before. Dropped as in flight before, so that a send the one
    host saw *before* the stop (an error there) could vanish on two hosts."""
    run = _exchange()
    run.clock -= 1500  # 0.8 µs after stage 1's last record (its records end 2.3 µs before)
    run.send("proxy", [mt("hidden")], pp=0, to=1)
    trace = run.trace()
    assert analysis(trace).findings == ()
    result = analysis(skewed(_two_hosts(trace), {1}, skew))
    (lost,) = result.findings
    assert lost.kind is FindingKind.MSG_NEVER_RECEIVED and lost.severity is Severity.WARNING
    assert ("(its trace stops within the clocks' uncertainty (±0.002 ms) of when the send "
            "began: it may have been in flight)") in lost.message, lost.message
    far = _exchange()
    far.clock += 2 * MS  # surely after the stop: in flight on both
    far.send("proxy", [mt("hidden")], pp=0, to=1)
    assert analysis(skewed(_two_hosts(far.trace()), {1}, skew)).findings == ()
