"""A rotated trace's segments (issue 17, item 4, the reading half) are read as one process.

Each process of a small run is written as numbered segments
(``pptrace-rank<R>-pid<P>.<NNNNNN>.otlp.jsonl[.gz]``, as pptrace's writer names them with
rotation on) and compared with the same process written as one file.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pptrace.cli.view import _reloader
from pptrace.load import files as load_files
from pptrace.load.loader import load_paths
from pptrace.load.segments import is_segment, order_segments, segment_of
from pptrace.model.records import RecorderStats
from pptrace.model.trace import ProcessTrace, Trace
from tests.helpers_analyze import Run, meta, write_otlp_lines


def _run() -> Trace:
    run = Run(pp_size=2)
    for k in range(12):
        run.step([meta("scores", (k % 3 + 1, 5)), meta("ids", (k % 3 + 1,), "int64")])
    return run.trace(all_ranks=False)


def _stem(proc: ProcessTrace) -> str:
    return f"pptrace-rank{proc.rank.rank}-pid{proc.rank.pid}"


def _write_segments(directory: Path, trace: Trace, per_segment: int = 2,
                    gz: frozenset[int] = frozenset()) -> dict[str, list[Path]]:
    """Each process as segments 000001, 000002, ... of ``per_segment`` events (stats in the
    last); the segments numbered in ``gz`` gzip-compressed. Returns each stem's segments."""
    out: dict[str, list[Path]] = {}
    for proc in trace.processes:
        events = list(proc.events)
        chunks = [events[i:i + per_segment] for i in range(0, len(events), per_segment)]
        paths = []
        for n, chunk in enumerate(chunks, 1):
            path = directory / f"{_stem(proc)}.{n:06d}.otlp.jsonl"
            stats = None
            if n == len(chunks):
                stats = RecorderStats(rank=proc.rank, time_ns=9, recorded=len(events),
                                      exported=len(events), final=True)
            write_otlp_lines(str(path), chunk, per_line=2, stats=stats)
            if n in gz:
                gz_path = path.with_name(path.name + ".gz")
                gz_path.write_bytes(gzip.compress(path.read_bytes()))
                path.unlink()
                path = gz_path
            paths.append(path)
        out[_stem(proc)] = paths
    return out


def _whole(directory: Path, trace: Trace) -> Trace:
    for proc in trace.processes:
        stats = RecorderStats(rank=proc.rank, time_ns=9, recorded=len(proc.events),
                              exported=len(proc.events), final=True)
        write_otlp_lines(str(directory / f"{_stem(proc)}.otlp.jsonl"), list(proc.events),
                         stats=stats)
    return load_paths([str(directory)])


def _content(trace: Trace) -> list[Any]:
    return [(p.rank, p.events, p.stats) for p in trace.processes]


def test_segment_names() -> None:
    seg = segment_of("/t/pptrace-rank3-pid4242.000007.otlp.jsonl.gz")
    assert seg is not None and seg.process == ("/t", "pptrace-rank3-pid4242")
    assert (seg.number, seg.ending) == (7, ".otlp.jsonl.gz")
    plain = segment_of("pptrace-rankX-pid1.otlp.jsonl")
    assert plain is not None and plain.number == 0
    assert not is_segment("pptrace-rankX-pid1.otlp.jsonl")
    assert segment_of("notes.jsonl") is None
    assert segment_of("pptrace-rank1-pid2.7.otlp.jsonl") is None


def test_segments_read_as_one_process_whatever_order_they_are_named_in(tmp_path: Path) -> None:
    trace = _run()
    whole = _whole(tmp_path / "whole", trace)
    (tmp_path / "seg").mkdir()
    segs = _write_segments(tmp_path / "seg", trace, gz=frozenset({2}))
    assert all(len(paths) == 6 for paths in segs.values())  # 12 events a process
    named = [str(p) for paths in segs.values() for p in reversed(paths)]
    for paths in ([str(tmp_path / "seg")], named, sorted(named, key=lambda p: p[::-1])):
        loaded = load_paths(paths)
        assert _content(loaded) == _content(whole)
        assert not loaded.problems
        for proc in loaded.processes:  # read in segment order
            assert list(proc.sources) == [str(p) for p in segs[_stem(proc)]]


def test_order_keeps_other_files_where_they_were_named() -> None:
    files = ["b.jsonl", "/d/pptrace-rank0-pid1.000002.otlp.jsonl", "a.json",
             "/d/pptrace-rank0-pid1.000001.otlp.jsonl.gz"]
    assert order_segments(files) == (
        ["b.jsonl", "/d/pptrace-rank0-pid1.000001.otlp.jsonl.gz",
         "/d/pptrace-rank0-pid1.000002.otlp.jsonl", "a.json"], [])


