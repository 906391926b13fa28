"""``pptrace export --perfetto``: Chrome trace-event JSON, checked against the format.

``problems(doc)`` is a validator of the trace-event format as Perfetto's JSON importer reads it:
the fields each phase needs, non-negative times, pids and tids that fit its 32 bits, metadata
naming every process and thread used, complete slices that nest on each thread, and v1 flows
whose ``s`` and ``f`` (same id, category and name) each bind to a slice of their thread: inside
it (as Perfetto binds) and at its very start, in its category (as Chrome's trace viewer and
DevTools bind a flow event: equal ts, pid, tid and cat).
It is tested to fail on broken documents first, then run on every document built here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairs import Pairs
from pptrace.cli.main import main
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import TensorMeta
from pptrace.model.trace import ProcessTrace, Trace
from pptrace.report.perfetto import AUX_FLOW, MESSAGE_FLOW, WAITING, to_chrome_trace
from tests.helpers_analyze import BASE_NS, Run, meta

GOLDEN = str(Path(__file__).parent / "data" / "golden-pp2")
NEEDS = {"X": ("name", "ph", "ts", "dur", "pid", "tid"), "i": ("name", "ph", "ts", "pid", "s"),
         "s": ("name", "cat", "ph", "id", "ts", "pid", "tid"),
         "f": ("name", "cat", "ph", "id", "ts", "pid", "tid", "bp"),
         "M": ("name", "ph", "pid", "args")}
META = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


# --- the validator -------------------------------------------------------------------------

def _ns(value: Any) -> int:
    return round(value * 1000)  # as Perfetto reads a µs number: llround(value * 1000)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def problems(doc: Any) -> list[str]:
    """Everything in ``doc`` that the trace-event format (as Perfetto imports it) refuses."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not a {'traceEvents': [...]} document"]
    out: list[str] = []
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        out.append("displayTimeUnit is neither ms nor ns")
    named_pids, named_threads, used_pids, used_threads = set(), set(), set(), set()
    slices: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    starts: set[tuple[int, int, int, Any]] = set()  # (pid, tid, ts, cat) of every slice
    flows: dict[tuple[str, str, Any], dict[str, list[tuple[int, int, int]]]] = defaultdict(
        lambda: {"s": [], "f": []})
    for n, ev in enumerate(doc["traceEvents"]):
        ph = ev.get("ph") if isinstance(ev, dict) else None
        if ph not in NEEDS:
            out.append(f"event {n}: phase {ph!r} is not one this exporter writes")
            continue
        missing = [k for k in NEEDS[ph] if k not in ev]
        if missing:
            out.append(f"event {n} ({ph}): missing {', '.join(missing)}")
            continue
        if not isinstance(ev["name"], str):
            out.append(f"event {n}: name is not a string")
        pid, tid = ev["pid"], ev.get("tid", 0)
        if not all(isinstance(v, int) and 0 <= v < 2**31 for v in (pid, tid)):
            out.append(f"event {n}: pid/tid {pid}/{tid} not a 31-bit number")
        if ph == "M":
            if ev["name"] not in META:
                out.append(f"event {n}: unknown metadata {ev['name']!r}")
            elif ev["name"] == "process_name":
                named_pids.add(pid)
            elif ev["name"] == "thread_name":
                named_threads.add((pid, tid))
            continue
        if not _number(ev["ts"]) or (ph == "X" and not _number(ev["dur"])):
            out.append(f"event {n} ({ph}): ts/dur not a number >= 0")
            continue
        used_pids.add(pid)
        if ph == "X":
            used_threads.add((pid, tid))
            slices[(pid, tid)].append((_ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])))
            starts.add((pid, tid, _ns(ev["ts"]), ev.get("cat")))
        elif ph == "i" and ev["s"] not in ("g", "p", "t"):
            out.append(f"event {n}: instant scope {ev['s']!r}")
        elif ph in ("s", "f"):
            used_threads.add((pid, tid))
            if ph == "f" and ev["bp"] != "e":
                out.append(f"event {n}: flow end binds to the next slice, not its own")
            flows[(ev["cat"], ev["name"], ev["id"])][ph].append((pid, tid, _ns(ev["ts"])))
    out += [f"pid {p} has no process_name" for p in sorted(used_pids - named_pids)]
    out += [f"thread {t} has no thread_name" for t in sorted(used_threads - named_threads)]
    for thread, spans in slices.items():
        stack: list[int] = []  # ends of the open slices
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1]:
                out.append(f"thread {thread}: slice [{start}, {end}) overlaps its parent")
            stack.append(end)
    for key, ends in flows.items():
        if len(ends["s"]) != 1 or len(ends["f"]) != 1:
            out.append(f"flow {key}: {len(ends['s'])} starts and {len(ends['f'])} ends")
            continue
        for pid, tid, ns in (ends["s"][0], ends["f"][0]):
            if not any(a <= ns < b for a, b in slices.get((pid, tid), ())):
                out.append(f"flow {key}: no slice of thread {(pid, tid)} around {ns}")
            elif (pid, tid, ns, key[0]) not in starts:
                out.append(f"flow {key}: no slice of category {key[0]!r} on thread "
                           f"{(pid, tid)} starts at {ns}")
    return out


