"""Partial windows (issue 17, item 4): a process whose early history is gone (rotated away, a
flight ring, a time window) gives no orphan, unmatched extract or missing rank at the cut, one
``window-cut`` info per channel saying what is not covered, and every finding inside the window.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.findings import Finding, FindingKind, Severity
from pptrace.model.records import RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import Trace
from pptrace.report.text import render_text
from tests.helpers_analyze import Run, meta, write_run

K = FindingKind


def _payload(k: int, dtype: str = "float32") -> list[TensorMeta]:
    """Microbatch ``k``'s payload: the batch varies, as in a server."""
    return [meta("topk", (k % 7 + 1, 4), dtype), meta("entropy", (k % 7 + 1,))]


def _healthy(run: Run, n: int) -> Run:
    for k in range(n):
        run.step(_payload(k))
    return run


def _cut(run: Run, pp: int, tp: int, first: int, *, segments: int = 3,
         flight: bool = False) -> None:
    """Drop the process's calls numbered below ``first`` (both directions), as rotation or a
    flight ring would, and give it the final stats that say so."""
    events = run.events.get((pp, tp), [])
    kept = [e for e in events if e.seq >= first]
    run.events[(pp, tp)] = kept
    gone = len(events) - len(kept)
    if flight:
        run.set_stats(pp, tp, recorded=len(events), exported=len(kept), overwritten=gone)
    else:
        run.set_stats(pp, tp, recorded=len(events), exported=len(events), rotated=gone,
                      rotated_segments=segments)


