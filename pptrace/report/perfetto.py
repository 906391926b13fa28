"""A trace as Chrome trace-event JSON, the file ui.perfetto.dev (and chrome://tracing) opens.

Engine engineers read PP timelines in Perfetto; this puts pptrace's records there, beside them:

- a track (process) per rank, named ``rank 3 (pp 1/2, tp 1)`` and sorted by PP stage, then TP
  rank; a thread under it per recording thread;
- a slice per attach and extract call (``ph`` ``X``; ``args``: seq, names, shapes, dtypes, bytes,
  and the error when the call raised);
- a flow arrow from each attach to the extract the analyzer paired it with
  (``analysis(trace).pairs``, as ``analyze`` judges them);
- each finding as an instant (``ph`` ``i``, scope ``p``) on the ranks it names, with its message;
- the message layer, where a process carries ``messages`` (``pptrace.model.messages``): a slice
  per send and receive, a flow arrow from each send to the receive the analyzer paired it
  with (``analysis(trace).message_pairs``), and a receive that began and never ended as a slice
  ``recv (waiting)`` running to the end of the trace (the last record or stats span).

Times are wall-clock (``start_ns``) in µs after the earliest record, as the format wants
(``ts``/``dur`` in µs; fractions keep the nanoseconds); the trace to draw is the analyzer's
``Analysis.trace``, whose hosts' clocks are aligned to one. Pids and tids are small numbers given
here (Perfetto keeps 32 bits of a tid; a Python thread id has 64): the real host, pid and
thread id are in ``otherData`` and the thread names.

    doc = to_chrome_trace(trace, findings)          # asks the analyzer for its pairs
    doc = to_chrome_trace(trace, result.findings, pairs=result.pairs,
                          message_pairs=result.message_pairs,
                          broadcast_pairs=result.broadcast_pairs)
    json.dump(doc, fh)

Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairs import Pairs
from pptrace.analyze.rules import rank_id
from pptrace.model.findings import Finding, MessageId
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import Direction, Event, TensorMeta
from pptrace.model.text import clip, inert
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["AUX_FLOW", "MESSAGE_FLOW", "MIN_DUR_NS", "WAITING", "to_chrome_trace"]

#: The name of the flow from an attach to its extract, and from a send to its receive.
#: Perfetto matches a flow's two ends by id, category and name: both ends carry them.
AUX_FLOW = "attach->extract"
MESSAGE_FLOW = "send->recv"
#: The name of the slice of a receive that began and never returned.
WAITING = "recv (waiting)"
#: The shortest slice drawn: a slice of no length would hold no time for a flow end to bind at.
MIN_DUR_NS = 1
_CAT = "pptrace"

#: The two layers a recording thread's records are drawn on, each its own Perfetto thread (a
#: receive waiting to the end must not swallow the thread's later calls, and two layers'
#: clocks must not make their slices cross).
CALLS, MESSAGES = "calls", "messages"


@dataclass(frozen=True, slots=True)
class _Track:
    """One process as a Perfetto process: its pid here and its threads' tids."""

    index: int  # in ``Trace.processes``
    pid: int
    run: str
    tids: dict[tuple[int, str], int]  # (recording thread id, layer) -> tid here

    @property
    def first_tid(self) -> int:
        return next(iter(self.tids.values()))


@dataclass(slots=True)
class _Slice:
    """A complete event being built (its times settle before it is written)."""

    name: str
    pid: int
    tid: int
    start: int  # wall-clock ns
    end: int
    args: dict[str, Any]