def test_a_missing_middle_segment_is_a_problem_naming_it(tmp_path: Path) -> None:
    segs = _write_segments(tmp_path, _run())
    stem = sorted(segs)[0]
    segs[stem][2].unlink()  # 000003
    segs[stem][0].unlink()  # 000001: rotated away, as rotation does: no problem
    trace = load_paths([str(tmp_path)])
    (problem,) = trace.problems
    assert problem.source == str(tmp_path / f"{stem}.000003.otlp.jsonl")
    assert problem.message == (
        "missing: segment 000003 is not there, between 000002 and 000004 of this process "
        "(rotation deletes only the oldest): the events they held are not in the trace")
    segs[stem][1].unlink()
    segs[stem][3].unlink()
    assert load_paths([str(tmp_path)]).problems == ()  # 000005 alone: nothing missing


def test_a_run_of_missing_segments_is_one_problem(tmp_path: Path) -> None:
    segs = _write_segments(tmp_path, _run())
    stem = sorted(segs)[0]
    for path in segs[stem][1:5]:
        path.unlink()
    (problem,) = load_paths([str(tmp_path)]).problems
    assert problem.source == str(tmp_path / f"{stem}.000002.otlp.jsonl")
    assert problem.message.startswith(
        "missing: segments 000002 to 000005 (4) are not there, between 000001 and 000006")


def test_the_same_segment_plain_and_compressed_is_read_once(tmp_path: Path) -> None:
    trace = _run()
    whole = _whole(tmp_path / "whole", trace)
    (tmp_path / "seg").mkdir()
    segs = _write_segments(tmp_path / "seg", trace)
    copy = segs[sorted(segs)[0]][1]
    twin = copy.with_name(copy.name + ".gz")
    twin.write_bytes(gzip.compress(copy.read_bytes()))
    loaded = load_paths([str(tmp_path / "seg")])
    assert _content(loaded) == _content(whole)
    assert [(p.source, p.message) for p in loaded.problems] == [
        (str(twin), f"skipped: the same segment as {copy} (given twice)")]


def test_a_segment_rotated_away_while_loading_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segs = _write_segments(tmp_path, _run())
    first = {paths[0] for paths in segs.values()}
    real = load_files.open_regular

    def rotate_then_open(path: str) -> Any:
        if Path(path) in first:
            os.unlink(path)  # the writer deletes its oldest segment just now
        return real(path)

    monkeypatch.setattr(load_files, "open_regular", rotate_then_open)
    trace = load_paths([str(tmp_path)])
    assert trace.problems == ()
    assert all(len(p.events) == 10 for p in trace.processes)  # 12 less the first segment's 2
    assert not any(str(p) in trace.sources for p in first)
    # All of them gone: nothing to read, and that is no error either.
    for paths in segs.values():
        for path in paths:
            path.unlink(missing_ok=True)
    monkeypatch.setattr(load_files, "open_regular", real)
    assert load_paths([str(tmp_path)], allow_empty=True).processes == ()


def test_follow_sees_segments_appear_and_disappear(tmp_path: Path) -> None:
    trace = _run()
    (tmp_path / "all").mkdir()
    segs = _write_segments(tmp_path / "all", trace)
    live = tmp_path / "live"
    live.mkdir()
    reload = _reloader([str(live)], follow=True)
    seen = []
    for step in range(6):
        for paths in segs.values():
            os.link(paths[step], live / paths[step].name)  # the writer opens the next one
            if step >= 2:
                (live / paths[step - 2].name).unlink()  # and deletes its oldest
        loaded, _ = reload(lambda phase: None)
        assert loaded.problems == ()
        seen.append([len(p.events) for p in loaded.processes])
    assert seen == [[2, 2], [4, 4], [4, 4], [4, 4], [4, 4], [4, 4]]


def test_gzip_dcf_makes_one_plain_file_of_a_rotated_trace(tmp_path: Path) -> None:
    """docs/schema.md's command for a tool that reads neither gzip nor segments: ``gzip -dcf
    STEM.*`` (a shell glob sorts six-digit segment numbers in order; -f passes plain ones)."""
    gz = shutil.which("gzip")
    assert gz is not None, "gzip(1) is part of every system this runs on"
    trace = _run()
    whole = _whole(tmp_path / "whole", trace)
    (tmp_path / "seg").mkdir()
    segs = _write_segments(tmp_path / "seg", trace, gz=frozenset({1, 3, 4}))
    (tmp_path / "one").mkdir()
    for stem, paths in segs.items():
        names = sorted(str(p) for p in paths)  # what the shell's glob gives
        out = subprocess.run([gz, "-dcf", *names], check=True, capture_output=True).stdout
        (tmp_path / "one" / f"{stem}.otlp.jsonl").write_bytes(out)
    assert _content(load_paths([str(tmp_path / "one")])) == _content(whole)
