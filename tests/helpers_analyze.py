"""A record factory for analyzer tests: build a run's events as the recorder would, in a few lines.

    run = Run(pp_size=2)
    run.step([meta("scores")])                 # a healthy attach on pp1 and its extract on pp0
    run.attach([meta("scores")])               # an attach alone (an orphan)
    trace = run.trace()

Every call gets the next time tick and the next per-process, per-direction sequence number.
``write_otlp_lines`` writes events as OTLP/JSON lines, the format pptrace's file exporter writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from pptrace.model import schema
from pptrace.model.messages import MSG_TYPE_KEY, MessageEvent, MessageOp
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import ProcessTrace, Trace

ENGINE = ("next_token_ids",)
BASE_NS = 1_700_000_000_000_000_000


def meta(
    name: str,
    shape: tuple[int, ...] = (8, 5),
    dtype: str = "float32",
    device: str = "cpu",
    *,
    nbytes: int | None = None,
    key: str | None = None,
    fingerprint: str | None = None,
    is_tensor: bool = True,
) -> TensorMeta:
    """One auxiliary tensor's metadata (bytes computed from shape and a 4-byte item)."""
    if nbytes is None:
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * (2 if dtype in ("float16", "bfloat16") else 4)
    return TensorMeta(
        name=name,
        key=PREFIX + name if key is None else key,
        shape=shape,
        dtype=dtype,
        device=device,
        nbytes=nbytes,
        is_tensor=is_tensor,
        fingerprint=fingerprint,
    )


