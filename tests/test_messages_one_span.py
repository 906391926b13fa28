"""A receive is one span in a trace file when its begin and end are in one flush.

The file encoder leaves out a receive's begin whose end is in the same flush and marks that end
``pptrace.msg.with_begin`` (``pptrace.model.messages.fold_begins``); the loader gives the begin
back (``begin_of``). What keeps it honest: a begin whose end comes in a later flush is still
written (the hang evidence); an end that never had a begin (served from the stash) is never
marked; a begin that its end would not give back exactly is written; both forms load to the
same events, on the fast path and the ordinary one, read once or twice; the shipper gives OTLP
both spans. On real demo runs (slow): no flush of a healthy run's file holds a begin next to its
end, and the one-span form of real flushes loads to the events of the two-span form.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import process_resource
from pptrace.load import messages as load_messages
from pptrace.load.builder import TraceBuilder
from pptrace.load.loader import load_paths
from pptrace.load.otlp import for_each_otlp_span
from pptrace.model import messages as M
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import RankInfo, TensorMeta
from pptrace.ship.reencode import Reencoder
from tests.helpers_samples import run_sample

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=41)
_T0 = 1_700_000_000_000_000_000


def _receive(seq: int, *, at: int = 0, kind: str = "proxy", expected: str = "proxy",
             error: bool = False, from_stash: bool = False) -> tuple[MessageEvent, MessageEvent]:
    """A receive's begin and end, as the wrappers record them."""
    begin = MessageEvent(op=MessageOp.RECV, phase="begin", seq=seq, wall_ns=_T0 + at,
                         mono_ns=9_000 + at, duration_ns=-1, thread_id=7, peer=0,
                         peer_pp_rank=0, peer_tp_rank=0, expected_kind=expected)
    ts = (TensorMeta.of_key("hidden_states", (4, 32), "float32", "cpu", 512),
          TensorMeta.of_key("__msg_type__", (), "str", "", 0, is_tensor=False))
    end = begin._replace(phase="end", duration_ns=1_000 + at, kind=kind,
                         keys=("hidden_states", "__msg_type__"), tensors=ts,
                         stashed=kind != expected, from_stash=from_stash)
    if error:
        end = end._replace(kind="", keys=(), tensors=(), error_type="RuntimeError",
                           error_message="Connection closed by peer")
    return begin, end


def _send(seq: int, at: int) -> MessageEvent:
    return MessageEvent(op=MessageOp.SEND, phase="end", seq=seq, wall_ns=_T0 + at,
                        mono_ns=9_000 + at, duration_ns=50, thread_id=7, peer=0,
                        peer_pp_rank=0, peer_tp_rank=0, kind="output", keys=("next_token_ids",),
                        tensors=(TensorMeta.of_key("next_token_ids", (4,), "int64", "cpu", 32),))


