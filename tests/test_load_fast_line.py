"""A line whose every span is of a known shape is read in one pass (``pptrace.load.fast_line``),
to exactly what the per-span fast path and the ordinary JSON path read from it.

The traces are written by the real ``FileSink`` (attach/extract events and message spans, in
schema versions 1 to 3, with and without content fingerprints); each is loaded three ways (the
one pass, the per-span path alone, the ordinary path alone) and the Traces compared whole. Then
lines that the one pass must give back (a foreign span among known ones, a changed shape, text
between spans, a number beyond int64 in a worker's rows) are loaded the same three ways.
"""

from __future__ import annotations

import json
import re
from array import array
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource
from pptrace.load import worker
from pptrace.load.builder import TraceBuilder
from pptrace.load.fast import FastLines
from pptrace.load.fast_line import KnownShapes
from pptrace.load.files import read_files
from pptrace.load.loader import load_paths
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, meta


def _messages(n: int, fingerprints: bool) -> list[MessageEvent]:
    """``n`` message calls of a few shapes: sends, and receives (a begin and an end each)."""
    out: list[MessageEvent] = []
    for i in range(n):
        batch = (1, 4, 8)[i % 3]
        ts = (TensorMeta.of_key("hidden_states", (batch, 64), "bfloat16", "cuda", batch * 128,
                                fingerprint=f"b2:{i:016x}" if fingerprints else None),)
        op = MessageOp.RECV if i % 2 else MessageOp.SEND
        common: dict[str, Any] = dict(
            op=op, seq=i // 2, wall_ns=1_700_000_000_000_000_000 + i * 1000,
            mono_ns=5_000 + i * 1000, thread_id=7, peer=0 if op is MessageOp.RECV else 2,
            kind="proxy", keys=("hidden_states", "__msg_type__"), tensors=ts)
        if op is MessageOp.RECV:
            out.append(MessageEvent(phase="begin", duration_ns=-1, **common))
        out.append(MessageEvent(phase="end", duration_ns=300 + i, **common))
    return out


def _write(directory: Path, version: int, fingerprints: bool) -> list[Path]:
    """Two processes' files: attach/extract events 16 a line, message spans 40 a line."""
    run = Run(pp_size=2)
    for k in range(60):
        fp = [f"b2:{k:08x}{j:08x}" if fingerprints else None for j in (0, 1)]
        run.step([meta("scores", (k % 3 + 1, 5), fingerprint=fp[0]),
                  meta("ids", (k % 3 + 1,), "int64", fingerprint=fp[1])])
    paths = []
    for proc in run.trace().processes:
        path = directory / f"pptrace-rank{proc.rank.rank}-v{version}.otlp.jsonl"
        sink = FileSink(str(path), process_resource(proc.rank, run.run_id, version))
        for i in range(0, len(proc.events), 16):
            sink.export(list(proc.events[i:i + 16]))
        messages = _messages(240, fingerprints)
        for i in range(0, len(messages), 40):
            sink.export_messages(messages[i:i + 40], proc.rank, run.run_id)
        sink.shutdown(1.0)
        paths.append(path)
    return paths


def _three_ways(monkeypatch: pytest.MonkeyPatch, paths: list[str]) -> tuple[Trace, int]:
    """The Trace the one pass gives (checked equal to the per-span and the ordinary path's),
    and how many lines the one pass read."""
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    read = 0
    real = KnownShapes.read

    def counting(self: KnownShapes, *args: Any) -> Any:
        nonlocal read
        got = real(self, *args)
        read += got is not None
        return got

    with monkeypatch.context() as m:
        m.setattr(KnownShapes, "read", counting)
        one_pass = load_paths(paths)
    with monkeypatch.context() as m:
        m.setattr(KnownShapes, "read", lambda self, *args: None)
        per_span = load_paths(paths)
    with monkeypatch.context() as m:
        m.setattr(FastLines, "line", lambda self, text: False)
        ordinary = load_paths(paths)
    assert one_pass == per_span == ordinary
    return one_pass, read


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("fingerprints", [False, True])
def test_known_lines_are_read_in_one_pass_to_what_the_other_paths_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int,
        fingerprints: bool) -> None:
    paths = _write(tmp_path, version, fingerprints)
    lines = sum(len(p.read_bytes().splitlines()) for p in paths)
    trace, read = _three_ways(monkeypatch, [str(p) for p in paths])
    assert not trace.problems
    assert [len(p.events) for p in trace.processes] == [60, 60]
    assert [len(p.messages) for p in trace.processes] == [360, 360]
    # All but the lines that teach the shapes: a file's first attach/extract line and its
    # first message line; in version 1, whose message spans begin with their op and phase
    # (cut by markers, span by span), the attach/extract lines but the first.
    assert read == (lines - 4 if version >= 2 else 2 * 3)


def test_after_its_shapes_are_learned_a_line_takes_no_per_span_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _write(tmp_path, 2, fingerprints=False)
    spans = 0
    real = FastLines._spans

    def counting(self: FastLines, chunks: list[bytes], res: Any) -> Any:
        nonlocal spans
        spans += len(chunks)
        return real(self, chunks, res)

    monkeypatch.setattr(FastLines, "_spans", counting)
    builder = TraceBuilder()
    files = [str(p) for p in paths]
    assert read_files(files, {f: 0 for f in files}, builder, None) == []
    # 60 attach/extract spans (4 lines) and 240 message spans (6 lines) a file, of 3 + 9
    # shapes: only the lines that teach them (the first of each kind) go span by span.
    assert spans == 2 * (16 + 40)


