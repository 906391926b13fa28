"""The loader reads every supported format into the same Trace.

The golden trace (``tests/data/golden-pp2``) was written by pptrace's real exporter; the other
formats are derived from it here, so each test compares one format against the recorded events.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind
from pptrace.model.trace import Trace
from tests.helpers_analyze import golden_run, otlp_to_jaeger

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden-pp2"
SHARED = Path(__file__).parent / "data" / "third_party"  # copies of shared/data
SHARED_FILES = [SHARED / "jaeger-ui-otlp2jaeger-in.json", SHARED / "jaeger-ui-otlp2jaeger-out.json"]


def _golden_docs() -> list[dict]:  # type: ignore[type-arg]
    docs = []
    for path in sorted(GOLDEN.iterdir()):
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return docs


def _merged_document() -> dict:  # type: ignore[type-arg]
    return {"resourceSpans": [rs for doc in _golden_docs() for rs in doc["resourceSpans"]]}


def _events(trace: Trace) -> list:  # type: ignore[type-arg]
    return [(p.rank.rank, list(p.events)) for p in trace.processes]


EXPECTED = _events(golden_run().trace())


def test_golden_directory_holds_the_recorded_events() -> None:
    trace = load_paths([str(GOLDEN)])
    assert _events(trace) == EXPECTED
    assert [p.stats.recorded for p in trace.processes if p.stats] == [6, 6]
    assert not trace.problems and not trace.foreign
    assert [len(p.sources) for p in trace.processes] == [1, 1]


def test_golden_analysis() -> None:
    findings = analyze(load_paths([str(GOLDEN)]))
    assert [(f.kind, f.microbatch, f.cascade) for f in findings] == [
        (FindingKind.ORPHAN_ATTACH, 2, 0),
        (FindingKind.DTYPE_MISMATCH, 4, 1),
    ]


def test_files_and_globs(tmp_path: Path) -> None:
    files = sorted(str(p) for p in GOLDEN.iterdir())
    assert _events(load_paths(files)) == EXPECTED
    assert _events(load_paths([str(GOLDEN / "*.jsonl")])) == EXPECTED
    # The same file twice (a path and a glob) is read once.
    assert _events(load_paths([files[0], files[1], str(GOLDEN / "*")])) == EXPECTED


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("single TracesData document, pretty", lambda: json.dumps(_merged_document(), indent=2)),
        ("single TracesData document, one line", lambda: json.dumps(_merged_document())),
        ("Jaeger v3 API response", lambda: json.dumps({"result": _merged_document()}, indent=1)),
        ("Jaeger v3 API stream chunks", lambda: "\n".join(
            json.dumps({"result": d}) for d in _golden_docs())),
        ("Jaeger JSON", lambda: json.dumps(otlp_to_jaeger(_golden_docs()), indent=2)),
    ],
)
def test_other_formats_give_the_same_events(tmp_path: Path, name: str, make) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "trace.json"
    path.write_text(make())
    trace = load_paths([str(path)])
    assert _events(trace) == EXPECTED, name
    assert not trace.problems


def test_base64_ids_are_read_as_hex(tmp_path: Path) -> None:
    doc = json.loads(SHARED_FILES[0].read_text())
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    path = tmp_path / "b64.json"
    path.write_text(json.dumps(doc))
    spans = load_paths([str(path)]).foreign
    assert {(s.trace_id, s.span_id) for s in spans} == {
        ("83a9efd15c1c98a977e0711cc93ee28b", "e127af99e3b3e074")
    }


def test_shared_files_hold_the_same_two_spans_and_no_pptrace_events() -> None:
    traces = [load_paths([str(p)]) for p in SHARED_FILES]
    for trace in traces:
        assert trace.event_count == 0 and not trace.processes
        assert not trace.problems
        assert len(trace.foreign) == 2
    a, b = ([(s.name, s.service, s.trace_id, s.span_id, s.start_ns, s.end_ns) for s in t.foreign]
            for t in traces)
    assert a == b
    assert a[0] == ("okey-dokey-0", "telemetrygen", "83a9efd15c1c98a977e0711cc93ee28b",
                    "e127af99e3b3e074", 1706678909209712000, 1706678909209835000)


def test_foreign_spans_are_kept_aside_next_to_pptrace_events() -> None:
    trace = load_paths([str(GOLDEN), str(SHARED_FILES[1])])
    assert _events(trace) == EXPECTED
    assert len(trace.foreign) == 2
    assert trace.foreign[0].source == str(SHARED_FILES[1])


def test_progress_reaches_the_total() -> None:
    seen: list[tuple[int, int, str]] = []
    load_paths([str(GOLDEN)], progress=lambda d, t, s: seen.append((d, t, s)))
    total = sum(os.path.getsize(p) for p in GOLDEN.iterdir())
    assert seen[-1][:2] == (total, total)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)


def test_repeated_records_are_shared() -> None:
    trace = load_paths([str(GOLDEN)])
    events = [e for p in trace.processes for e in p.events]
    ranks = {id(e.rank) for e in events}
    assert len(ranks) == 2  # one RankInfo object per process
    keys = {id(e.keys_before) for e in events if e.keys_before == ("next_token_ids",)}
    assert len(keys) == 1


@pytest.mark.parametrize("fingerprints", [False, True])
def test_fast_path_gives_exactly_what_the_ordinary_path_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fingerprints: bool
) -> None:
    # Many spans of few shapes, written by pptrace's real exporter: most hit the template cache.
    # With fingerprints (a content hash each call's own), they are cut out of the shape's text
    # like the numbers: else every span would be a shape of its own.
    from pptrace.export.sinks import build_sink
    from pptrace.load import worker
    from pptrace.load.builder import TraceBuilder
    from pptrace.load.fast import FastLines
    from pptrace.load.files import read_files
    from pptrace.model.config import Config
    from tests.helpers_analyze import Run, meta

    def fp(k: int, i: int) -> str | None:
        return f"b2:{k:08x}{i:08x}" if fingerprints else None

    run = Run(pp_size=2)
    for k in range(60):
        run.step([meta("scores", (k % 3 + 1, 5), fingerprint=fp(k, 0)),
                  meta("ids", (k % 3 + 1,), "int64", fingerprint=fp(k, 1))])
    run.attach([meta("scores", (2, 5))], error=("RuntimeError", "boom"))
    for proc in run.trace().processes:
        sink = build_sink(Config(trace_dir=str(tmp_path)), proc.rank)
        for i in range(0, len(proc.events), 16):  # several spans a line, as a flush writes
            sink.export(list(proc.events[i : i + 16]))
        sink.shutdown(1.0)
    builder = TraceBuilder()
    files = sorted(str(path) for path in tmp_path.iterdir())
    assert read_files(files, {f: 0 for f in files}, builder, None) == []
    assert builder.fast.hits > 100 and builder.fast.misses < 20
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    fast = load_paths([str(tmp_path)])
    monkeypatch.setattr(worker, "MIN_PARALLEL_BYTES", 0)  # the loader worker's rows
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS")
    assert worker.split_files(files, {f: os.path.getsize(f) for f in files}) >= 1
    rows = load_paths([str(tmp_path)])
    monkeypatch.setattr(FastLines, "line", lambda self, text: False)
    slow = load_paths([str(tmp_path)])
    assert _events(fast) == _events(rows) == _events(slow) == _events(run.trace())


def test_documents_stream_in_any_key_order_and_big_lines_stream_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _merged_document()
    for rs in doc["resourceSpans"]:  # the resource after its spans, ids as base64
        rs["resource"] = rs.pop("resource")
    path = tmp_path / "late-resource.json"
    path.write_text(json.dumps(doc, indent=1))
    assert _events(load_paths([str(path)])) == EXPECTED
    import pptrace.load.files as load_module

    monkeypatch.setattr(load_module, "_BIG_LINE", 100)  # every line counts as huge
    path = tmp_path / "one-line.json"
    path.write_text(json.dumps({"result": _merged_document()}))
    assert _events(load_paths([str(path)])) == EXPECTED


def test_a_document_cut_short_keeps_the_spans_before_the_damage(tmp_path: Path) -> None:
    text = json.dumps(_merged_document(), indent=2)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) * 3 // 4])
    trace = load_paths([str(path)])
    assert 0 < trace.event_count < 12
    (problem,) = trace.problems
    assert problem.message.startswith("not valid JSON from here on")
    assert problem.line == text[: len(text) * 3 // 4].count("\n") + 1


def test_the_same_events_read_twice_are_kept_once(tmp_path: Path) -> None:
    for path in GOLDEN.iterdir():
        data = path.read_bytes()
        (tmp_path / path.name).write_bytes(data)
        (tmp_path / ("copy-" + path.name)).write_bytes(data)
    trace = load_paths([str(tmp_path)])
    assert _events(trace) == EXPECTED
    n = sum(len(events) for _, events in EXPECTED)
    assert [p.message for p in trace.problems] == [
        f"{n} duplicate events ignored (the same input read twice?)"]