def _valid(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` after a JSON round trip, checked (so every test validates what it reads)."""
    back = json.loads(json.dumps(doc))
    assert back == doc
    assert problems(back) == []
    return back


def _of(doc: dict[str, Any], ph: str, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and name in (None, e["name"])]


def _flow_ends(doc: dict[str, Any], name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(slice at the start, slice at the end) of every flow called ``name``, by id."""
    slices = _of(doc, "X")

    def around(ev: dict[str, Any]) -> dict[str, Any]:
        ns = _ns(ev["ts"])
        (hit,) = [s for s in slices if (s["pid"], s["tid"]) == (ev["pid"], ev["tid"])
                  and _ns(s["ts"]) <= ns < _ns(s["ts"]) + _ns(s["dur"])]
        return hit

    starts = {e["id"]: e for e in _of(doc, "s", name)}
    ends = {e["id"]: e for e in _of(doc, "f", name)}
    assert starts.keys() == ends.keys()
    return [(around(starts[i]), around(ends[i])) for i in sorted(starts)]


def _names(doc: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in _of(doc, "M", "process_name")}


# --- the validator can fail ------------------------------------------------------------------

def _tiny() -> dict[str, Any]:
    return {"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "rank 0"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "main"}},
        {"name": "attach", "cat": "c", "ph": "X", "ts": 0, "dur": 2.0, "pid": 1, "tid": 2},
        {"name": "extract", "cat": "c", "ph": "X", "ts": 3.0, "dur": 1.0, "pid": 1, "tid": 2},
        {"name": "a", "cat": "c", "ph": "s", "id": 1, "ts": 0, "pid": 1, "tid": 2},
        {"name": "a", "cat": "c", "ph": "f", "id": 1, "ts": 3.0, "pid": 1, "tid": 2, "bp": "e"},
    ], "displayTimeUnit": "ns"}


@pytest.mark.parametrize(("break_it", "said"), [
    (lambda d: d["traceEvents"][2].pop("dur"), "missing dur"),
    (lambda d: d["traceEvents"][3].update(ts=-1), "ts/dur not a number"),
    (lambda d: d["traceEvents"][3].update(dur="1"), "ts/dur not a number"),
    (lambda d: d["traceEvents"].pop(5), "1 starts and 0 ends"),
    (lambda d: d["traceEvents"][5].update(name="b"), "1 starts and 0 ends"),
    (lambda d: d["traceEvents"][5].update(bp="n"), "binds to the next slice"),
    (lambda d: d["traceEvents"][4].update(ts=2.5), "no slice of thread"),
    (lambda d: d["traceEvents"][4].update(ts=1.0), "starts at 1000"),
    (lambda d: [e.update(cat="other") for e in d["traceEvents"][4:]], "of category 'other'"),
    (lambda d: d["traceEvents"].pop(0), "pid 1 has no process_name"),
    (lambda d: d["traceEvents"].pop(1), "has no thread_name"),
    (lambda d: d["traceEvents"][3].update(ts=1.5), "overlaps its parent"),
    (lambda d: d["traceEvents"][3].update(tid=2**40), "not a 31-bit number"),
], ids=["no dur", "negative ts", "string dur", "start without end", "ends differ by name",
        "end binds next", "start outside slices", "start inside, not at the start",
        "flow in another category", "no process name", "no thread name",
        "slices cross", "64-bit tid"])
def test_the_validator_finds_each_break(break_it: Any, said: str) -> None:
    doc = _tiny()
    assert problems(doc) == []
    break_it(doc)
    assert any(said in p for p in problems(doc)), problems(doc)


# --- attach/extract --------------------------------------------------------------------------

def test_a_track_per_rank_sorted_by_stage_then_tp_with_a_flow_per_pair() -> None:
    run = Run(pp_size=2, tp_size=2)
    for k in range(3):
        run.step([meta("scores", (4 + k, 5)), meta("ids", (4 + k,), "int64")])
    trace = run.trace()
    # The loader's order is not the track order: shuffle the processes.
    trace = Trace(processes=tuple(reversed(trace.processes)))
    doc = _valid(to_chrome_trace(trace, []))
    order = sorted(_of(doc, "M", "process_sort_index"), key=lambda e: e["args"]["sort_index"])
    assert [_names(doc)[e["pid"]] for e in order] == [
        "rank 0 (pp 0/2, tp 0)", "rank 1 (pp 0/2, tp 1)",
        "rank 2 (pp 1/2, tp 0)", "rank 3 (pp 1/2, tp 1)"]
    assert len(_of(doc, "X", "attach")) == len(_of(doc, "X", "extract")) == 6
    pairs = _flow_ends(doc, AUX_FLOW)
    assert len(pairs) == 6 and doc["otherData"]["flows"][AUX_FLOW] == 6
    for a, e in pairs:
        assert (a["name"], e["name"]) == ("attach", "extract")
        assert a["args"]["seq"] == e["args"]["seq"]
        # TP rank j of the last stage to TP rank j of stage 0
        assert _names(doc)[a["pid"]][-5:] == _names(doc)[e["pid"]][-5:]
        assert a["args"]["names"] == ["scores", "ids"]
        assert a["ts"] <= e["ts"]
    first = min(_of(doc, "X", "attach"), key=lambda e: e["ts"])
    assert first["ts"] == 0  # times start at the earliest record
    assert first["args"] == {"seq": 0, "names": ["scores", "ids"], "shapes": ["[4, 5]", "[4]"],
                             "dtypes": ["float32", "int64"], "bytes": [80, 16],
                             "total_bytes": 96, "subject_type": "demo.Scores"}
    assert first["dur"] == 0.5  # 500 ns


def test_an_orphan_has_no_arrow_and_its_finding_sits_on_both_ranks() -> None:
    run = Run(pp_size=2)
    run.step([meta("scores", (8, 5))])
    run.attach([meta("scores", (9, 5))])  # never extracted
    for rows in (10, 11, 12):
        run.step([meta("scores", (rows, 5))])
    run.attach([meta("scores")], error=("builtins.RuntimeError", "duplicate auxiliary PP tensor"))
    trace = run.trace()
    result = analysis(trace)
    doc = _valid(to_chrome_trace(trace, result.findings, pairs=result.pairs,
                                 message_pairs=result.message_pairs))
    assert [(a["args"]["seq"], e["args"]["seq"]) for a, e in _flow_ends(doc, AUX_FLOW)] == [
        (0, 0), (2, 1), (3, 2), (4, 3)]
    orphans = _of(doc, "i", FindingKind.ORPHAN_ATTACH.value)
    assert sorted(_names(doc)[e["pid"]] for e in orphans) == [
        "rank 0 (pp 0/2, tp 0)", "rank 1 (pp 1/2, tp 0)"]
    assert all(e["s"] == "p" and "never extracted" in e["args"]["message"] for e in orphans)
    (orphan,) = [f for f in result.findings if f.kind is FindingKind.ORPHAN_ATTACH]
    assert orphans[0]["ts"] == (orphan.time_ns - BASE_NS - 1000) / 1000
    (raised,) = [e for e in _of(doc, "X", "attach") if "error" in e["args"]]
    assert raised["args"]["error"] == "builtins.RuntimeError: duplicate auxiliary PP tensor"


def test_without_pairs_it_asks_the_analyzer_for_them() -> None:
    run = Run(pp_size=2)
    for _ in range(3):
        run.step([meta("scores")])
    trace = run.trace()
    result = analysis(trace)
    assert to_chrome_trace(trace, []) == to_chrome_trace(
        trace, [], pairs=result.pairs, message_pairs=result.message_pairs)
    # It draws the pairs it is handed, and pairs nothing itself.
    bare = to_chrome_trace(trace, [], pairs=Pairs(), message_pairs={})
    assert _flow_ends(bare, AUX_FLOW) == [] and bare["otherData"]["flows"][AUX_FLOW] == 0


def test_golden_traces_one_flow_per_paired_attach_and_extract() -> None:
    trace = load_paths([GOLDEN])
    result = analysis(trace)
    doc = _valid(to_chrome_trace(trace, result.findings, pairs=result.pairs,
                                 message_pairs=result.message_pairs))
    # tests/data/make_golden.py: six attaches; extract 2 carried no payload (its attach is
    # an orphan); the others pair seq for seq.
    assert [(a["args"]["seq"], e["args"]["seq"]) for a, e in _flow_ends(doc, AUX_FLOW)] == [
        (0, 0), (1, 1), (3, 3), (4, 4), (5, 5)]
    kinds = sorted({e["name"] for e in _of(doc, "i")})
    assert kinds == sorted({f.kind.value for f in result.findings})


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_real_pp_by_tp_run_gives_one_flow_per_attach(tmp_path: Path) -> None:
    from tests.helpers_samples import run_sample

    out = str(tmp_path / "pp2tp2")
    result, _ = run_sample(out, ranks=4, tp=2, steps=6)
    assert result.killed == ()
    trace = load_paths([out])
    judged = analysis(trace)
    assert judged.findings == ()
    doc = _valid(to_chrome_trace(trace, judged.findings, pairs=judged.pairs,
                                 message_pairs=judged.message_pairs))
    attaches = [e for e in _of(doc, "X", "attach") if e["args"]["names"]]
    extracts = [e for e in _of(doc, "X", "extract") if e["args"]["names"]]
    pairs = _flow_ends(doc, AUX_FLOW)
    assert len(attaches) == len(extracts) == len(pairs) > 0
    assert {id(a) for a, _ in pairs} == {id(a) for a in attaches}
    assert {id(e) for _, e in pairs} == {id(e) for e in extracts}
    for a, e in pairs:
        assert a["args"]["seq"] == e["args"]["seq"] and a["args"]["names"] == e["args"]["names"]
    assert len(_names(doc)) == 4 and _of(doc, "i") == []


# --- the message layer, on a stand-in process that carries messages -------------------------

@dataclass(frozen=True, slots=True)
class WithMessages(ProcessTrace):
    """A process trace as the model will be: with its message-layer records."""

    messages: tuple[MessageEvent, ...] = ()


def _send(seq: int, peer: int, kind: str, at: int, *, dur: int = 300) -> MessageEvent:
    return MessageEvent(op=MessageOp.SEND, phase="end", seq=seq, wall_ns=BASE_NS + at,
                        duration_ns=dur, peer=peer, kind=kind, keys=("__msg_type__", "x"),
                        tensors=(TensorMeta.of_key("x", (4, 8), "float32", "cpu", 128),))


def _recv(seq: int, peer: int, kind: str, at: int, *, dur: int = 400,
          **more: Any) -> list[MessageEvent]:
    begin = MessageEvent(op=MessageOp.RECV, phase="begin", seq=seq, wall_ns=BASE_NS + at,
                         peer=peer, expected_kind=more.get("expected_kind", ""))
    end = begin._replace(phase="end", duration_ns=dur, kind=kind, keys=("__msg_type__", "x"),
                         tensors=(TensorMeta.of_key("x", (4, 8), "float32", "cpu", 128),), **more)
    return [begin, end]


def _with_messages(trace: Trace, messages: dict[int, Sequence[MessageEvent]]) -> Trace:
    procs = tuple(WithMessages(rank=p.rank, events=p.events, stats=p.stats,
                               messages=tuple(messages.get(p.rank.rank or 0, ())))
                  for p in trace.processes)
    return Trace(processes=procs)


def _message_run() -> Trace:
    run = Run(pp_size=2)
    run.step([meta("scores")])
    trace = run.trace()
    # rank 0 sends two proxies to rank 1; rank 1 sends an output back, then waits for more.
    return _with_messages(trace, {
        0: [_send(0, 1, "proxy", 100), _send(1, 1, "proxy", 5_000),
            *_recv(0, 1, "output", 3_000)],
        1: [*_recv(0, 0, "proxy", 200), *_recv(1, 0, "proxy", 5_100),
            _send(0, 0, "output", 2_900),
            _recv(2, 0, "proxy", 9_000)[0]],  # began, never returned
    })


def test_each_send_flows_to_its_receive_per_source_destination_and_kind() -> None:
    doc = _valid(to_chrome_trace(_message_run(), []))
    names = _names(doc)
    got = [(names[s["pid"]][:6], s["args"]["kind"], s["args"]["seq"], names[r["pid"]][:6],
            r["args"]["seq"]) for s, r in _flow_ends(doc, MESSAGE_FLOW)]
    assert sorted(got) == [("rank 0", "proxy", 0, "rank 1", 0),
                           ("rank 0", "proxy", 1, "rank 1", 1),
                           ("rank 1", "output", 0, "rank 0", 0)]
    assert all(s["name"] == "send" and r["name"] == "recv"
               for s, r in _flow_ends(doc, MESSAGE_FLOW))
    send = _of(doc, "X", "send")[0]
    # One set of argument names for both layers (a message once had its own: tensor_keys,
    # tensors), the values' part shared with attach/extract slices.
    assert {k: send["args"][k] for k in ("names", "shapes", "dtypes", "bytes", "total_bytes")} == {
        "names": ["x"], "shapes": ["[4, 8]"], "dtypes": ["float32"], "bytes": [128],
        "total_bytes": 128}
    assert "tensor_keys" not in send["args"] and "tp_sliced" not in send["args"]
    assert doc["otherData"]["flows"] == {AUX_FLOW: 1, MESSAGE_FLOW: 3}


def test_a_value_sent_as_a_tp_slice_says_so_in_its_args() -> None:
    run = Run(pp_size=2)
    run.step([meta("scores")])
    sliced = (TensorMeta.of_key("x", (4, 8), "float32", "cpu", 128, sliced=True),
              TensorMeta.of_key("__msg_type__", (), "str", is_tensor=False))
    send = _send(0, 1, "proxy", 100)._replace(tensors=sliced, gather_size=2)
    doc = _valid(to_chrome_trace(_with_messages(run.trace(), {0: [send]}), []))
    args = _of(doc, "X", "send")[0]["args"]
    assert (args["names"], args["shapes"], args["tp_sliced"]) == (
        ["x", "__msg_type__"], ["[4, 8]", ""], [True, False])


def test_a_receive_that_never_returned_waits_to_the_end_of_the_trace() -> None:
    trace = _message_run()
    # The waiting rank records nothing after its wait began: its stats at exit (the run's
    # timeout) say when it stopped.
    hung = trace.processes[1]
    assert hung.rank.rank == 1 and hung.stats is not None
    stopped = replace(hung, stats=replace(hung.stats, time_ns=BASE_NS + 20_000))
    trace = Trace(processes=(trace.processes[0], stopped))
    doc = _valid(to_chrome_trace(trace, []))
    (waiting,) = _of(doc, "X", WAITING)
    assert _names(doc)[waiting["pid"]] == "rank 1 (pp 1/2, tp 0)"
    assert waiting["args"]["src"] == 0 and waiting["args"]["seq"] == 2
    assert _ns(waiting["ts"]) == 9_000 - 100  # after the first record, rank 0's send at 100
    assert _ns(waiting["ts"]) + _ns(waiting["dur"]) == 20_000 - 100
    assert all(_ns(e["ts"]) + _ns(e["dur"]) < 20_000 - 100 for e in _of(doc, "X")
               if e is not waiting)
    assert len(_of(doc, "X", "recv")) == 3  # a receive that returned is one slice, not two


def test_a_receive_served_from_its_stash_is_not_the_one_the_send_reached() -> None:
    run = Run(pp_size=2)
    run.step([meta("scores")])
    # rank 1 wanted a proxy, got the output first and stashed it, then took it from the stash.
    trace = _with_messages(run.trace(), {
        0: [_send(0, 1, "output", 100), _send(1, 1, "proxy", 200)],
        1: [*_recv(0, 0, "output", 150, expected_kind="proxy", stashed=True),
            *_recv(1, 0, "proxy", 600, expected_kind="proxy"),
            *_recv(2, 0, "output", 1_100, expected_kind="output", from_stash=True)],
    })
    doc = _valid(to_chrome_trace(trace, []))
    got = sorted((s["args"]["kind"], r["args"]["seq"]) for s, r in _flow_ends(doc, MESSAGE_FLOW))
    assert got == [("output", 0), ("proxy", 1)]
    stashed = [e for e in _of(doc, "X", "recv") if e["args"].get("stashed")]
    assert [e["args"]["expected_kind"] for e in stashed] == ["proxy"]


def test_a_broadcast_flows_from_its_source_to_each_member() -> None:
    from tests.test_analyze_broadcast_messages import Bcast

    b = Bcast()  # the last stage's TP rank 0 (rank 3) broadcasts to ranks 4 and 5
    for k in range(2):
        b.step([TensorMeta.of_key("next_token_ids", (k + 1,), "int64", "cpu", 8 * (k + 1))])
    doc = _valid(to_chrome_trace(b.run.trace(), []))
    names = _names(doc)
    got = sorted((names[s["pid"]][:6], s["args"]["seq"], names[r["pid"]][:6], r["args"]["seq"])
                 for s, r in _flow_ends(doc, MESSAGE_FLOW))
    assert got == [("rank 3", 0, "rank 4", 0), ("rank 3", 0, "rank 5", 0),
                   ("rank 3", 1, "rank 4", 1), ("rank 3", 1, "rank 5", 1)]
    (source,) = [e for e in _of(doc, "X", "send") if e["args"]["seq"] == 0]
    assert source["args"]["dst"] == [4, 5] and source["args"]["broadcast_group"] == [3, 4, 5]
    assert doc["otherData"]["flows"][MESSAGE_FLOW] == 4


def test_a_broadcast_and_a_send_of_the_same_number_each_flow_to_their_own_receive() -> None:
    """The source's broadcast send #0 and its point-to-point send #0 (numbered apart) are two
    slices, each with its own arrows."""
    from tests.test_analyze_broadcast_messages import Bcast

    b = Bcast()
    b.step([TensorMeta.of_key("next_token_ids", (1,), "int64", "cpu", 8)])
    ids = [TensorMeta.of_key("next_token_ids", (2,), "int64", "cpu", 16)]
    b.run.send("output", ids, pp=1, to=0, gather=1)
    b.run.recv("output", ids, pp=0, frm=1, gather=1)
    doc = _valid(to_chrome_trace(b.run.trace(), []))
    names = _names(doc)
    got = sorted((names[s["pid"]][:6], s["args"]["seq"], "broadcast_group" in s["args"],
                  names[r["pid"]][:6], r["args"]["seq"], "broadcast_group" in r["args"])
                 for s, r in _flow_ends(doc, MESSAGE_FLOW))
    assert got == [("rank 3", 0, False, "rank 0", 0, False),
                   ("rank 3", 0, True, "rank 4", 0, True),
                   ("rank 3", 0, True, "rank 5", 0, True)]


def test_a_trace_without_messages_has_no_message_slices() -> None:
    doc = _valid(to_chrome_trace(load_paths([GOLDEN]), []))
    assert not [e for e in _of(doc, "X") if e["name"] not in ("attach", "extract")]
    assert doc["otherData"]["flows"][MESSAGE_FLOW] == 0


# --- the command -----------------------------------------------------------------------------

def test_export_writes_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pp.json"
    assert main(["export", "--perfetto", str(out), GOLDEN, "--no-progress"]) == 0
    doc = _valid(json.loads(out.read_text()))
    assert len(_flow_ends(doc, AUX_FLOW)) == 5
    err = capsys.readouterr().err
    assert err.startswith(f"pptrace: wrote {out} (2 ranks, 12 calls, 5 attach->extract arrows, "
                          f"{len(analysis(load_paths([GOLDEN])).findings)} findings)"), err
    assert [p.name for p in tmp_path.iterdir()] == ["pp.json"]  # no temporary file left


def test_export_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--perfetto", "-", GOLDEN, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert _valid(json.loads(captured.out))["otherData"]["flows"][AUX_FLOW] == 5
    assert captured.err == ""


@pytest.mark.parametrize(("target", "inputs", "said"), [
    ("{tmp}/missing/pp.json", [GOLDEN], "does not exist"),
    ("{tmp}", [GOLDEN], "is a directory"),
    ("{tmp}/pp.json", ["{tmp}/nothing-here"], "no such file or directory"),
    ("{tmp}/in/pp.json", ["{tmp}/in"], "is among the inputs"),
])
def test_bad_input_or_output_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, inputs: list[str],
        said: str) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.otlp.jsonl").write_text((Path(GOLDEN) / "pptrace-rank0-pid1000"
                                                   ".otlp.jsonl").read_text())
    argv = ["export", "--perfetto", target.format(tmp=tmp_path),
            *(p.format(tmp=tmp_path) for p in inputs), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pptrace: error: ") and said in err, err
    assert not (tmp_path / "in" / "pp.json").exists()


def test_the_closing_line_counts_in_words() -> None:
    from pptrace.cli.export import _count

    assert [_count(1, "finding"), _count(0, "finding"), _count(1400, "send->recv arrow")] == [
        "1 finding", "0 findings", "1,400 send->recv arrows"]
