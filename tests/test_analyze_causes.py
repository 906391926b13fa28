"""Root cause first: a consequence names its cause, follows it, and is shown under it.

When the last stage's TP ranks attach different payloads, stage 0 re-assembles a mix of their
slices, so each channel's pair also differs in content: those content mismatches follow from
the TP disagreement, and the report and the viewer (through ``pptrace.report.groups``) list
them under it, never above it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.model.findings import FindingKind, Severity
from pptrace.model.records import Direction
from pptrace.report.groups import consequences, first_divergence, kind_groups
from pptrace.report.text import render_text, to_json
from tests.helpers_analyze import Run, meta

K = FindingKind


def _mixed() -> Run:
    """Two TP ranks disagree from microbatch 1 on; stage 0 receives a mix on both channels."""
    run = Run(pp_size=2, tp_size=2)
    run.step([meta("entropy", (8,), fingerprint="same")])
    for k in range(3):
        run.attach([meta("entropy", (8,), fingerprint=f"a{k}")], tp=0)
        run.attach([meta("entropy", (8,), fingerprint=f"b{k}")], tp=1)
        run.extract([meta("entropy", (8,), fingerprint=f"mix{k}")], tp=0)
        run.extract([meta("entropy", (8,), fingerprint=f"mix{k}")], tp=1)
    return run


def test_content_mismatches_follow_their_tp_disagreement() -> None:
    findings = analyze(_mixed().trace())
    assert [(f.kind, f.channel) for f in findings] == [
        (K.TP_DISAGREE, "pp1/tp0~tp1"),
        (K.CONTENT_MISMATCH, "pp0<-pp1/tp0"),
        (K.CONTENT_MISMATCH, "pp0<-pp1/tp1"),
    ]
    cause = findings[0]
    assert cause.cause is None
    assert all(f.cause is cause for f in findings[1:])
    assert all("(follows from tp-disagree on pp1/tp0~tp1)" in f.message for f in findings[1:])
    assert cause.cascade == 2


def test_the_tp_disagreement_names_both_ranks_attaches() -> None:
    run = _mixed()
    trace = run.trace()
    (cause, *_) = analyze(trace)
    left, right = (trace.event(ref) for ref in cause.events)
    assert [e.direction for e in (left, right)] == [Direction.ATTACH, Direction.ATTACH]
    assert (left.rank.tp_rank, right.rank.tp_rank) == (0, 1)
    assert left.seq == right.seq == cause.microbatch == 1


def test_groups_leave_consequences_under_their_cause() -> None:
    findings = analyze(_mixed().trace())
    groups = kind_groups(findings)
    assert [(g.kind, g.findings, g.occurrences) for g in groups] == [(K.TP_DISAGREE, (0,), 3)]
    assert consequences(findings) == {0: (1, 2)}
    assert first_divergence(findings) == 0


def test_text_report_prints_consequences_under_the_cause() -> None:
    trace = _mixed().trace()
    findings = analyze(trace)
    text = render_text(trace, findings, Severity.ERROR)
    lines = text.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("ERROR tp-disagree:")))
    assert lines[head + 2].startswith("    then content-mismatch [mb 1, pp0<-pp1/tp0, ")
    assert lines[head + 3].startswith("    then content-mismatch [mb 1, pp0<-pp1/tp1, ")
    assert not any(line.startswith("ERROR content-mismatch") for line in lines)
    assert "First divergence (error, tp-disagree):" in text


def test_json_names_the_cause_by_index() -> None:
    trace = _mixed().trace()
    doc = to_json(trace, analyze(trace), Severity.ERROR)
    assert [f["cause"] for f in doc["findings"]] == [None, 0, 0]


def test_a_content_change_before_any_tp_disagreement_is_its_own_finding() -> None:
    run = Run(pp_size=2, tp_size=2)
    run.attach([meta("e", (8,), fingerprint="a")], tp=0)
    run.attach([meta("e", (8,), fingerprint="a")], tp=1)
    run.extract([meta("e", (8,), fingerprint="changed")], tp=0)
    run.extract([meta("e", (8,), fingerprint="a")], tp=1)
    (f,) = analyze(run.trace())
    assert f.kind is K.CONTENT_MISMATCH and f.cause is None


@pytest.mark.slow
def test_the_duplicate_fault_lists_the_peer_s_hang_under_the_attach_that_raised(
        tmp_path: Path) -> None:
    # Rank 1's attach raises; its engine stops, so rank 0 waits for an output that never
    # comes. The hang follows from the error: it was a second top-level error beside it.
    from pptrace.load.loader import load_paths
    from tests.helpers_samples import run_sample

    out = str(tmp_path / "duplicate")
    run_sample(out, ranks=2, steps=8, fault="duplicate")
    findings = analyze(load_paths([out]))
    roots = [f for f in findings if f.cause is None and f.severity >= Severity.ERROR]
    assert [f.kind for f in roots] == [FindingKind.ATTACH_DUPLICATE], [
        (f.kind.value, f.cause) for f in findings]
    hangs = [f for f in findings if f.kind is FindingKind.MSG_HANG]
    assert hangs and all(f.cause is roots[0] for f in hangs)
