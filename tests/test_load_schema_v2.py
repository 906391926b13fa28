"""Schema version 2 (issue 17, item 1, the reading half): the same ``Event``s as version 1.

Version 1 files come from pptrace's real exporter (``PPTRACE_SCHEMA=1``). Their version 2 form is
made here by hand, from the format's description: the per-process constants move to the resource
(host and pid as ``host.name`` and ``process.pid``, the version with them), the thread name and id
stay on a span only where they differ from the resource's ``pptrace.thread.main_name`` /
``main_id``, the devices only where one differs from its ``pptrace.tensor.main_device``, and what
follows from the rest is left out: the tensor count and total bytes, ``pptrace.tensor.keys``, byte
counts that are elements times the dtype's size, all-true ``contiguous`` / ``is_tensor``, the tensor
keys within ``pptrace.keys.before`` (``pptrace.keys.tensors_at`` says where),
``pptrace.keys.after``, the usual ``returned_none``, a ``dropped_before`` of 0, and in a trace file
(not in Jaeger's JSON) the duration. Every reader (the fast path, the ordinary path, a single
document walked span by span, the worker, Jaeger's JSON with the resource as process tags) must give
the very same events, field by field, plain and compressed.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.sinks import build_sink
from pptrace.load import worker as load_worker
from pptrace.load.builder import TraceBuilder
from pptrace.load.files import read_files
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.errors import SchemaVersionError
from pptrace.model.records import PREFIX, Event, RecorderStats
from pptrace.model.trace import Trace
from tests.helpers_analyze import Run, jaeger_tag, meta

MAIN = "MainThread"
_PROCESS_KEYS = {  # span key -> resource key, for the per-process constants
    schema.VERSION: schema.VERSION, schema.RUN_ID: schema.RUN_ID, schema.RANK: schema.RANK,
    schema.WORLD_SIZE: schema.WORLD_SIZE, schema.PP_RANK: schema.PP_RANK,
    schema.PP_SIZE: schema.PP_SIZE, schema.TP_RANK: schema.TP_RANK,
    schema.TP_SIZE: schema.TP_SIZE, schema.HOST: "host.name", schema.PID: "process.pid",
}


def _run() -> Trace:
    """Events of every kind a version 2 writer treats differently."""
    run = Run(pp_size=2, tp_size=2)
    for k in range(6):
        run.step([meta("scores", (k + 1, 5)), meta("ids", (k + 1,), "int64")])
    odd_key = meta("scores", (2, 5), key="scores")  # a key that is not PREFIX + name
    run.attach([odd_key])
    run.attach([meta("a", (2,)), meta("b", (2,))], error=("RuntimeError", "dup"),
               inserted=(PREFIX + "a",))  # keys after = before + all keys: not implied
    run.attach([meta("a", (2,))], error=("RuntimeError", "x"), inserted=(PREFIX + "a",),
               tp=1)
    run.extract([meta("a", (2,))], error=("RuntimeError", "no observer"))
    run.extract([meta("a", (2,), fingerprint="b2:00ff")], extra_keys=("kept",))
    run.extract([meta("a", (2,))], keys_after=("next_token_ids", PREFIX + "a"), tp=1)
    run.none_attach()
    listed = meta("v", (), "list", "", nbytes=0, is_tensor=False)
    run.attach([meta("a", (2,), device="cuda:1"), listed])  # another device; a non-tensor
    run.attach([meta("a", (3, 2))._replace(contiguous=False), meta("h", (2,),
                                                       "float16")])
    run.attach([meta("a", (2,), "float4_e2m1fn_x2", nbytes=1)])  # an unknown item size
    run.extract([listed, meta("a", (2,))], tp=1)
    run.extract([])  # nothing to extract: returned None
    trace = run.trace(all_ranks=False)
    procs = []
    for proc in trace.processes:  # a second thread on some calls; the first call's is the main
        events = tuple(ev._replace(thread_name="worker-1" if ev.seq % 3 == 2 else MAIN,
                                   thread_id=7 if ev.seq % 3 == 2 else 1,
                                   dropped_before=3 if ev.seq > 5 else 0,
                                   returned_none=ev.returned_none != (ev.seq == 4))
                       if i else ev._replace(thread_name=MAIN, thread_id=1)
                       for i, ev in enumerate(proc.events))
        procs.append(dataclasses.replace(proc, events=events))
    return Trace(processes=tuple(procs))


def _write_v1(directory: Path, trace: Trace, version: int = 1) -> None:
    """Each process with pptrace's real exporter, 5 events an export, then its stats."""
    directory.mkdir(parents=True, exist_ok=True)
    for proc in trace.processes:
        config = Config(trace_dir=str(directory), schema_version=version)
        sink = build_sink(config, proc.rank)
        for i in range(0, len(proc.events), 5):
            sink.export(list(proc.events[i:i + 5]))
        sink.export_stats(RecorderStats(rank=proc.rank, time_ns=5, recorded=len(proc.events),
                                        exported=len(proc.events), run_id="run-1", final=True))
        sink.shutdown(1.0)