class _Doc:
    """The events being built, and the clock they are placed on."""

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.events: list[dict[str, Any]] = []  # metadata and instants
        self.slices: list[_Slice] = []
        self.arrows: list[tuple[str, int, int]] = []  # (flow name, slice, slice)
        self.flows: dict[str, int] = {AUX_FLOW: 0, MESSAGE_FLOW: 0}  # arrows drawn, by name

    def us(self, ns: int) -> float:
        """Wall-clock ns -> µs after the earliest record (never negative)."""
        return round(max(ns - self.t0, 0) / 1000, 3)

    def slice(self, name: str, track: _Track, thread: tuple[int, str], start_ns: int,
              dur_ns: int, args: dict[str, Any]) -> int:
        """Add a complete event; return its handle, which ``flow`` takes."""
        start = max(start_ns, self.t0)
        self.slices.append(_Slice(name, track.pid, track.tids[thread], start,
                                  start + max(dur_ns, MIN_DUR_NS), args))
        return len(self.slices) - 1

    def flow(self, name: str, a: int, b: int) -> None:
        """An arrow from slice ``a`` to slice ``b``."""
        self.flows[name] += 1
        self.arrows.append((name, a, b))

    def settle(self) -> None:
        """Move a slice that starts inside the one before it on its thread to that one's end.

        One layer of one thread makes one call at a time, so its slices never nest; two wall
        clock readings can still cross by a little (the clock was stepped, or is coarse), and
        Perfetto draws crossing slices wrongly. ``args.shifted_ns`` says how far one moved.
        """
        threads: dict[tuple[int, int], list[_Slice]] = defaultdict(list)
        for s in self.slices:
            threads[(s.pid, s.tid)].append(s)
        for group in threads.values():
            group.sort(key=lambda s: s.start)
            end = None
            for s in group:
                if end is not None and s.start < end:
                    s.args["shifted_ns"] = end - s.start
                    s.end = max(s.end, end + MIN_DUR_NS)
                    s.start = end
                end = s.end

    def document(self) -> list[dict[str, Any]]:
        """Every event: metadata and instants, slices, then the flows' two ends."""
        self.settle()
        out = list(self.events)
        for s in self.slices:
            out.append({"name": s.name, "cat": _CAT, "ph": "X", "ts": self.us(s.start),
                        "dur": round((s.end - s.start) / 1000, 3), "pid": s.pid, "tid": s.tid,
                        "args": s.args})
        for n, (name, a, b) in enumerate(self.arrows, 1):
            for ph, s in (("s", self.slices[a]), ("f", self.slices[b])):
                # A flow end carries its slice's start, thread and category: Chrome binds it
                # to the slice with exactly those, Perfetto to the slice open on the thread at
                # that time (written after the slices, as Perfetto's own tests have it).
                ev: dict[str, Any] = {"name": name, "cat": _CAT, "ph": ph, "id": n,
                                      "ts": self.us(s.start), "pid": s.pid, "tid": s.tid}
                if ph == "f":
                    ev["bp"] = "e"  # bind to the enclosing slice, not the next one
                out.append(ev)
        return out


def _messages(proc: ProcessTrace) -> tuple[MessageEvent, ...]:
    """The process's message-layer records (none until the trace model carries them)."""
    return tuple(getattr(proc, "messages", ()) or ())


def _run(proc: ProcessTrace) -> str:
    for ev in proc.events[:1]:
        return ev.run_id
    return proc.stats.run_id if proc.stats is not None else ""


def _order(proc: ProcessTrace) -> tuple[int, int, int, str, int]:
    """PP stage, then TP rank (unknown last), then the global rank."""
    r = proc.rank
    return (*r.layout_order(), r.host, r.pid)  # the viewer's order, then the OS process


def _bounds(trace: Trace) -> tuple[int, int]:
    """The earliest start of every record, and the latest end of every record and stats span
    (a rank that hangs records nothing after its wait began; its exit's stats say when it
    stopped), wall clock."""
    starts, ends = [], []
    for proc in trace.processes:
        if proc.stats is not None and proc.stats.time_ns > 0:
            ends.append(proc.stats.time_ns)
        if proc.events:
            starts.append(min(ev.start_ns for ev in proc.events))
            ends.append(max(ev.end_ns for ev in proc.events))
        for m in _messages(proc):
            if m.wall_ns:
                starts.append(m.wall_ns)
                ends.append(m.wall_ns + max(m.duration_ns, 0))
    if not starts:
        return 0, 0
    return min(starts), max(max(ends), min(starts))