def _mutate(path: Path, line: int, change: Any) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    new = change(lines[line])
    assert new != lines[line]
    lines[line] = new
    path.write_bytes(b"".join(lines))


_FOREIGN = (b'{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef",'
            b'"name":"http.get","kind":2,"startTimeUnixNano":"1","endTimeUnixNano":"2",'
            b'"attributes":[]}')
_SPAN = b',{"traceId":"'
_MUTATIONS = {
    # a span of another tool among known ones
    "foreign span in the middle": lambda t: t.replace(_SPAN, b"," + _FOREIGN + _SPAN, 1),
    "foreign span first": lambda t: t.replace(b'"spans":[{', b'"spans":[' + _FOREIGN + b",{", 1),
    # one span's shape text changed: a shape not seen before, among known ones
    "one span of a new shape": lambda t: t.replace(b'"stringValue":"int64"',
                                                   b'"stringValue":"int32"', 1),
    "one message of a new shape": lambda t: t.replace(b'"stringValue":"proxy"',
                                                      b'"stringValue":"proxz"', 1),
    # text the per-span path does not split at
    "a space between two spans": lambda t: t.replace(_SPAN, b', {"traceId":"', 1),
    # a member the JSON decoder would read twice (the last one wins)
    "a duplicate name": lambda t: t.replace(b"]}" + _SPAN, b'],"name":"x"}' + _SPAN, 1),
    # the scope's and the resource's schema URLs after the spans (read in one pass)
    "schema URLs in the tail": lambda t: re.sub(rb"\]\}\]\}\]\}(\s*)$",
                                                rb'],"schemaUrl":"u"}],"schemaUrl":"v"}]}\1', t),
    # a number the per-span path cuts but an int64 row cannot hold (read in one pass here)
    "a monotonic clock of 20 digits": lambda t: re.sub(
        rb'("pptrace\.(?:msg\.)?mono_ns","value":\{"intValue":")\d+', rb"\g<1>99999999999999999999",
        t, count=1),
    # a torn line: the ordinary path's problem, the same whichever path tried it first
    "a torn line": lambda t: t[: len(t) // 2] + b"\n",
}


_EVENTS_LINE, _MESSAGES_LINE = 2, 8  # (lines 0 to 3: attach/extract spans; then messages)
_CASES = [(m, line) for m in sorted(_MUTATIONS) for line in (_EVENTS_LINE, _MESSAGES_LINE)
          if (m, line) not in {("one span of a new shape", _MESSAGES_LINE),
                               ("one message of a new shape", _EVENTS_LINE)}]


@pytest.mark.parametrize(("mutation", "line"), _CASES)
def test_a_line_it_must_give_back_is_read_as_the_other_paths_read_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutation: str, line: int) -> None:
    paths = _write(tmp_path, 2, fingerprints=False)
    _mutate(paths[0], line, _MUTATIONS[mutation])
    _, read = _three_ways(monkeypatch, [str(p) for p in paths])
    # Every line but those that teach the shapes and, unless it is one the one pass reads as
    # well, this one.
    read_too = mutation in ("schema URLs in the tail", "a monotonic clock of 20 digits")
    assert read == 26 - 4 - (not read_too)


@pytest.mark.parametrize("line", [_EVENTS_LINE, _MESSAGES_LINE])
def test_a_worker_line_beyond_int64_is_read_span_by_span_with_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: int) -> None:
    paths = _write(tmp_path, 2, fingerprints=False)
    _mutate(paths[0], line, _MUTATIONS["a monotonic clock of 20 digits"])
    files = [str(p) for p in paths]
    given_back = 0
    real = FastLines._known

    def spy(self: FastLines, *args: Any) -> bool:
        nonlocal given_back
        got = real(self, *args)
        given_back += not got
        return got

    monkeypatch.setattr(FastLines, "_known", spy)
    here = TraceBuilder()  # the worker's side: rows, then taken in as the loader does
    here.fast.rows = array("q")
    here.fast.messages.rows = array("q")
    assert read_files(files, {f: 0 for f in files}, here, None) == []
    data, rows = worker._encode(here, [], None)
    taken = TraceBuilder()
    assert worker.take(taken, json.loads(data), rows) == ([], None)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    assert taken.build(files) == load_paths(files)
    big = int("9" * 20)
    trace = load_paths(files)
    assert any(e.mono_ns == big for p in trace.processes for e in p.events) or any(
        m.mono_ns == big for p in trace.processes for m in p.messages)
    assert given_back >= 1


@pytest.mark.parametrize("version", [1, 2])
def test_two_processes_lines_in_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         version: int) -> None:
    # Each line's spans are one process's (its resource), and its messages go to that
    # process's list: the lines of two processes, taken in turn, must not be mixed up.
    one, two = (p.read_bytes().splitlines(keepends=True)
                for p in _write(tmp_path, version, fingerprints=False))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"".join(x for pair in zip(one, two, strict=True) for x in pair))
    trace, read = _three_ways(monkeypatch, [str(mixed)])
    assert [len(p.messages) for p in trace.processes] == [360, 360]
    assert read == (26 - 4 if version >= 2 else 2 * 3)


def test_the_pattern_reads_each_span_as_the_per_span_patterns_do() -> None:
    from pptrace.load import fast, fast_messages

    ids = rb'[0-9a-f]{32}","spanId":"[0-9a-f]{16}'
    event, message = fast._OWN.pattern, fast_messages.OWN_SPAN.pattern
    assert event.startswith(ids) and message.startswith(ids)
    assert fast._LINE_SPANS.pattern == (re.escape(b'{"traceId":"') + ids + b"(?:"
                                        + event[len(ids):] + b"|" + message[len(ids):] + b")")