def _spans(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out += ss["spans"]
    return out


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in span.get("attributes", []):
        (value,) = a["value"].values() if a["value"] else (None,)
        out[a["key"]] = int(value) if isinstance(value, str) and value.isdigit() else value
    return out


def _write(path: Path, flushes: list[list[MessageEvent]], version: int = 2) -> None:
    sink = FileSink(str(path), process_resource(RANK, "run1", version))
    for flush in flushes:
        sink.export_messages(flush, RANK, "run1")
    sink.shutdown(1.0)


def _loaded(path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool) -> tuple[MessageEvent, ...]:
    if not fast:  # every line the ordinary way
        monkeypatch.setattr("pptrace.load.fast.FastLines.line", lambda self, text: False)
    trace = load_paths([str(path)])
    assert not trace.problems, trace.problems
    (proc,) = trace.processes
    return proc.messages


# --- what the encoder folds ---------------------------------------------------------------------

def test_fold_leaves_out_a_begin_whose_end_is_in_the_flush_and_marks_that_end() -> None:
    b0, e0 = _receive(0)
    b1, e1 = _receive(1, at=5_000)
    s0 = _send(0, 2_000)
    assert M.fold_begins([b0, e0, s0, b1]) == [(e0, True), (s0, False), (b1, False)]
    assert M.begin_of(e0) == b0 and M.begin_of(e1) == b1


@pytest.mark.parametrize("case", ["end-first", "end-elsewhere", "not-given-back", "stash",
                                  "twice"])
def test_fold_keeps_what_its_end_does_not_give_back(case: str) -> None:
    b0, e0 = _receive(0)
    flush = {
        "end-first": [e0, b0],  # never recorded so; nothing is lost if it were
        "end-elsewhere": [b0],
        "not-given-back": [b0._replace(thread_id=8), e0],
        "stash": [_receive(0, from_stash=True)[1]],
        "twice": [b0, b0, e0],
    }[case]
    folded = M.fold_begins(flush)
    if case == "twice":  # one begin left out (the end gives it back), its double kept
        assert folded == [(b0, False), (e0, True)]
    else:
        assert folded == [(ev, False) for ev in flush]


def test_only_a_receives_end_can_stand_for_its_begin() -> None:
    b0, _ = _receive(0)
    for ev in (b0, _send(0, 0)):
        with pytest.raises(ValueError, match="only a receive's end"):
            M.to_attributes(ev, None, True)
    with pytest.raises(M.BadMessageSpan, match=M.WITH_BEGIN):
        M.implies_begin({M.WITH_BEGIN: True}, M.SPAN_SEND)
    with pytest.raises(M.BadMessageSpan, match=M.WITH_BEGIN):
        M.implies_begin({M.WITH_BEGIN: 1}, M.SPAN_RECV)


# --- what the file holds, and what it loads to --------------------------------------------------

_STASHED = _receive(4, at=40_000, from_stash=True)[1]


def _flushes() -> list[list[MessageEvent]]:
    """A run's flushes: receives ended in their flush (one raised, one stashed another kind),
    one that blocked across a flush, a stash-served one, sends between them."""
    r = [_receive(0), _receive(1, at=10_000, kind="output"), _receive(2, at=20_000, error=True),
         _receive(3, at=30_000)]
    return [
        [r[0][0], r[0][1], _send(0, 5_000), r[1][0]],
        [r[1][1], r[2][0], r[2][1], r[3][0]],
        [],
        [r[3][1], _STASHED, _send(1, 45_000)],
    ]


@pytest.mark.parametrize("fast", [True, False])
def test_a_file_of_flushes_holds_lone_begins_only_and_loads_as_both_spans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    one, two = tmp_path / "one" / "pptrace-rank1-pid41.otlp.jsonl", tmp_path / "two.jsonl"
    flushes = _flushes()
    _write(one, flushes)
    _write(two, [[ev] for flush in flushes for ev in flush])  # the two-span form
    spans = _spans(one)
    begins = [_attrs(s)[M.SEQ] for s in spans if s["name"] == M.SPAN_RECV_BEGIN]
    marked = [_attrs(s)[M.SEQ] for s in spans if _attrs(s).get(M.WITH_BEGIN) is True]
    assert begins == [1, 3]  # the receives that blocked across a flush
    assert marked == [0, 2]  # the stash-served receive (seq 4) had no begin to stand for
    assert len(_spans(two)) == len(spans) + 2
    assert not any(M.WITH_BEGIN in _attrs(s) for s in _spans(two))
    everything = load_messages.in_call_order(ev for flush in flushes for ev in flush)
    assert _loaded(one, monkeypatch, fast) == everything
    assert _loaded(two, monkeypatch, fast) == everything


def test_the_fast_path_gives_the_begin_of_a_cached_shape_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    flushes = [list(_receive(i, at=i * 10_000)) for i in range(10)]  # one shape, ten times
    _write(path, flushes)
    builder = TraceBuilder()
    builder.start_file(str(path))
    assert all(builder.fast.line(line) for line in path.read_bytes().splitlines())
    assert builder.fast.messages.decodes == 1  # learnt once, then rebuilt from the template
    (got,) = builder.messages.values()
    assert got == [ev for flush in flushes for ev in flush]


def test_a_line_read_twice_loads_each_receive_once(tmp_path: Path) -> None:
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    flushes = _flushes()
    _write(path, flushes)
    path.write_text(path.read_text() * 2)
    (proc,) = load_paths([str(path)]).processes
    assert proc.messages == load_messages.in_call_order(ev for f in flushes for ev in f)


def test_version_1_spans_are_never_folded(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    _write(path, [list(_receive(0))], version=1)
    assert [s["name"] for s in _spans(path)] == [M.SPAN_RECV_BEGIN, M.SPAN_RECV]


def test_a_marked_span_on_a_send_is_a_problem_named_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    _write(path, [[_send(0, 0)], list(_receive(0, at=1_000))])
    text = path.read_text().splitlines()
    marker = '{"key":"pptrace.msg.with_begin","value":{"boolValue":true}}'
    assert marker in text[1]
    span_attrs = '"attributes":[{"key":"pptrace.msg.seq"'
    assert text[0].count(span_attrs) == 1
    text[0] = text[0].replace(span_attrs, span_attrs.replace("[", "[" + marker + ","))
    path.write_text("\n".join(text) + "\n")
    trace = load_paths([str(path)])
    assert [p.message for p in trace.problems] == [
        f"skipped a pptrace.send span: {M.WITH_BEGIN}: True on a pptrace.send span (only true, "
        "and only on a pptrace.recv)"]
    (proc,) = trace.processes
    assert proc.messages == _receive(0, at=1_000)


def test_the_shipper_gives_otlp_the_begin_the_file_left_out(tmp_path: Path) -> None:
    path = tmp_path / "pptrace-rank1-pid41.otlp.jsonl"
    _write(path, [list(_receive(0))])
    (line,) = path.read_text().splitlines()
    out = Reencoder().line(line)
    assert out.messages == 2
    shipped = [s for ln in out.lines for rs in json.loads(ln)["resourceSpans"]
               for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert [s["name"] for s in shipped] == [M.SPAN_RECV_BEGIN, M.SPAN_RECV]
    assert not any(M.WITH_BEGIN in _attrs(s) for s in shipped)


# --- real demo runs -----------------------------------------------------------------------------

def _members(path: Path) -> list[list[str]]:
    """A gzip trace file's members (one write: one flush of a kind), each as its lines."""
    data, out = path.read_bytes(), []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data).decode().splitlines())
        data = d.unused_data
    return out


def _member_spans(lines: list[str]) -> list[dict[str, Any]]:
    return [s for ln in lines for rs in json.loads(ln)["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.slow
def test_a_healthy_runs_flushes_hold_no_begin_beside_its_end(tmp_path: Path) -> None:
    result, _ = run_sample(str(tmp_path), ranks=4, steps=12,
                           env=(("PPTRACE_COMPRESS", "gzip"),))
    assert result.ok
    marked = 0
    files = sorted(tmp_path.glob("*.jsonl.gz"))
    assert len(files) == 4
    for path in files:
        for member in _members(path):
            spans = _member_spans(member)
            begins = {_attrs(s)[M.SEQ] for s in spans if s["name"] == M.SPAN_RECV_BEGIN}
            ends = {_attrs(s)[M.SEQ] for s in spans if s["name"] == M.SPAN_RECV}
            assert not begins & ends, path
            marked += sum(_attrs(s).get(M.WITH_BEGIN) is True for s in spans)
    trace = load_paths([str(tmp_path)])
    assert not trace.problems
    wire = 0
    for proc in trace.processes:
        recvs = [m for m in proc.messages if m.op is MessageOp.RECV]
        ended = {m.seq for m in recvs if m.phase == "end" and not m.from_stash}
        assert ended == {m.seq for m in recvs if m.phase == "begin"}
        wire += len(ended)
    assert 0 < marked <= wire


@pytest.mark.slow
def test_real_flushes_load_the_same_in_either_form(tmp_path: Path) -> None:
    """A version 1 run's gzip members are its real flushes, each receive's begin a span of its
    own (the two-span form); the same flushes written as version 2 fold what they can."""
    old, new = tmp_path / "old", tmp_path / "new"
    result, _ = run_sample(str(old), ranks=4, steps=12,
                           env=(("PPTRACE_COMPRESS", "gzip"), ("PPTRACE_SCHEMA", "1")))
    assert result.ok
    folded = 0
    for path in sorted(old.glob("*.jsonl.gz")):
        sink: FileSink | None = None
        for member in _members(path):
            builder = TraceBuilder()
            builder.start_file(str(path))
            for line in member:
                for_each_otlp_span(json.loads(line), builder)
            if not builder.messages:
                continue
            ((key, flush),) = builder.messages.items()
            rank = builder.ranks[key]
            if sink is None:
                sink = FileSink(str(new / path.name.removesuffix(".gz")),
                                process_resource(rank, "", 2))
            folded += sum(both for _, both in M.fold_begins(flush))
            sink.export_messages(flush, rank, "")
        assert sink is not None
        sink.shutdown(1.0)
    assert folded > 0
    before, after = load_paths([str(old)]), load_paths([str(new)])
    assert not before.problems and not after.problems
    assert ({p.rank.rank: p.messages for p in before.processes}
            == {p.rank.rank: p.messages for p in after.processes})
    written = sum(gzip.decompress(p.read_bytes()).count(b'"pptrace.recv.begin"')
                  for p in old.glob("*.gz"))
    kept = sum(p.read_bytes().count(b'"pptrace.recv.begin"') for p in new.glob("*.jsonl"))
    assert kept == written - folded


@pytest.mark.slow
def test_a_receive_that_hangs_leaves_its_begin_as_a_span_of_its_own(tmp_path: Path) -> None:
    """The hang evidence: a receive blocked past a flush (4 s against 1 s) is on disk as its
    begin before it returns, so its end, when it comes, stands for itself alone."""
    result, _ = run_sample(str(tmp_path), ranks=2, steps=4, fault="recv-hangs",
                           comm_timeout=4.0)
    assert not result.ok
    (waiter,) = [p for p in load_paths([str(tmp_path)]).processes if p.rank.pp_rank == 1]
    ends = {m.seq: m for m in waiter.messages if m.op is MessageOp.RECV and m.phase == "end"}
    (hung,) = [m.seq for m in waiter.messages if m.op is MessageOp.RECV and m.phase == "begin"
               and (m.seq not in ends or not ends[m.seq].ok)]
    (path,) = tmp_path.glob(f"pptrace-rank{waiter.rank.rank}-*.jsonl")
    spans = [(s["name"], _attrs(s)) for s in _spans(path) if s["name"] in M.SPAN_NAMES]
    assert (M.SPAN_RECV_BEGIN, hung) in [(n, a[M.SEQ]) for n, a in spans]
    assert not any(a.get(M.WITH_BEGIN) for n, a in spans if a[M.SEQ] == hung and n == M.SPAN_RECV)