def _tracks(trace: Trace, doc: _Doc) -> list[_Track]:
    """A track per process, its metadata events added; indexed like ``trace.processes``."""
    order = sorted(range(len(trace.processes)), key=lambda i: _order(trace.processes[i]))
    runs = [_run(p) for p in trace.processes]
    several = len(set(runs)) > 1
    tracks: list[_Track | None] = [None] * len(trace.processes)
    next_tid = len(order) + 1  # tids apart from every pid: a tid equal to a pid means its
    for sort, i in enumerate(order):  # main thread to Perfetto
        proc, pid = trace.processes[i], sort + 1
        names: dict[int, str] = {}  # recording thread id -> its name
        layers: dict[tuple[int, str], None] = {}  # in order of first appearance
        for ev in proc.events:
            names.setdefault(ev.thread_id, ev.thread_name)
            layers.setdefault((ev.thread_id, CALLS))
        for m in _messages(proc):
            names.setdefault(m.thread_id, "")
            layers.setdefault((m.thread_id, MESSAGES))
        if not layers:  # a rank with no record still gets a track, for its findings
            names[0] = ""
            layers[(0, CALLS)] = None
        tids: dict[tuple[int, str], int] = {}
        for k, (thread, layer) in enumerate(sorted(layers, key=lambda t: (t[0], t[1]))):
            tids[(thread, layer)] = next_tid
            name = names[thread]
            label = f"{inert(name)} ({thread})" if name else f"thread {thread}"
            doc.events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": next_tid,
                               "args": {"name": label if layer == CALLS else f"{label}: sends, "
                                        "receives"}})
            doc.events.append({"name": "thread_sort_index", "ph": "M", "pid": pid,
                               "tid": next_tid, "args": {"sort_index": k}})
            next_tid += 1
        track = _Track(i, pid, runs[i], tids)
        label = inert(proc.rank.label()) + (f" [run {inert(runs[i] or '?')}]" if several else "")
        doc.events.append({"name": "process_name", "ph": "M", "pid": pid,
                           "tid": track.first_tid, "args": {"name": label}})
        doc.events.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                           "tid": track.first_tid, "args": {"sort_index": sort}})
        tracks[i] = track
    return [t for t in tracks if t is not None]


def _tensor_args(tensors: Sequence[TensorMeta]) -> dict[str, Any]:
    """The values' part of a slice's ``args``, by one set of names for every layer: an attach's
    or extract's names, a send's or receive's keys (``tp_sliced`` where a value travelled as a
    TP slice)."""
    args: dict[str, Any] = {
        "names": [inert(t.name) for t in tensors],
        "shapes": [f"[{', '.join(map(str, t.shape))}]" if t.is_tensor else "" for t in tensors],
        "dtypes": [inert(t.dtype) for t in tensors],
        "bytes": [t.nbytes for t in tensors],
        "total_bytes": sum(t.nbytes for t in tensors),
    }
    if any(t.sliced for t in tensors):
        args["tp_sliced"] = [t.sliced for t in tensors]
    return args


class _CallArgs:
    """The ``args`` of attach/extract slices, the tensors' part built once per distinct tuple.

    A run repeats a few payload shapes; the loader shares equal tensors tuples, so most events
    are found by the tuple's identity (the trace keeps every tuple alive meanwhile), the rest by
    value. The lists are shared between slices, and never changed.
    """

    def __init__(self) -> None:
        self.by_id: dict[int, dict[str, Any]] = {}
        self.by_value: dict[tuple[TensorMeta, ...], dict[str, Any]] = {}
        self.subjects: dict[str, str] = {}  # subject type -> as shown

    def tensors(self, tensors: tuple[TensorMeta, ...]) -> dict[str, Any]:
        """``_tensor_args(tensors)``, built once per distinct tuple (either layer's)."""
        part = self.by_id.get(id(tensors))
        if part is None:
            part = self.by_value.get(tensors)
            if part is None:
                part = self.by_value[tensors] = _tensor_args(tensors)
            self.by_id[id(tensors)] = part
        return part

    def of(self, ev: Event) -> dict[str, Any]:
        args: dict[str, Any] = {"seq": ev.seq, **self.tensors(ev.tensors)}
        subject = ev.subject_type
        if subject:
            shown = self.subjects.get(subject)
            if shown is None:
                shown = self.subjects[subject] = inert(subject)
            args["subject_type"] = shown
        if ev.error_type is not None:
            args["error"] = inert(clip(f"{ev.error_type}: {ev.error_message or ''}"))
        return args