class Run:
    """One traced run: processes by (pp, tp), a clock, per-process sequence counters."""

    def __init__(self, pp_size: int = 2, tp_size: int = 1, run_id: str = "run-1", *,
                 layout: bool = True) -> None:
        self.pp_size, self.tp_size, self.run_id = pp_size, tp_size, run_id
        self.layout = layout  # False: the ranks say no rank, PP or TP (a plain unit test's)
        self.clock = BASE_NS
        self.events: dict[tuple[int, int], list[Event]] = {}
        self.seqs: dict[tuple[int, int, Direction], int] = {}
        self.stats: dict[tuple[int, int], RecorderStats] = {}
        self.absent: set[tuple[int, int]] = set()  # (pp, tp) that left no trace at all
        self.unfinished: set[tuple[int, int]] = set()  # (pp, tp) that wrote no stats span
        self.msgs: dict[tuple[int, int], list[MessageEvent]] = {}  # the PP message layer
        self.msg_seqs: dict[tuple[int, int, MessageOp], int] = {}

    def rank(self, pp: int, tp: int = 0) -> RankInfo:
        r = pp * self.tp_size + tp
        if not self.layout:
            return RankInfo(host="node0", pid=1000 + r)
        return RankInfo(rank=r, world_size=self.pp_size * self.tp_size, pp_rank=pp,
                        pp_size=self.pp_size, tp_rank=tp, tp_size=self.tp_size,
                        host="node0", pid=1000 + r)

    def _next(self, pp: int, tp: int, direction: Direction, seq: int | None) -> int:
        key = (pp, tp, direction)
        if seq is None:
            seq = self.seqs.get(key, 0)
        self.seqs[key] = seq + 1
        return seq

    def _tick(self) -> int:
        self.clock += 1000
        return self.clock

    def add(self, pp: int, tp: int, ev: Event) -> Event:
        self.events.setdefault((pp, tp), []).append(ev)
        return ev

    def attach(
        self,
        tensors: Sequence[TensorMeta],
        *,
        tp: int = 0,
        pp: int | None = None,
        error: tuple[str, str] | None = None,
        keys_before: Sequence[str] = ENGINE,
        subject: str = "demo.Scores",
        capable: bool | None = True,
        seq: int | None = None,
        inserted: Sequence[str] = (),
    ) -> Event:
        """An attach on the last stage (or ``pp``)."""
        pp = self.pp_size - 1 if pp is None else pp
        t = self._tick()
        keys_after = tuple(keys_before) + tuple(m.key for m in tensors)
        ev = Event(
            direction=Direction.ATTACH, seq=self._next(pp, tp, Direction.ATTACH, seq),
            rank=self.rank(pp, tp), start_ns=t, mono_ns=t - BASE_NS, duration_ns=500,
            subject_type=subject, subject_pp_capable=capable, tensors=tuple(tensors),
            keys_before=tuple(keys_before), keys_after=keys_after, returned_none=True,
            error_type=error[0] if error else None, error_message=error[1] if error else None,
            inserted_before_error=tuple(inserted), run_id=self.run_id,
        )
        return self.add(pp, tp, ev)

    def extract(
        self,
        tensors: Sequence[TensorMeta],
        *,
        tp: int = 0,
        pp: int = 0,
        error: tuple[str, str] | None = None,
        subject: str = "demo.Observer",
        capable: bool | None = True,
        keys_after: Sequence[str] | None = None,
        extra_keys: Sequence[str] = (),
        seq: int | None = None,
    ) -> Event:
        """An extract on stage 0 (or ``pp``): ``tensors`` are the prefixed values it found."""
        t = self._tick()
        before = ENGINE + tuple(extra_keys) + ("__msg_type__",) + tuple(m.key for m in tensors)
        if keys_after is None:
            keys_after = before if error else ENGINE + tuple(extra_keys) + ("__msg_type__",)
        ev = Event(
            direction=Direction.EXTRACT, seq=self._next(pp, tp, Direction.EXTRACT, seq),
            rank=self.rank(pp, tp), start_ns=t, mono_ns=t - BASE_NS, duration_ns=700,
            subject_type=subject, subject_pp_capable=capable, tensors=tuple(tensors),
            keys_before=before, keys_after=tuple(keys_after),
            returned_none=bool(error) or not tensors,
            error_type=error[0] if error else None, error_message=error[1] if error else None,
            run_id=self.run_id,
        )
        return self.add(pp, tp, ev)

    def none_attach(self, *, tp: int = 0) -> Event:
        """An attach called with output None (no auxiliary output this step)."""
        return self.attach((), tp=tp, subject="NoneType", capable=None)

    def step(self, tensors: Sequence[TensorMeta], *, tps: Iterable[int] | None = None) -> None:
        """A healthy round trip: attach on the last stage, extract on stage 0, per TP rank."""
        for tp in range(self.tp_size) if tps is None else tps:
            self.attach(tensors, tp=tp)
        for tp in range(self.tp_size) if tps is None else tps:
            self.extract(tensors, tp=tp)

    def set_stats(self, pp: int, tp: int = 0, *, final: bool = True,
                  sink_dropped: tuple[tuple[str, int], ...] = (), **counts: int) -> None:
        """The process's last stats span (its final one unless ``final=False``)."""
        self.stats[(pp, tp)] = RecorderStats(rank=self.rank(pp, tp), time_ns=self._tick(),
                                             run_id=self.run_id, final=final,
                                             sink_dropped=sink_dropped, **counts)

    def trace(self, *, all_ranks: bool = True) -> Trace:
        """The trace, with an (empty) process for every rank when ``all_ranks``.

        A process without ``set_stats`` gets the final stats of a clean exit (everything it
        recorded exported), unless it is in ``unfinished`` (then it has no stats at all).
        """
        keys = set(self.events) | set(self.stats) | set(self.msgs)
        if all_ranks:
            keys |= {(pp, tp) for pp in range(self.pp_size) for tp in range(self.tp_size)}
        keys -= self.absent
        procs = []
        for pp, tp in sorted(keys, key=lambda k: k[0] * self.tp_size + k[1]):
            evs = sorted(self.events.get((pp, tp), []),
                         key=lambda e: (e.mono_ns, e.direction.value, e.seq))
            stats = self.stats.get((pp, tp))
            if stats is None and (pp, tp) not in self.unfinished:
                stats = RecorderStats(rank=self.rank(pp, tp), time_ns=BASE_NS, recorded=len(evs),
                                      exported=len(evs), run_id=self.run_id, final=True)
            procs.append(ProcessTrace(rank=self.rank(pp, tp), events=tuple(evs), stats=stats,
                                      messages=tuple(self.msgs.get((pp, tp), ()))))
        return Trace(processes=tuple(procs))

    def all_events(self) -> list[Event]:
        return [e for evs in self.events.values() for e in evs]

    # --- the PP message layer -----------------------------------------------------------------

    def _msg(self, pp: int, tp: int, op: MessageOp, phase: str, seq: int | None,
             peer_pp: int, **fields: Any) -> MessageEvent:
        key = (pp, tp, op)
        if seq is None:
            seq = self.msg_seqs.get(key, 0)
            self.msg_seqs[key] = seq + 1
        t = self._tick()
        peer = self.rank(peer_pp, tp)
        m = MessageEvent(op=op, phase=phase, seq=seq, wall_ns=t, mono_ns=t - BASE_NS,
                         duration_ns=300 if phase == "end" else -1, thread_id=1,
                         peer=peer.rank if peer.rank is not None else -1, peer_pp_rank=peer_pp,
                         peer_tp_rank=tp, **fields)
        self.msgs.setdefault((pp, tp), []).append(m)
        return m

    def send(self, kind: str, tensors: Sequence[TensorMeta] = (), *, pp: int, to: int,
             tp: int = 0, keys: Sequence[str] | None = None, gather: int | None = None,
             carries: int | None = None, error: tuple[str, str] | None = None) -> MessageEvent:
        """A send of a ``kind`` message from (pp, tp) to (to, tp): keys default to its tensors'."""
        return self._msg(pp, tp, MessageOp.SEND, "end", None, to, kind=kind,
                         keys=msg_keys(tensors) if keys is None else tuple(keys),
                         tensors=tuple(tensors), gather_size=self.tp_size if gather is None
                         else gather, carries_attach=carries,
                         error_type=error[0] if error else None,
                         error_message=error[1] if error else None)

    def wait(self, expected: str, *, pp: int, frm: int, tp: int = 0) -> MessageEvent:
        """A receive that begins (and, alone, never returns)."""
        return self._msg(pp, tp, MessageOp.RECV, "begin", None, frm, expected_kind=expected,
                         gather_size=self.tp_size)

    def recv(self, kind: str, tensors: Sequence[TensorMeta] = (), *, pp: int, frm: int,
             tp: int = 0, expected: str | None = None, keys: Sequence[str] | None = None,
             gather: int | None = None, stashed: bool = False, from_stash: bool = False,
             error: tuple[str, str] | None = None) -> MessageEvent:
        """A receive on (pp, tp) from (frm, tp): its begin, then what arrived."""
        expected = kind if expected is None else expected
        begin = self.wait(expected, pp=pp, frm=frm, tp=tp)
        return self._msg(pp, tp, MessageOp.RECV, "end", begin.seq, frm, kind=kind,
                         expected_kind=expected,
                         keys=msg_keys(tensors) if keys is None else tuple(keys),
                         tensors=tuple(tensors), gather_size=self.tp_size if gather is None
                         else gather, stashed=stashed, from_stash=from_stash,
                         error_type=error[0] if error else None,
                         error_message=error[1] if error else None)

    def message(self, kind: str, tensors: Sequence[TensorMeta], *, frm: int, to: int,
                tps: Iterable[int] | None = None, carries: int | None = None) -> None:
        """A healthy message: each TP rank's send, then each one's receive."""
        tp_ranks = list(range(self.tp_size) if tps is None else tps)
        for tp in tp_ranks:
            self.send(kind, tensors, pp=frm, to=to, tp=tp, carries=carries)
        for tp in tp_ranks:
            self.recv(kind, tensors, pp=to, frm=frm, tp=tp)


