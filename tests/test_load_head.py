"""The start of a large trace (``pptrace.load.head``), read first for the viewer: every process
cut at one moment, before which nothing any process handed its recorder is missing; its stats
those it had written by then, not final; no error-level finding on a healthy run's start; and
no head at all where no such moment can be known (read whole instead).

Files are written by pptrace's real trace-file encoder, flush by flush as the recorder writes
them (messages, events, then a stats span taken after the flush took its records); the slow
test reads a real run's files (real gloo processes, a flush every 50 ms)."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.load.head import load_head
from pptrace.load.loader import load_paths
from pptrace.model.findings import Severity
from pptrace.model.records import RecorderStats
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, meta, mt

PROXY = [mt("hidden_states", (8, 16)), mt("residual", (8, 16))]
PAYLOAD = (meta("entropy", (4,)), meta("topk_ids", (4, 5), "int64"))


def healthy(steps: int = 300, pp: int = 3) -> Run:
    """Proxies along the pipeline, the last stage's attach, its output to stage 0, the extract."""
    run = Run(pp_size=pp)
    for k in range(steps):
        for s in range(pp - 1):
            run.message("proxy", PROXY, frm=s, to=s + 1)
        run.attach(PAYLOAD)
        n = 4 + k % 5
        run.message("output", [mt("next_token_ids", (n,), "int64"), mt("scores", (n, 5))],
                    frm=pp - 1, to=0, carries=k)
        run.extract(PAYLOAD)
    return run


def write_flushed(trace: Trace, directory: Path, flush_ns: int = 40_000,
                  stats_each_flush: bool = True, segments: int = 0) -> Path:
    """Each process's file as its recorder writes it: every ``flush_ns`` its messages, its
    events, then a stats span (``stats_each_flush``; else only the last, final one);
    ``segments``: rotated into that many numbered segment files, a third of the flushes each."""
    from pptrace.export.file_sink import FileSink
    from pptrace.export.spans import process_resource

    directory.mkdir(parents=True, exist_ok=True)
    start = min([e.start_ns for p in trace.processes for e in p.events]
                + [m.wall_ns for p in trace.processes for m in p.messages])
    end = max([e.start_ns for p in trace.processes for e in p.events]
              + [m.wall_ns for p in trace.processes for m in p.messages])
    for p in trace.processes:
        r = p.rank
        resource = process_resource(r, "run-1", 2)

        stem = str(directory / f"pptrace-rank{r.rank}-pid{r.pid}")

        def name(segment: int, stem: str = stem) -> str:
            return stem + (f".{segment:06d}" if segments else "") + ".otlp.jsonl"

        segment = 1
        sink = FileSink(name(segment), resource)
        evs, msgs = list(p.events), list(p.messages)
        flush = start + flush_ns
        e = m = 0
        while e < len(evs) or m < len(msgs):
            if segment < segments and flush - start > segment * (end - start) / segments:
                sink.shutdown(5.0)  # rotated: the next flushes go to the next segment
                segment += 1
                sink = FileSink(name(segment), resource)
            e0, m0 = e, m
            while e < len(evs) and evs[e].start_ns < flush:
                e += 1
            while m < len(msgs) and msgs[m].wall_ns < flush:
                m += 1
            if m > m0:
                sink.export_messages(msgs[m0:m], r, "run-1")
            if e > e0:
                sink.export(evs[e0:e])
            if stats_each_flush and (e > e0 or m > m0):
                sink.export_stats(RecorderStats(
                    rank=r, time_ns=flush, recorded=e, exported=e, run_id="run-1",
                    messages_recorded=m, messages_exported=m))
            flush += flush_ns
        sink.export_stats(RecorderStats(
            rank=r, time_ns=flush, recorded=len(evs), exported=len(evs), run_id="run-1",
            final=True, messages_recorded=len(msgs), messages_exported=len(msgs)))
        sink.shutdown(5.0)
    return directory


def errors(trace: Trace) -> list[str]:
    return [f"{f.kind.value}: {f.message}" for f in analysis(trace).findings
            if f.severity is Severity.ERROR]


def assert_whole_up_to_the_moment(whole: Trace, head: Trace, horizon: int) -> None:
    """Every process of the head holds exactly the whole trace's records made by ``horizon``."""
    by_key = {p.key: p for p in whole.processes}
    assert {p.key for p in head.processes} == set(by_key)
    for p in head.processes:
        w = by_key[p.key]
        assert p.events == tuple(e for e in w.events if e.start_ns <= horizon), p.rank
        assert p.messages == tuple(m for m in w.messages if m.wall_ns <= horizon), p.rank


def test_every_record_made_by_the_moment_is_in_the_head(tmp_path: Path) -> None:
    d = write_flushed(healthy().trace(), tmp_path / "t")
    whole = load_paths([str(d)])
    head = load_head([str(d)], budget=60_000, min_total=0)
    assert head is not None and head.horizon_ns is not None
    assert_whole_up_to_the_moment(whole, head.trace, head.horizon_ns)
    # A start, not the whole: some of every process's records are left for later.
    assert 0 < head.trace.event_count < whole.event_count
    assert 0 < head.read < head.total and 0 < head.fraction < 1
    # Each process's stats: the last it had written by the moment (none if it had written
    # none yet), not final, and whatever they count is in the head.
    stated = 0
    for p in head.trace.processes:
        if p.stats is None:
            continue
        stated += 1
        assert not p.stats.final and p.stats.time_ns <= head.horizon_ns
        assert p.stats.exported <= len(p.events)
        assert p.stats.messages_exported <= len(p.messages)
    assert stated >= 2