def _plain(value: dict[str, Any]) -> Any:
    (kind, inner), = value.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return [_plain(v) for v in inner.get("values", [])]
    return inner


_ITEM = {"float32": 4, "float16": 2, "int64": 8}  # the dtypes these tests use


def _v2_span(span: dict[str, Any], resource: dict[str, Any], file: bool) -> dict[str, Any]:
    """A version 1 span in its version 2 form (what it lacks now lives on ``resource``), as a
    trace file (``file``) or an SDK span (which keeps the duration) has it."""
    attrs = {a["key"]: _plain(a["value"]) for a in span["attributes"]}
    keep = dict(span)
    drop = set(_PROCESS_KEYS)
    extra: list[dict[str, Any]] = []
    if span["name"] != schema.SPAN_STATS:
        ev = schema.attributes_to_event(attrs)
        t = ev.tensors
        resource.setdefault(schema.R_THREAD_MAIN_NAME, ev.thread_name)  # the first event's
        resource.setdefault(schema.R_THREAD_MAIN_ID, ev.thread_id)
        if any(m.is_tensor for m in t):  # the first tensor's device
            resource.setdefault(schema.R_MAIN_DEVICE, next(m.device for m in t if m.is_tensor))
        drop |= {schema.TENSOR_COUNT, schema.TOTAL_BYTES}
        for key, value in ((schema.THREAD_NAME, ev.thread_name), (schema.THREAD_ID, ev.thread_id)):
            if value == resource[schema.RESOURCE_KEYS[key]]:
                drop.add(key)
        if all(m.key == PREFIX + m.name for m in t):
            drop.add(schema.T_KEYS)
        main = resource.get(schema.R_MAIN_DEVICE)
        if all(m.device == (main if m.is_tensor else "") for m in t):
            drop.add(schema.T_DEVICES)
        if all(m.nbytes == (math.prod(m.shape) * _ITEM.get(m.dtype, -1) if m.is_tensor else 0)
               for m in t):
            drop.add(schema.T_NBYTES)
        for key, field in ((schema.T_CONTIG, "contiguous"), (schema.T_IS_TENSOR, "is_tensor")):
            if all(getattr(m, field) for m in t):
                drop.add(key)
        keys, before = [m.key for m in t], list(ev.keys_before)
        at = next((i for i in range(len(before)) if keys and before[i:i + len(keys)] == keys),
                  None)
        if at is not None:
            del before[at:at + len(keys)]
            extra = [{"key": schema.KEYS_TENSORS_AT, "value": {"intValue": str(at)}}]
        if ev.keys_after == schema.implied_keys_after(ev):
            drop.add(schema.KEYS_AFTER)
        if ev.returned_none == (ev.direction == "attach" or ev.error_type is not None):
            drop.add(schema.RETURNED_NONE)
        if ev.dropped_before == 0:
            drop.add(schema.DROPPED_BEFORE)
        if file:
            drop.add(schema.DURATION_NS)
    for key in _PROCESS_KEYS:
        if key in attrs:
            resource[_PROCESS_KEYS[key]] = 2 if key == schema.VERSION else attrs[key]
    keep["attributes"] = [a for a in span["attributes"] if a["key"] not in drop] + extra
    if extra:
        (entry,) = [a for a in keep["attributes"] if a["key"] == schema.KEYS_BEFORE]
        entry["value"] = {"arrayValue": {"values": [{"stringValue": k} for k in before]}
                          if before else {}}
    return keep