def mt(key: str, shape: tuple[int, ...] = (8, 5), dtype: str = "float32", *,
       sliced: bool = False, fingerprint: str | None = None, nbytes: int | None = None,
       is_tensor: bool = True, device: str = "cpu") -> TensorMeta:
    """One value of a message's dict (bytes from shape and a 4-byte item, 2 for half types)."""
    if nbytes is None:
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * (2 if dtype in ("float16", "bfloat16") else 4) if is_tensor else 0
    return TensorMeta.of_key(key=key, shape=shape, dtype=dtype,
                             device=device if is_tensor else "", nbytes=nbytes, sliced=sliced,
                             is_tensor=is_tensor, fingerprint=fingerprint)


def msg_keys(tensors: Sequence[TensorMeta]) -> tuple[str, ...]:
    """The keys of a message holding ``tensors``: its values', then the kind's key."""
    return tuple(t.key for t in tensors) + (MSG_TYPE_KEY,)


def golden_run() -> Run:
    """The run behind ``tests/data/golden-pp2`` (see ``tests/data/make_golden.py``)."""
    run = Run(pp_size=2, run_id="golden")
    for k in range(6):
        tensors = [meta("topk_logprobs", (k + 2, 4)), meta("entropy", (k + 2,))]
        run.attach(tensors)
        if k == 2:
            run.extract([])  # the skip marker arrived instead
            continue
        received = tensors if k < 4 else [tensors[0], meta("entropy", (k + 2,), "float16")]
        run.extract(received)
    run.set_stats(0, recorded=6, exported=6)
    run.set_stats(1, recorded=6, exported=6)
    return run


