"""Skewed clocks change no finding: every sample fault's real trace, its last stage moved to a
host of its own whose clock runs ±20 ms, ±250 ms and ±5 s off, gives the same findings and the
same first divergence as with no skew, and no receive ends before its send began (in the aligned
trace, and in the Perfetto export drawn from it).

One real gloo run per fault (``_trace``, once a session); the skews are applied in-process, as
the skewed host would have written them: every wall-clock field of its processes' events,
messages and stats moves, the monotonic clock does not (``tests/helpers_clocks.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from pptrace_samples.faults import ALL_FAULTS, MESSAGE_FAULTS

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import Severity
from pptrace.model.trace import Trace
from pptrace.report.perfetto import MESSAGE_FLOW, to_chrome_trace
from tests.helpers_clocks import MS, arrows_back, backwards, first, on_hosts, said, skewed
from tests.helpers_core import scratch
from tests.helpers_samples import run_sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SKEWS = (20 * MS, -20 * MS, 250 * MS, -250 * MS, 5000 * MS, -5000 * MS)

#: Run options where a fault needs more than the default 2 ranks and 6 steps (as the message
#: tests run them): a short gloo timeout where a rank waits for a peer that stopped.
_OPTIONS: dict[str, dict[str, Any]] = {
    "key-dropped": {"ranks": 3},
    "recv-hangs": {"steps": 4},
}


@functools.cache
def _trace(fault: str | None) -> Trace:
    """One real run of the sample pipeline with ``fault``, loaded (once a session)."""
    options: dict[str, Any] = {"ranks": 2, "steps": 6, "comm_timeout": 4.0}
    if fault is not None:
        tp = ALL_FAULTS[fault].needs_tp
        options.update(ranks=2 * tp, tp=tp, fault=fault)
        options.update(_OPTIONS.get(fault, {}))
    out = scratch(f"pptrace-clocks-{fault or 'healthy'}-")
    run_sample(out, **options)
    trace = load_paths([out])
    assert not trace.problems, trace.problems
    return trace


def _last_stage(trace: Trace) -> set[int]:
    last = max(p.rank.pp_rank or 0 for p in trace.processes)
    return {i for i, p in enumerate(trace.processes) if p.rank.pp_rank == last}


@pytest.mark.parametrize("fault", sorted(ALL_FAULTS))
def test_a_hosts_clock_skew_changes_no_finding(fault: str) -> None:
    one_host = _trace(fault)
    trace = on_hosts(one_host, lambda p: f"node{p.rank.pp_rank}")
    base = analysis(trace)
    # Two hosts' clocks are aligned within the pairs' bounds (a few ms on a loaded machine):
    # two times closer than that are "within the clocks' uncertainty", the same whatever the
    # skew; on one host they have an order. So the two hosts name every kind the one host
    # names, and any other they name is a warning that says the clocks cannot order it (a send
    # the one host saw just after a receiver stopped, say). Never an error the one host lacks.
    single = {f.kind for f in analysis(one_host).findings}
    assert single <= {f.kind for f in base.findings}, (said(base), single)
    for f in base.findings:
        assert f.kind in single or (f.severity <= Severity.WARNING
                                    and "the clocks' uncertainty" in f.message), f
    assert ALL_FAULTS[fault].finding in {f.kind.value for f in base.findings}, said(base)
    moved = _last_stage(trace)
    for skew in SKEWS:
        late = skewed(trace, moved, skew)
        result = analysis(late)
        where = f"{fault}, host node{max(p.rank.pp_rank or 0 for p in trace.processes)} " \
                f"{skew / MS:+.0f} ms"
        assert result.clocks.applied and result.clocks.consistent, where
        assert result.clocks.by == "host", where
        assert said(result) == said(base), where
        assert first(result) == first(base), where
        assert backwards(result.trace, result.message_pairs) == [], where
        doc = to_chrome_trace(result.trace, result.findings, pairs=result.pairs,
                              message_pairs=result.message_pairs)
        assert doc["otherData"]["flows"][MESSAGE_FLOW] == len(result.message_pairs), where
        assert arrows_back(doc, MESSAGE_FLOW) == [], where


def test_the_skew_is_real_without_alignment() -> None:
    """The skewed traces above do have receives that end before their sends (raw times)
    wherever the skew outruns the run's quickest message that way (on a loaded machine none
    may be quicker than 20 ms): the alignment, not the data, makes them causal."""
    trace = on_hosts(_trace(None), lambda p: f"node{p.rank.pp_rank}")
    pairs = analysis(trace).message_pairs
    moved = _last_stage(trace)
    ends = [{(m.op, m.seq): m for m in p.messages if m.phase == "end"} for p in trace.processes]
    quickest = {True: float("inf"), False: float("inf")}  # from the moved stage, or to it
    for send, recv in pairs.items():
        s = ends[send.process][(send.op, send.seq)]
        r = ends[recv.process][(recv.op, recv.seq)]
        took = r.wall_ns + max(r.duration_ns, 0) - s.wall_ns
        quickest[send.process in moved] = min(quickest[send.process in moved], took)
    assert max(quickest.values()) < 250 * MS, quickest
    for skew in SKEWS:  # ahead, its sends look later; behind, its receives look earlier
        back = bool(backwards(skewed(trace, moved, skew), pairs))
        assert back is (quickest[skew > 0] < abs(skew)), (skew, quickest)


def test_a_healthy_run_is_clean_under_one_hostname_and_equal_pids() -> None:
    """Containers: every node reports one hostname and the same pid; each process still has its
    own instance id, and its clock may be off."""
    trace = on_hosts(_trace(None), lambda p: "node", lambda p: 7)
    assert len({p.key for p in trace.processes}) == len(trace.processes) == 2
    assert analysis(trace).findings == ()
    for skew in SKEWS:
        late = skewed(trace, _last_stage(trace), skew)
        result = analysis(late)
        assert result.findings == (), (skew, said(result))
        # A skew no message outruns (none quicker than 20 ms on a loaded machine) contradicts
        # one clock nowhere: the host keeps one, as it may (the skew is within the bounds).
        if backwards(late, result.message_pairs):
            assert result.clocks.by == "process" and result.clocks.applied, skew
        else:
            assert result.clocks.by == "host" and not result.clocks.applied, skew
        assert backwards(result.trace, result.message_pairs) == [], skew


def test_every_message_fault_is_covered() -> None:
    assert set(MESSAGE_FAULTS) <= set(ALL_FAULTS)
