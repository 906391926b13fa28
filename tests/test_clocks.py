"""Clock offsets from causal pairs (pptrace.analyze.clocks): NTP-style bounds from two-way
exchanges, a one-way process moved only as far as causality needs, contradictions refused."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.clocks import Before, estimate, message_constraints
from pptrace.model.findings import Severity
from pptrace.model.trace import Trace
from pptrace.report.text import render_text
from tests.helpers_analyze import Run, mt

MS = 1_000_000


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


def test_the_report_says_the_offset_of_a_shifted_host_and_nothing_without_skew() -> None:
    run = Run(pp_size=2)
    for _ in range(4):
        run.message("proxy", [mt("hidden")], frm=0, to=1)
        run.message("output", [mt("next_token_ids", (8,), "int64")], frm=1, to=0)
    for skew, said in ((0, False), (250 * MS, True)):
        trace = _shifted(run.trace(), 1, skew)
        result = analysis(trace)
        clocks = estimate(message_constraints(trace, result.message_pairs), 2)
        report = render_text(trace, result.findings, Severity.ERROR, clocks=clocks)
        assert ("clock offsets against rank 0" in report) is said
        if said:
            assert "+250." in report or "+249." in report
