"""One job is one run (issue 22): ranks of several nodes whose ``pptrace run`` drew their own run
ids are one job when they complement each other; otherwise the report says why they are apart."""

from __future__ import annotations

import dataclasses

from pptrace.analyze.analyzer import analyze
from pptrace.analyze.runs import join_runs
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.trace import ProcessTrace, Trace
from pptrace.report.text import render_text
from tests.helpers_analyze import Run, meta


def _dtype_fault() -> Trace:
    """pp 2 x tp 2: the last stage attaches float32, stage 0 extracts float16."""
    run = Run(pp_size=2, tp_size=2)
    for k in range(4):
        for tp in (0, 1):
            run.attach([meta("scores", (k + 1, 5))], pp=1, tp=tp)
        for tp in (0, 1):
            run.extract([meta("scores", (k + 1, 5), "float16")], tp=tp)
    return run.trace()


def _with_run(proc: ProcessTrace, run_id: str) -> ProcessTrace:
    stats = proc.stats and dataclasses.replace(proc.stats, run_id=run_id)
    return dataclasses.replace(proc, events=tuple(ev._replace(run_id=run_id) for ev in
                                                  proc.events), stats=stats)


def _per_node(trace: Trace) -> Trace:
    """Each PP stage on its own node, each node with its own run id."""
    return Trace(processes=tuple(_with_run(p, f"node{p.rank.pp_rank}") for p in trace.processes))


def test_two_nodes_with_their_own_run_ids_are_one_job_and_the_fault_is_found() -> None:
    one = analyze(_dtype_fault())
    nodes = _per_node(_dtype_fault())
    join = join_runs(nodes.processes)
    assert join.joined and join.runs == ("node0", "node1")
    found = analyze(nodes)
    assert [f.kind for f in found] == [f.kind for f in one]
    assert any(f.kind is FindingKind.DTYPE_MISMATCH and f.severity is Severity.ERROR
               for f in found)
    assert not any(f.kind is FindingKind.MISSING_RANK for f in found)
    report = render_text(nodes, found, Severity.ERROR)
    assert "runs node0, node1 joined as one job" in report.splitlines()[1]


def test_runs_that_share_a_global_rank_stay_apart_and_the_report_says_why() -> None:
    a = _dtype_fault()
    b = Trace(processes=tuple(_with_run(p, "other") for p in a.processes))
    both = Trace(processes=a.processes + b.processes)
    join = join_runs(both.processes)
    assert not join.joined and join.job_of.count("other") == 4
    report = render_text(both, analyze(both), Severity.ERROR)
    assert "analysed apart: global rank 0 appears in runs" in report
    assert "PPTRACE_RUN_ID" in report


def test_one_run_says_nothing_about_runs() -> None:
    trace = _dtype_fault()
    assert join_runs(trace.processes).reason == ""
    assert "joined" not in render_text(trace, analyze(trace), Severity.ERROR)