@pytest.mark.parametrize("budget", [20_000, 60_000, 200_000, 600_000])
def test_the_start_of_a_healthy_run_has_no_error(tmp_path: Path, budget: int) -> None:
    d = write_flushed(healthy().trace(), tmp_path / "t")
    assert errors(load_paths([str(d)])) == []
    head = load_head([str(d)], budget=budget, min_total=0)
    assert head is not None
    assert errors(head.trace) == []


def test_compressed_files_give_the_same_start(tmp_path: Path) -> None:
    plain = write_flushed(healthy().trace(), tmp_path / "plain")
    packed = tmp_path / "gz"
    packed.mkdir()
    for f in plain.iterdir():
        with open(f, "rb") as src, gzip.open(packed / (f.name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    a = load_head([str(plain)], budget=60_000, min_total=0)
    b = load_head([str(packed)], budget=60_000, min_total=0)
    assert a is not None and b is not None and b.horizon_ns is not None
    assert_whole_up_to_the_moment(load_paths([str(packed)]), b.trace, b.horizon_ns)
    assert b.trace.event_count > 0


def test_a_rotated_traces_segments_each_cut_where_they_were_read(tmp_path: Path) -> None:
    # Every segment gets its share: an early segment's cut is an early moment, whatever later
    # segments of the same process were read.
    d = write_flushed(healthy().trace(), tmp_path / "t", segments=3)
    assert len(list(d.iterdir())) == 9
    head = load_head([str(d)], budget=90_000, min_total=0)
    assert head is not None and head.horizon_ns is not None
    assert_whole_up_to_the_moment(load_paths([str(d)]), head.trace, head.horizon_ns)


def test_files_without_a_stats_span_each_flush_are_read_whole(tmp_path: Path) -> None:
    # (another writer's pptrace spans, an old benchmark's files): no moment can be known
    d = write_flushed(healthy().trace(), tmp_path / "t", stats_each_flush=False)
    assert load_head([str(d)], budget=60_000, min_total=0) is None


def test_a_small_trace_and_a_single_document_are_read_whole(tmp_path: Path) -> None:
    d = write_flushed(healthy().trace(), tmp_path / "t")
    size = sum(os.path.getsize(f) for f in d.iterdir())
    assert load_head([str(d)], budget=60_000, min_total=size + 1) is None
    # However large the budget, a start is at most about an eighth of the trace.
    big = load_head([str(d)], budget=size * 100, min_total=0)
    assert big is not None and big.read < big.total / 4
    doc = tmp_path / "doc"
    doc.mkdir()
    for f in d.iterdir():
        shutil.copy(f, doc / f.name.replace(".jsonl", ".json"))
    assert load_head([str(doc)], budget=60_000, min_total=0) is None


def test_a_process_read_whole_is_cut_at_the_moment_too(tmp_path: Path) -> None:
    # Stage 1 only forwards proxies: its file is small, read whole within its share, but it
    # is cut at the same moment as the others (else its receives would outrun their sends).
    d = write_flushed(healthy().trace(), tmp_path / "t")
    head = load_head([str(d)], budget=90_000, min_total=0)
    assert head is not None and head.horizon_ns is not None
    whole = load_paths([str(d)])
    assert_whole_up_to_the_moment(whole, head.trace, head.horizon_ns)
    later = [m for p in whole.processes for m in p.messages if m.wall_ns > head.horizon_ns]
    assert later, "the test needs records after the moment"


@pytest.mark.slow
def test_a_real_runs_start(tmp_path: Path) -> None:
    """A real run (3 ranks, gloo, a flush every 50 ms): its start at several sizes holds the
    whole trace's events made by the moment, every message not in flight then, and gives no
    error-level finding."""
    from tests.helpers_samples import run_sample

    result, _ = run_sample(str(tmp_path), ranks=3, steps=160, flush_interval=0.05)
    assert result.ok, result
    whole = load_paths([str(tmp_path)])
    assert errors(whole) == []
    by_key = {p.key: p for p in whole.processes}
    size = sum(os.path.getsize(tmp_path / f) for f in os.listdir(tmp_path)
               if f.endswith(".jsonl"))
    heads = 0
    for share in (16, 8, 4):
        head = load_head([str(tmp_path)], budget=size // share, min_total=0)
        if head is None:
            continue
        heads += 1
        assert head.horizon_ns is not None
        moment = head.horizon_ns
        assert errors(head.trace) == []
        for p in head.trace.processes:
            w = by_key[p.key]
            assert p.events == tuple(e for e in w.events if e.start_ns <= moment)
            assert set(p.messages) <= set(w.messages)
            # What is missing was in progress at the moment: handed to the recorder after it.
            for m in set(w.messages) - set(p.messages):
                assert m.wall_ns > moment or m.wall_ns + max(m.duration_ns, 0) > moment, m
    assert heads >= 2, "the run's files should give a start at most sizes"