def _calls(trace: Trace, tracks: list[_Track], doc: _Doc, pairs: Pairs) -> None:
    """A slice per attach/extract, and a flow from each attach to the extract the analyzer
    paired it with."""
    handle: dict[tuple[int, Direction, int], int] = {}
    call_args = _CallArgs().of
    for track in tracks:
        for ev in trace.processes[track.index].events:
            handle[(track.index, ev.direction, ev.seq)] = doc.slice(
                ev.direction.value, track, (ev.thread_id, CALLS), ev.start_ns, ev.duration_ns,
                call_args(ev))
    for run in pairs.runs:
        for a, e in run.seqs():
            start = handle.get((run.attach_process, Direction.ATTACH, a))
            end = handle.get((run.extract_process, Direction.EXTRACT, e))
            if start is not None and end is not None:
                doc.flow(AUX_FLOW, start, end)


def _message_args(m: MessageEvent, proc: ProcessTrace, tensors: _CallArgs) -> dict[str, Any]:
    me = rank_id(proc.rank)
    src, dst = (me, m.peer) if m.op is MessageOp.SEND else (m.peer, me)
    args: dict[str, Any] = {"seq": m.seq, "kind": inert(m.kind), "src": src, "dst": dst,
                            "keys": [inert(k) for k in m.keys],
                            **tensors.tensors(m.tensors)}
    if m.expected_kind:
        args["expected_kind"] = inert(m.expected_kind)
    for flag in ("stashed", "from_stash"):
        if getattr(m, flag):
            args[flag] = True
    if m.gather_size != 1:
        args["gather_size"] = m.gather_size
    if m.group:  # a broadcast: the source sent to every other member of its group
        args["broadcast_group"] = list(m.group)
        if m.op is MessageOp.SEND:
            args["dst"] = [r for r in m.group if r != me]
    if m.carries_attach is not None:
        args["carries_attach"] = m.carries_attach
    if m.error_type is not None:
        args["error"] = inert(clip(f"{m.error_type}: {m.error_message or ''}"))
    return args


def _message_layer(trace: Trace, tracks: list[_Track], doc: _Doc, end_ns: int,
                   message_pairs: Mapping[MessageId, MessageId],
                   broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]]) -> None:
    """Slices per send and receive, a flow from each send to the receive the analyzer paired
    it with (from a broadcast, one to each member's receive), waits to the end."""
    ends: dict[MessageId, int] = {}  # a send's or receive's end -> its slice
    tensors = _CallArgs()
    for track in tracks:
        proc = trace.processes[track.index]
        messages = _messages(proc)
        # A broadcast is numbered apart from point-to-point messages.
        ended = {(m.broadcast, m.seq) for m in messages
                 if m.op is MessageOp.RECV and m.phase == "end"}
        for m in sorted(messages, key=lambda m: (m.op.value, m.broadcast, m.seq,
                                                 m.phase != "begin")):
            args, thread = _message_args(m, proc, tensors), (m.thread_id, MESSAGES)
            if m.op is MessageOp.SEND:
                ends[MessageId.of(track.index, m)] = doc.slice(
                    "send", track, thread, m.wall_ns, m.duration_ns, args)
            elif m.phase == "begin":
                if (m.broadcast, m.seq) not in ended:  # it never returned: it waits to the end
                    doc.slice(WAITING, track, thread, m.wall_ns, end_ns - m.wall_ns, args)
            else:
                ends[MessageId.of(track.index, m)] = doc.slice(
                    "recv", track, thread, m.wall_ns, m.duration_ns, args)
    arrows = [(send, recv) for send, recv in message_pairs.items()]
    arrows += [(send, recv) for send, got in broadcast_pairs.items() for recv in got]
    for send, recv in arrows:
        a, b = ends.get(send), ends.get(recv)
        if a is not None and b is not None:
            doc.flow(MESSAGE_FLOW, a, b)


