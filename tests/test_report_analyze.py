"""The analyze report: text for people, JSON for CI (its schema), exit statuses, --fail-on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.cli.main import main
from pptrace.model.findings import FindingKind, Severity
from pptrace.report.text import JSON_SCHEMA, to_json
from tests.helpers_analyze import Run, meta, write_run

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"
SHARED = Path(__file__).parent / "data" / "third_party"  # copies of shared/data
SHARED_OUT = SHARED / "jaeger-ui-otlp2jaeger-out.json"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["analyze", "--no-progress", *args])
    out, err = capsys.readouterr()
    return status, out, err


def _orphan_only(tmp_path: Path) -> str:
    run = Run()
    for k in range(3):
        run.step([meta("scores", (k + 1, 5))])
    run.attach([meta("scores", (9, 5))])
    run.extract([])
    run.step([meta("scores", (4, 5))])
    write_run(run, str(tmp_path))
    return str(tmp_path)


def test_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _cli(capsys, str(GOLDEN), "--format", "json")
    assert status == 1 and err == ""
    doc = json.loads(out)
    assert doc["schema"] == JSON_SCHEMA == "pptrace.analyze/2"
    assert list(doc) == ["schema", "summary", "sources", "processes", "findings", "truncated",
                         "problems", "clocks"]
    assert doc["truncated"] is None
    # One host: one clock, nothing to align, nothing moved.
    assert doc["clocks"]["applied"] is False and doc["clocks"]["offsets_ns"] == [0, 0]
    assert doc["summary"] == {
        "processes": 2, "events": 12, "messages": 0, "foreign_spans": 0, "input_problems": 0,
        "findings": 2, "occurrences": 3, "by_severity": {"info": 0, "warning": 1, "error": 1},
        "by_kind": {"orphan-attach": 1, "dtype-mismatch": 1}, "fail_on": "error",
        "failed": True,
    }
    assert [p["rank"] for p in doc["processes"]] == [0, 1]
    assert set(doc["processes"][0]) == {
        "index", "rank", "world_size", "pp_rank", "pp_size", "tp_rank", "tp_size", "host",
        "pid", "attaches", "extracts", "sends", "receives", "dropped", "sources"}
    orphan, dtype = doc["findings"]
    assert dtype == {
        "kind": "dtype-mismatch",
        "severity": "error",
        "message": "rank 1 attached `entropy` float32[6]; rank 0 extracted float16[6] "
                   "(and 1 more like this through microbatch 5)",
        "ranks": [1, 0],
        "microbatch": 4,
        "time_ns": dtype["time_ns"],
        "channel": "pp0<-pp1/tp0",
        "cascade": 1,
        "events": [{"process": 1, "direction": "attach", "seq": 4},
                   {"process": 0, "direction": "extract", "seq": 4}],
        "messages": [],
        "more_events": [],  # the next pair differs the same way: counted in cascade
        "more_messages": [],
        "cause": None,
    }
    assert orphan["kind"] == "orphan-attach" and orphan["microbatch"] == 2
    assert doc["problems"] == []


def test_text_report_leads_with_the_first_divergence(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _cli(capsys, str(GOLDEN))
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == ("pptrace analyze: 2 processes, 12 pptrace events (6 attach, 6 extract)")
    assert lines[1] == "2 findings (1 error, 1 warning; 3 occurrences)."
    assert lines[3] == "First divergence (error, dtype-mismatch):"
    assert "rank 1 attached `entropy` float32[6]; rank 0 extracted float16[6]" in lines[4]
    assert "[mb 4, pp0<-pp1/tp0, " in lines[4]
    # Groups: worst first, each with its description and counts.
    errors_at = out.index("ERROR dtype-mismatch: a name's dtype differs between attach and "
                          "extract (1 finding, 2 occurrences)")
    warnings_at = out.index("WARNING orphan-attach:")
    assert errors_at < warnings_at
    assert lines[-1] == "FAIL: 1 finding at or above error."


@pytest.mark.parametrize(
    ("fail_on", "status"), [("error", 0), ("warning", 1), ("info", 1)]
)
def test_fail_on(tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_on: str,
                 status: int) -> None:
    got, out, _ = _cli(capsys, _orphan_only(tmp_path), "--fail-on", fail_on)
    assert got == status
    assert ("FAIL" if status else "OK") in out.splitlines()[-1]


def test_clean_run_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = Run()
    for k in range(4):
        run.step([meta("scores", (k + 1, 5))])
    write_run(run, str(tmp_path))
    status, out, _ = _cli(capsys, str(tmp_path), "--fail-on", "info")
    assert status == 0
    assert "No findings: every attach and extract agrees with its other end." in out
    status, out, _ = _cli(capsys, str(tmp_path), "--format", "json")
    assert status == 0 and json.loads(out)["findings"] == []


def test_foreign_only_input_says_there_is_nothing_to_check(
    capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _cli(capsys, str(SHARED_OUT))
    assert status == 0 and err == ""
    assert "0 pptrace events" in out and "2 spans from other tools set aside" in out
    assert "No pptrace events in this input" in out
    status, out, _ = _cli(capsys, str(SHARED_OUT), "--format", "json")
    summary = json.loads(out)["summary"]
    assert (summary["events"], summary["foreign_spans"], summary["findings"]) == (0, 2, 0)


def test_the_docs_document_every_kind_and_the_json_schema() -> None:
    # The kinds' table is generated from FindingKind (tests/test_docs_fresh.py keeps it fresh);
    # the analyzer's page links it and documents the JSON report and the exit statuses.
    kinds = (DOCS / "reference" / "findings.md").read_text(encoding="utf-8")
    for kind in FindingKind:
        row = (f"| `{kind.value}` | {kind.default_severity.name.lower()} | "
               f"{kind.category.value} | {kind.description} |")
        assert row in kinds, kind
    page = (DOCS / "analyzer.md").read_text(encoding="utf-8")
    assert "(reference/findings.md)" in page
    for field in ("schema", "summary", "processes", "findings", "problems", "cascade",
                  "microbatch", "channel", JSON_SCHEMA):
        assert field in page, field
    for status in ("| 0 |", "| 1 |", "| 2 |"):
        assert status in page


def _distinct(n: int) -> Run:
    """``n`` distinct dtype mismatches (one per name) in one pair."""
    run = Run()
    run.attach([meta(f"t{i}") for i in range(n)])
    run.extract([meta(f"t{i}", dtype="float16") for i in range(n)])
    return run


def test_json_lists_at_most_10_findings_a_kind_and_says_what_it_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(_distinct(25), str(tmp_path))
    _, out, _ = _cli(capsys, str(tmp_path), "--format", "json")
    doc = json.loads(out)
    assert doc["summary"]["findings"] == 25 and doc["summary"]["by_kind"] == {
        "dtype-mismatch": 25}
    assert [f["message"].split("`")[1] for f in doc["findings"]] == [f"t{i}" for i in range(10)]
    assert doc["truncated"] == {"per_kind": 10, "findings": 15, "occurrences": 15,
                                "by_kind": {"dtype-mismatch": 15}}
    _, out, _ = _cli(capsys, str(tmp_path), "--format", "json", "--max-per-kind", "0")
    doc = json.loads(out)
    assert len(doc["findings"]) == 25 and doc["truncated"] is None
    _, out, _ = _cli(capsys, str(tmp_path), "--max-per-kind", "3")
    assert out.count("] rank 1 attached `t") == 1 + 3  # the first divergence, then its kind
    assert "  ... 22 more (--max-per-kind 0 lists every one)" in out


def test_consequences_are_capped_under_their_cause_and_point_at_it() -> None:
    # The TP ranks disagree on 12 names: 24 content mismatches (12 per channel) follow.
    run = Run(pp_size=2, tp_size=2)
    for tp in (0, 1):
        run.attach([meta(f"n{i}", (4,), fingerprint=f"{tp}{i}") for i in range(12)], tp=tp)
    for tp in (0, 1):
        run.extract([meta(f"n{i}", (4,), fingerprint=f"x{i}") for i in range(12)], tp=tp)
    trace = run.trace()
    findings = analyze(trace)
    assert sorted(f.kind.value for f in findings) == ["content-mismatch"] * 24 + ["tp-disagree"]
    doc = to_json(trace, findings, Severity.ERROR)
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds == ["tp-disagree"] + ["content-mismatch"] * 10
    assert all(f["cause"] == 0 for f in doc["findings"][1:])
    assert doc["truncated"]["by_kind"] == {"content-mismatch": 14}
    assert doc["summary"]["findings"] == 25


def test_severity_parse() -> None:
    assert Severity.parse(" Warning ") is Severity.WARNING


def test_traces_of_several_runs_in_one_input_are_named_with_their_process_counts() -> None:
    # A 2-rank script run twice into one folder once read "4 processes" and nothing more.
    from pptrace.model.records import RankInfo, RecorderStats
    from pptrace.model.trace import ProcessTrace, Trace
    from pptrace.report.text import render_text as text_of

    def proc(run: str, r: int) -> ProcessTrace:
        rank = RankInfo(rank=r, world_size=2, pp_rank=r, pp_size=2, tp_rank=0, tp_size=1,
                        host="n", pid=100 + r)
        return ProcessTrace(rank, (), RecorderStats(rank, 1, run_id=run), (f"{run}-{r}",))

    two = Trace(tuple(proc(run, r) for run in ("r1a", "r2b") for r in (0, 1)))
    head = text_of(two, [], Severity.ERROR).splitlines()[0]
    assert "4 processes from 2 runs (run r1a: 2 processes, run r2b: 2 processes)" in head
    one = Trace(tuple(proc("r1a", r) for r in (0, 1)))
    assert "runs" not in text_of(one, [], Severity.ERROR).splitlines()[0]


def test_at_80_columns_the_report_breaks_between_words_and_names_what_channels_mean() -> None:
    from pptrace.report.text import render_text

    run = Run()
    for mb in range(3):
        run.attach([meta("entropy", (4,), fingerprint=f"b2:{mb}aaaaaaaa")])
        run.extract([meta("entropy", (4,), fingerprint=f"b2:{mb}bbbbbbbb")])
    trace = run.trace()
    findings = list(analyze(trace))
    assert findings
    wide = render_text(trace, findings, Severity.ERROR)
    narrow = render_text(trace, findings, Severity.ERROR, width=80)
    assert all(len(line) <= 80 for line in narrow.splitlines()), narrow
    assert narrow.split() == wide.split()  # the same words, none broken
    assert any(len(line) > 80 for line in wide.splitlines())  # a line per finding, for grep
    legend = wide[wide.index("Channels"):]
    assert "pp0<-pp1/tp0: attaches on the right-hand rank, extracted on the left-hand stage" \
        in legend


def test_calls_no_channel_paired_are_counted_and_never_said_to_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(pp_size=3)
    for k in range(2):
        run.step([meta("scores", (k + 1, 5))])
    run.attach([meta("scores")], pp=1)  # stage 1 attaches: no channel takes it
    run.attach([meta("scores")], pp=1)
    write_run(run, str(tmp_path))
    status, out, _ = _cli(capsys, str(tmp_path))
    assert status == 0 and "agree" not in out, out  # info: not a failure, and no claim
    assert ("rank 1 (pp1, tp 0): 2 attach calls (pp1 is not the last PP stage (pp_size 3), "
            "where attach runs, so no extract is expected to pair with them) could not be "
            "paired; they were not compared") in out, out
    assert "1 finding (1 info; 1 occurrence)." in out
    status, out, _ = _cli(capsys, str(tmp_path), "--format", "json")
    doc = json.loads(out)
    assert doc["summary"]["by_kind"] == {"unpaired-calls": 1}
    (finding,) = doc["findings"]
    assert "could not be paired" in finding["message"] and finding["ranks"] == [1]