def _kinds(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return sorted((f.kind.value, f.severity.name, f.channel) for f in findings)


def test_the_last_stage_rotated_away_its_oldest_microbatches() -> None:
    run = _healthy(Run(pp_size=2), 60)
    _cut(run, 1, 0, 50)
    (f,) = analyze(run.trace())
    assert (f.kind, f.severity, f.channel) == (K.WINDOW_CUT, Severity.INFO, "pp0<-pp1/tp0")
    assert f.kind.category.value == "recorder loss"
    assert f.message == ("microbatches 0-49 are outside the kept window of rank 1 (its oldest "
                         "50 events were rotated away with 3 segments): the channel is judged "
                         "from microbatch 50 on")


def test_stage_0_rotated_away_more_than_the_last_stage() -> None:
    run = _healthy(Run(pp_size=2), 60)
    _cut(run, 1, 0, 10)
    _cut(run, 0, 0, 35, segments=7)
    (f,) = analyze(run.trace())
    assert f.kind is K.WINDOW_CUT
    assert f.message.startswith("microbatches 0-34 are outside the kept window of rank 0 (its "
                                "oldest 35 events were rotated away with 7 segments)")


def test_a_dtype_change_inside_the_window_is_still_found() -> None:
    run = Run(pp_size=2)
    for k in range(60):
        run.attach(_payload(k))
        run.extract(_payload(k, "float16" if k >= 40 else "float32"))
    _cut(run, 1, 0, 30)
    _cut(run, 0, 0, 20)
    findings = analyze(run.trace())
    assert _kinds(findings) == [("dtype-mismatch", "ERROR", "pp0<-pp1/tp0"),
                                ("window-cut", "INFO", "pp0<-pp1/tp0")]
    dtype = next(f for f in findings if f.kind is K.DTYPE_MISMATCH)
    assert (dtype.microbatch, dtype.cascade) == (40, 19)


def test_absences_inside_the_window_are_found_at_full_severity() -> None:
    # Nothing was lost inside the window: a skipped send there is a warning, not a gap.
    run = _healthy(Run(pp_size=2), 40)
    run.attach(_payload(40))  # its send was skipped: stage 0 got no aux keys
    run.extract([])
    for k in range(41, 50):
        run.step(_payload(k))
    run.extract(_payload(3))  # and one extract no attach explains
    _cut(run, 1, 0, 25)
    findings = analyze(run.trace())
    assert _kinds(findings) == [("orphan-attach", "WARNING", "pp0<-pp1/tp0"),
                                ("unmatched-extract", "ERROR", "pp0<-pp1/tp0"),
                                ("window-cut", "INFO", "pp0<-pp1/tp0")]
    assert next(f for f in findings if f.kind is K.ORPHAN_ATTACH).microbatch == 40


def test_flight_rings_of_different_lengths() -> None:
    run = _healthy(Run(pp_size=2), 100)
    _cut(run, 1, 0, 92, flight=True)
    _cut(run, 0, 0, 84, flight=True)
    (f,) = analyze(run.trace())
    assert f.message.startswith("microbatches 0-91 are outside the kept window of rank 1 (its "
                                "flight ring kept only its last events (92 overwritten))")


def test_a_time_window_without_stats_is_a_cut_too() -> None:
    # A Jaeger query for the last hour: every process's history starts late, no stats say why.
    run = _healthy(Run(pp_size=2), 30)
    for key in list(run.events):
        run.events[key] = [e for e in run.events[key] if e.seq >= 12 + key[0]]
    (f,) = analyze(run.trace())
    assert f.kind is K.WINDOW_CUT
    assert f.message.startswith("microbatches 0-12 are outside the kept window of rank 1 (its "
                                "trace starts late (a time window, or a file cut at its start))")


def test_a_last_stage_whose_every_event_was_rotated_away_is_no_missing_rank() -> None:
    run = _healthy(Run(pp_size=2), 20)
    _cut(run, 1, 0, 10**6, segments=5)  # the file kept its newest segment: a stats span
    (f,) = analyze(run.trace())
    assert f.kind is K.WINDOW_CUT
    assert f.message == ("every microbatch is outside the kept window of rank 1 (its oldest 20 "
                         "events were rotated away with 5 segments): nothing on this channel "
                         "can be judged")


def test_a_gap_inside_the_window_is_still_a_loss() -> None:
    run = _healthy(Run(pp_size=2), 40)
    run.events[(1, 0)] = [e for e in run.events[(1, 0)] if e.seq >= 10 and e.seq not in (30, 31)]
    run.set_stats(1, recorded=40, exported=40, rotated=10, rotated_segments=1)
    findings = analyze(run.trace())
    assert _kinds(findings) == [("events-dropped", "WARNING", "pp1/tp0"),
                                ("unmatched-extract", "WARNING", "pp0<-pp1/tp0"),
                                ("window-cut", "INFO", "pp0<-pp1/tp0")]
    lost = next(f for f in findings if f.kind is K.EVENTS_DROPPED)
    assert lost.message.startswith("rank 1 lost 2 events (2 missing sequence numbers)")


def test_events_dropped_before_the_window_are_not_its_losses() -> None:
    # 44 calls: 2-5 dropped (buffer full), the segment with the other 10 below 14 rotated away.
    run = _healthy(Run(pp_size=2), 44)
    run.events[(1, 0)] = [e._replace(dropped_before=4) for e in run.events[(1, 0)]
                          if e.seq >= 14]
    run.set_stats(1, recorded=44, exported=40, dropped=4, rotated=10, rotated_segments=1)
    assert [f.kind for f in analyze(run.trace())] == [K.WINDOW_CUT]
    # The same drops inside the window are losses.
    run.events[(1, 0)] = [e._replace(dropped_before=0 if e.seq < 30 else 4)
                          for e in run.events[(1, 0)]]
    assert sorted(f.kind.value for f in analyze(run.trace())) == ["events-dropped", "window-cut"]


def test_a_send_skipped_before_the_cut_shifts_the_numbers_and_is_not_judged() -> None:
    # Two sends skipped early, stage 0 made no call for them: extract k received attach k + 2.
    run = Run(pp_size=2)
    for k in range(60):
        run.attach(_payload(k))
        if k not in (3, 4):
            run.extract(_payload(k))
    _cut(run, 1, 0, 20)  # extracts 18 and 19 received attaches 20 and 21
    findings = analyze(run.trace())
    assert [f.kind for f in findings] == [K.WINDOW_CUT]
    assert findings[0].message.endswith("the channel is judged from microbatch 20 on; 2 calls "
                                        "just after the cut, whose partner lies before it, not "
                                        "judged")


def test_pp4_tp2_rotated_at_different_points_on_every_rank() -> None:
    run = Run(pp_size=4, tp_size=2)
    for k in range(80):
        run.step(_payload(k))
    for (pp, tp), first in {(3, 0): 31, (3, 1): 17, (0, 0): 9, (0, 1): 44}.items():
        _cut(run, pp, tp, first)
    findings = analyze(run.trace())
    assert _kinds(findings) == [("window-cut", "INFO", "pp0<-pp3/tp0"),
                                ("window-cut", "INFO", "pp0<-pp3/tp1")]
    by_channel = {f.channel: f.message for f in findings}
    assert by_channel["pp0<-pp3/tp0"].startswith("microbatches 0-30 are outside the kept window "
                                                 "of rank 6")
    assert by_channel["pp0<-pp3/tp1"].startswith("microbatches 0-43 are outside the kept window "
                                                 "of rank 1")


def test_the_report_says_what_each_channel_no_longer_covers() -> None:
    run = _healthy(Run(pp_size=2), 60)
    _cut(run, 1, 0, 50)
    trace = run.trace()
    text = render_text(trace, analyze(trace), Severity.ERROR)
    assert "INFO window-cut: a channel's oldest microbatches lie outside a kept window" in text
    assert "pp0<-pp1/tp0, " in text and "] microbatches 0-49 are outside the kept window" in text
    assert text.endswith("OK: 0 findings at or above error.\n")


def test_rotation_counts_round_trip_through_a_trace_file(tmp_path: Path) -> None:
    run = _healthy(Run(pp_size=2), 30)
    _cut(run, 1, 0, 12)
    write_run(run, str(tmp_path))
    trace: Trace = load_paths([str(tmp_path)])
    stats = {p.rank.pp_rank: p.stats for p in trace.processes}
    assert stats[1] is not None and (stats[1].rotated, stats[1].rotated_segments) == (12, 3)
    assert [f.kind for f in analyze(trace)] == [K.WINDOW_CUT]


@pytest.mark.parametrize("rotated", [0, 5])
def test_stats_attributes_carry_rotation_only_when_there_was_some(rotated: int) -> None:
    stats = RecorderStats(rank=RankInfo(rank=1), time_ns=1, rotated=rotated,
                          rotated_segments=rotated // 5)
    attrs = schema.stats_to_attributes(stats)
    assert (schema.S_ROTATED in attrs) is bool(rotated)
    assert schema.attributes_to_stats(attrs) == stats