def _findings(trace: Trace, tracks: list[_Track], doc: _Doc,
              findings: Sequence[Finding]) -> None:
    """Each finding as an instant on the processes of the ranks it names."""
    by_rank: dict[int, list[_Track]] = defaultdict(list)
    for t in tracks:
        by_rank[rank_id(trace.processes[t.index].rank)].append(t)
    by_index = {t.index: t for t in tracks}
    for f in findings:
        runs = {by_index[e.process].run for e in f.events if e.process in by_index}
        named = [t for r in f.ranks for t in by_rank.get(r, ()) if not runs or t.run in runs]
        named += [by_index[e.process] for e in f.events if e.process in by_index]
        args: dict[str, Any] = {"message": inert(f.message), "kind": f.kind.value,
                                "severity": f.severity.name.lower()}
        for key, value in (("channel", f.channel), ("microbatch", f.microbatch),
                           ("cascade", f.cascade)):
            if value:
                args[key] = value
        ts = doc.us(f.time_ns if f.time_ns is not None else doc.t0)
        unique = list({t.pid: t for t in named}.values())
        scope, where = ("p", unique) if unique else ("g", tracks[:1])
        for t in where:
            doc.events.append({"name": f.kind.value, "cat": "finding", "ph": "i", "s": scope,
                               "ts": ts, "pid": t.pid, "tid": t.first_tid,
                               "args": args})


def to_chrome_trace(trace: Trace, findings: Sequence[Finding], *,
                    pairs: Pairs | None = None,
                    message_pairs: Mapping[MessageId, MessageId] | None = None,
                    broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]] | None = None
                    ) -> dict[str, Any]:
    """The trace and its findings as a Chrome trace-event JSON document (a dict to dump).

    ``pairs``, ``message_pairs`` and ``broadcast_pairs``: the analyzer's attach/extract pairs,
    send/receive pairs and broadcast pairs (``analysis(trace)``'s, with its aligned ``trace``);
    asked of the analyzer when not given, and then its aligned trace is drawn.
    """
    if pairs is None or message_pairs is None or broadcast_pairs is None:
        judged = analysis(trace)
        trace = judged.trace  # its times aligned, as the pairs were judged (judged.clocks)
        pairs = judged.pairs if pairs is None else pairs
        message_pairs = judged.message_pairs if message_pairs is None else message_pairs
        broadcast_pairs = judged.broadcast_pairs if broadcast_pairs is None else broadcast_pairs
    t0, end_ns = _bounds(trace)
    doc = _Doc(t0)
    tracks = _tracks(trace, doc)
    _calls(trace, tracks, doc, pairs)
    _message_layer(trace, tracks, doc, end_ns, message_pairs, broadcast_pairs)
    _findings(trace, tracks, doc, findings)
    processes = [{"pid": t.pid, "label": trace.processes[t.index].rank.label(),
                  "host": inert(trace.processes[t.index].rank.host),
                  "os_pid": trace.processes[t.index].rank.pid, "run": inert(t.run),
                  "threads": {str(tid): {"thread_id": thread, "layer": layer}
                              for (thread, layer), tid in t.tids.items()}}
                 for t in tracks]
    return {
        "traceEvents": doc.document(),
        "displayTimeUnit": "ns",
        "otherData": {"producer": "pptrace", "t0_unix_ns": t0, "flows": doc.flows,
                      "processes": processes},
    }