def _any(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def _to_v2(src: Path, dst: Path, file: bool = True) -> None:
    """A version 1 trace file rewritten as version 2, line by line, compact as the writer's
    (``file``: as a trace file, else as SDK spans)."""
    resource: dict[str, Any] = {}
    lines = []
    docs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    for doc in docs:
        (rs,) = doc["resourceSpans"]
        for a in rs["resource"]["attributes"]:
            resource.setdefault(a["key"], _plain(a["value"]))
        (ss,) = rs["scopeSpans"]
        ss["spans"] = [_v2_span(span, resource, file) for span in ss["spans"]]
    for doc in docs:  # the resource is the same on every line, as the writer writes it
        doc["resourceSpans"][0]["resource"]["attributes"] = [
            {"key": k, "value": _any(v)} for k, v in resource.items()]
        lines.append(json.dumps(doc, separators=(",", ":")))
    dst.write_text("\n".join(lines) + "\n")


def _pair(tmp_path: Path, file: bool = True) -> tuple[Path, Path]:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    _write_v1(v1, _run())
    v2.mkdir()
    for f in sorted(v1.iterdir()):
        _to_v2(f, v2 / f.name, file)
    return v1, v2


def _fields(trace: Trace) -> list[Any]:
    """Every field of every event and stats, by name."""
    return [(p.rank, [ev._asdict() for ev in p.events], p.stats) for p in trace.processes]


def test_the_version_2_form_is_smaller_and_has_no_per_process_constant_on_spans(
    tmp_path: Path
) -> None:
    v1, v2 = _pair(tmp_path)
    for a, b in zip(sorted(v1.iterdir()), sorted(v2.iterdir()), strict=True):
        assert b.stat().st_size < 0.6 * a.stat().st_size  # 0.53 to 0.54 measured
        for line in b.read_text().splitlines():
            (rs,) = json.loads(line)["resourceSpans"]
            resource = {a["key"] for a in rs["resource"]["attributes"]}
            assert set(_PROCESS_KEYS.values()) <= resource
            for span in rs["scopeSpans"][0]["spans"]:
                assert not {a["key"] for a in span["attributes"]} & set(_PROCESS_KEYS)


def test_v1_and_v2_give_identical_events_plain_and_compressed(tmp_path: Path) -> None:
    v1, v2 = _pair(tmp_path)
    expected = load_paths([str(v1)])
    assert expected.event_count == sum(len(p.events) for p in _run().processes)
    assert [[ev for ev in p.events] for p in expected.processes] == [
        list(p.events) for p in _run().processes]
    assert _fields(load_paths([str(v2)])) == _fields(expected)
    gz = tmp_path / "v2gz"
    gz.mkdir()
    for f in sorted(v2.iterdir()):
        (gz / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
    assert _fields(load_paths([str(gz)])) == _fields(expected)
    assert not load_paths([str(gz)]).problems


def test_the_writers_version_2_reads_as_the_one_built_from_the_spec(tmp_path: Path) -> None:
    v1, v2 = _pair(tmp_path)
    _write_v1(tmp_path / "written", _run(), version=2)
    written = load_paths([str(tmp_path / "written")])
    assert _fields(written) == _fields(load_paths([str(v2)])) == _fields(load_paths([str(v1)]))
    for f in (tmp_path / "written").iterdir():
        assert '"pptrace.schema_version","value":{"intValue":"2"}' in f.read_text()


def test_the_fast_path_reads_version_2_and_keeps_processes_apart(tmp_path: Path) -> None:
    run = Run(pp_size=2, tp_size=2)
    for _ in range(30):  # the same calls step after step, as an engine makes them
        run.step([meta("scores", (4, 5)), meta("ids", (4,), "int64")])
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    _write_v1(v1, run.trace(all_ranks=False))
    v2.mkdir()
    for f in sorted(v1.iterdir()):
        _to_v2(f, v2 / f.name)
    files = [str(f) for f in sorted(v2.iterdir())]
    builder = TraceBuilder()
    assert read_files(files, {f: 1 for f in files}, builder, None) == []
    assert builder.fast.hits > 10 * builder.fast.misses  # cached shapes, not a parse a span
    # The TP ranks' spans are the same text but for their resource: still four processes.
    trace = builder.build(files)
    assert len({p.rank for p in trace.processes}) == 4
    assert _fields(trace) == _fields(load_paths([str(v1)]))


def test_a_version_2_document_walked_span_by_span(tmp_path: Path) -> None:
    v1, v2 = _pair(tmp_path)
    merged = {"resourceSpans": [rs for f in sorted(v2.iterdir())
                                for line in f.read_text().splitlines()
                                for rs in json.loads(line)["resourceSpans"]]}
    doc = tmp_path / "export.json"
    doc.write_text(json.dumps(merged, indent=1))
    assert _fields(load_paths([str(doc)])) == _fields(load_paths([str(v1)]))


def test_the_worker_reads_version_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = _pair(tmp_path)
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    monkeypatch.delenv("PPTRACE_LOAD_WORKERS", raising=False)
    taken: list[bool] = []
    real_take = load_worker.take
    monkeypatch.setattr(load_worker, "take",
                        lambda *a: (taken.append(True), real_take(*a))[1])
    parallel = load_paths([str(v2)])
    assert taken and _fields(parallel) == _fields(load_paths([str(v1)]))


def _jaeger(files: list[Path]) -> dict[str, Any]:
    """Jaeger's JSON for OTLP files: one trace a span, the resource as the process's tags."""
    traces = []
    for f in files:
        for line in f.read_text().splitlines():
            (rs,) = json.loads(line)["resourceSpans"]
            res = {a["key"]: _plain(a["value"]) for a in rs["resource"]["attributes"]}
            process = {"serviceName": res.pop("service.name", ""),
                       "tags": [jaeger_tag(k, v) for k, v in res.items()]}
            for span in rs["scopeSpans"][0]["spans"]:
                start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
                traces.append({"traceID": span["traceId"], "processes": {"p1": process},
                               "spans": [{
                                   "traceID": span["traceId"], "spanID": span["spanId"],
                                   "operationName": span["name"], "processID": "p1",
                                   "startTime": start // 1000,
                                   "duration": (end - start) // 1000,
                                   "tags": [jaeger_tag(a["key"], _plain(a["value"]))
                                            for a in span["attributes"]]}]})
    return {"data": traces}


def test_jaeger_process_tags_carry_version_2s_constants(tmp_path: Path) -> None:
    v1, v2 = _pair(tmp_path, file=False)  # spans as OTLP sends them: they keep the duration
    loaded = []
    for name, directory in (("v1", v1), ("v2", v2)):
        path = tmp_path / f"{name}-jaeger.json"
        path.write_text(json.dumps(_jaeger(sorted(directory.iterdir()))))
        loaded.append(load_paths([str(path)]))
    assert loaded[0].event_count == load_paths([str(v1)]).event_count
    assert _fields(loaded[1]) == _fields(loaded[0])


def test_stats_of_version_2_take_their_process_from_the_resource() -> None:
    rank = _run().processes[0].rank
    attrs = {k: v for k, v in schema.stats_to_attributes(
        RecorderStats(rank=rank, time_ns=3, recorded=4, run_id="r")).items()
        if k not in _PROCESS_KEYS}
    resource = {"host.name": rank.host, "process.pid": rank.pid, schema.VERSION: 2,
                schema.RUN_ID: "r", schema.RANK: rank.rank, schema.WORLD_SIZE: rank.world_size,
                schema.PP_RANK: rank.pp_rank, schema.PP_SIZE: rank.pp_size,
                schema.TP_RANK: rank.tp_rank, schema.TP_SIZE: rank.tp_size}
    stats = schema.attributes_to_stats(attrs, resource=resource)
    assert stats == RecorderStats(rank=rank, time_ns=3, recorded=4, run_id="r")


def test_a_span_wins_over_its_resource() -> None:
    ev = _run().processes[0].events[1]
    attrs = schema.event_to_attributes(ev)
    resource = {"host.name": "elsewhere", "process.pid": 1, schema.VERSION: 2,
                schema.R_THREAD_MAIN_NAME: "other"}
    assert schema.attributes_to_event(attrs, ev.start_ns, resource=resource) == ev


@pytest.mark.parametrize(("resource", "expected"), [
    ({}, "'pptrace.schema_version' should be an integer, found NoneType"),
    ({schema.VERSION: 2, "host.name": 3}, "resource attribute 'host.name' should be a string, "
                                          "found int"),
    ({schema.VERSION: 4}, "pptrace schema version 4 is not supported"),
])
def test_a_version_2_span_without_a_usable_resource_is_one_line(
    resource: dict[str, Any], expected: str
) -> None:
    ev: Event = _run().processes[0].events[0]
    attrs = {k: v for k, v in schema.event_to_attributes(ev).items() if k not in _PROCESS_KEYS}
    with pytest.raises(SchemaVersionError) as info:
        schema.attributes_to_event(attrs, resource=resource)
    assert expected in str(info.value) and "\n" not in str(info.value)