def with_rank(ev: Event, **fields: Any) -> Event:
    """The same event with some RankInfo fields changed."""
    return ev._replace(rank=replace(ev.rank, **fields))


# --- writing trace files ----------------------------------------------------------------------


def _any(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_any(v) for v in value]}}


def otlp_span(name: str, attrs: dict[str, Any], start: int, end: int, n: int) -> dict[str, Any]:
    """One OTLP/JSON span (hex ids, string int64s), as pptrace's exporter writes them."""
    return {
        "traceId": f"{n + 1:032x}",
        "spanId": f"{n + 1:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": _any(v)} for k, v in attrs.items()],
        "status": {},
    }


def otlp_document(spans: list[dict[str, Any]], service: str = "pptrace") -> dict[str, Any]:
    """A ``TracesData`` object holding ``spans`` under one resource and scope."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name",
                                             "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "pptrace"}, "spans": spans}],
            }
        ]
    }


def event_spans(events: Iterable[Event], start_n: int = 0) -> list[dict[str, Any]]:
    return [
        otlp_span(schema.span_name(e.direction), dict(schema.event_to_attributes(e)),
                  e.start_ns, e.end_ns, start_n + i)
        for i, e in enumerate(events)
    ]


def write_otlp_lines(path: str, events: Sequence[Event], per_line: int = 50,
                     stats: RecorderStats | None = None) -> str:
    """Write events as OTLP/JSON lines (``per_line`` spans a line), then a stats span."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        for i in range(0, len(events), per_line):
            spans = event_spans(events[i : i + per_line], i)
            f.write(json.dumps(otlp_document(spans), separators=(",", ":")) + "\n")
        if stats is not None:
            span = otlp_span(schema.SPAN_STATS, dict(schema.stats_to_attributes(stats)),
                             stats.time_ns, stats.time_ns, len(events))
            f.write(json.dumps(otlp_document([span]), separators=(",", ":")) + "\n")
    return path


def write_run(run: Run, directory: str) -> list[str]:
    """Write one OTLP/JSON lines file per process of ``run`` into ``directory``."""
    paths = []
    for proc in run.trace(all_ranks=False).processes:
        name = f"pptrace-rank{proc.rank.rank}-pid{proc.rank.pid}.otlp.jsonl"
        paths.append(write_otlp_lines(os.path.join(directory, name), proc.events,
                                      stats=proc.stats))
    return paths


# --- other formats, derived from OTLP/JSON documents -------------------------------------------


def _plain(value: dict[str, Any]) -> Any:
    (kind, inner), = value.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return [_plain(v) for v in inner.get("values", [])]
    return inner


def jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    """An attribute as a Jaeger JSON tag (Jaeger has no arrays: converters store JSON text)."""
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, (list, tuple)):
        return {"key": key, "type": "string", "value": json.dumps(list(value))}
    return {"key": key, "type": "string", "value": str(value)}


def otlp_to_jaeger(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Jaeger's JSON model (``{"data": [...]}``) for the spans of OTLP/JSON documents."""
    traces: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for rs in doc["resourceSpans"]:
            service = next((_plain(a["value"]) for a in rs["resource"]["attributes"]
                            if a["key"] == "service.name"), "")
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    trace = traces.setdefault(span["traceId"], {
                        "traceID": span["traceId"], "spans": [],
                        "processes": {"p1": {"serviceName": service, "tags": []}},
                        "warnings": None})
                    start = int(span["startTimeUnixNano"])
                    end = int(span["endTimeUnixNano"])
                    trace["spans"].append({
                        "traceID": span["traceId"], "spanID": span["spanId"],
                        "operationName": span["name"], "references": [],
                        "startTime": start // 1000, "duration": (end - start) // 1000,
                        "tags": [jaeger_tag(a["key"], _plain(a["value"]))
                                 for a in span["attributes"]],
                        "logs": [], "processID": "p1", "warnings": None})
    return {"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}
