"""Schema version 2 on the writing side (issue 17, item 1): compact spans, the same events.

Real calls (successes, every engine error, non-tensor values, keys outside the prefix, a second
thread, a transposed view, dtypes of other sizes, a tensor on another device) are recorded into
trace files written as version 1 (``PPTRACE_SCHEMA=1``) and as version 2 (the default), plain and
gzip: pptrace's loader gives identical ``Event`` records from all of them, field by field. Version 2
lines carry the process's constants on the resource only and leave out what follows from the rest;
the SDK-span path (OTLP) compacts against its provider's resource, and under the engine's own
provider (no pptrace resource) writes complete version 1 spans.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pptrace.record.engine as engine
from pptrace.export.sinks import build_sink
from pptrace.export.spans import SdkSpanSink, pptrace_provider, process_resource
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.errors import SchemaVersionError
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.helpers_recorder import Composite

RANK = RankInfo(rank=3, world_size=4, pp_rank=3, pp_size=4, tp_rank=0, tp_size=1, host="h",
                pid=4242)
CONSTANTS = {schema.VERSION, schema.RUN_ID, schema.RANK, schema.WORLD_SIZE, schema.PP_RANK,
             schema.PP_SIZE, schema.TP_RANK, schema.TP_SIZE, schema.HOST, schema.PID}


def calls(attach: Any, extract: Any) -> None:
    """Every kind of call the engine makes, twice (so that templates form)."""
    for _ in range(2):
        tensors: dict[str, Any] = {"next_token_ids": torch.arange(4), "lens": [1, 2]}
        attach(tensors, Output(3))
        extract(tensors, Observer())
        for call, args in ((attach, ({"next_token_ids": [1]}, Composite())),
                           (attach, ({}, Output(0))),
                           (extract, ({PREFIX + "x": [1]}, Observer())),
                           (extract, ({PREFIX + "x": torch.ones(1)}, None))):
            with pytest.raises(RuntimeError):
                call(*args)
        attach({}, None)
        extract({"other": 1}, None)
        odd = {"view": torch.ones(2, 3).t(), "ids": torch.arange(3),
               "half": torch.zeros(2).bfloat16(), "meta": torch.empty(4, device="meta"),
               "flag": torch.tensor(True)}
        tensors = {"next_token_ids": [1]}
        attach(tensors, Output(odd))  # written: contiguous, devices; derived: nbytes
        extract(tensors, Observer())
        extract({}, Observer())  # nothing to extract: returns None
        worker = threading.Thread(target=lambda: extract({PREFIX + "w": torch.ones(2)},
                                                         Observer()), name="worker")
        worker.start()
        worker.join()


def write(trace_dir: Path, **config: Any) -> Recorder:
    cfg = Config(trace_dir=str(trace_dir), flush_interval=3600, native=False, run_id="run",
                 **config)
    rec = Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank),
                   rank_provider=lambda: (RANK, True))
    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, rec)
    calls(attach, extract)
    rec.flush()
    calls(attach, extract)
    rec.shutdown(timeout=10.0)
    assert (rec.dropped, rec.internal_errors) == (0, 0)
    return rec


def documents(trace_dir: Path) -> list[dict[str, Any]]:
    (path,) = trace_dir.iterdir()
    data = path.read_bytes()
    text = gzip.decompress(data) if path.name.endswith(".gz") else data
    return [json.loads(line) for line in text.splitlines()]


def attrs(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: next(iter(kv["value"].values())) for kv in kvs}


def test_v1_v2_and_v3_files_load_to_identical_events(tmp_path: Path) -> None:
    v1 = write(tmp_path / "v1", schema_version=1)
    write(tmp_path / "v2", schema_version=2)
    write(tmp_path / "v2gz", schema_version=2, compress="gzip")
    write(tmp_path / "v3")  # the default: version 2 with its string arrays joined
    write(tmp_path / "v3gz", compress="gzip")
    names = ("v1", "v2", "v2gz", "v3", "v3gz")
    loaded = {name: load_paths([str(tmp_path / name)]).processes for name in names}
    (one,), (two,), (packed,), (three,), (three_packed,) = loaded.values()
    assert [documents(tmp_path / n)[0]["resourceSpans"][0]["resource"]["attributes"][1]
            for n in ("v2", "v3")] == [{"key": schema.VERSION, "value": {"intValue": v}}
                                       for v in ("2", "3")]
    assert len(one.events) == v1.recorded == 2 * 2 * 12
    times = ("start_ns", "mono_ns", "duration_ns")

    def untimed(events: tuple[Event, ...]) -> list[Event]:
        """Times apart (and the worker thread's id: a new thread in each run)."""
        return [e._replace(**dict.fromkeys(times, 0),
                           thread_id=0 if e.thread_name == "worker" else e.thread_id)
                for e in events]

    # Field by field (Event is a NamedTuple: == compares every field, ranks and tensors too).
    assert untimed(one.events) == untimed(two.events) == untimed(packed.events)
    assert untimed(one.events) == untimed(three.events) == untimed(three_packed.events)
    assert {e.thread_name for e in two.events} == {threading.current_thread().name, "worker"}
    assert one.rank == two.rank == packed.rank == three.rank == three_packed.rank == RANK
    procs = (one, two, packed, three, three_packed)
    assert all(p.stats is not None for p in procs)
    untimed_stats = [dataclasses.replace(p.stats, time_ns=0) for p in procs if p.stats]
    assert all(s == untimed_stats[0] for s in untimed_stats)
    assert untimed_stats[0].final and untimed_stats[0].recorded == len(one.events)


def test_v2_lines_keep_the_constants_on_the_resource_only(tmp_path: Path) -> None:
    write(tmp_path / "v1", schema_version=1)
    write(tmp_path / "v2", schema_version=2)
    for version, docs in ((1, documents(tmp_path / "v1")), (2, documents(tmp_path / "v2"))):
        for doc in docs:
            (rs,) = doc["resourceSpans"]
            resource = attrs(rs["resource"]["attributes"])
            spans = rs["scopeSpans"][0]["spans"]
            if version == 1:
                assert schema.VERSION not in resource
                assert all(CONSTANTS <= set(attrs(s["attributes"])) for s in spans)
                continue
            assert resource[schema.VERSION] == "2" and resource[schema.RUN_ID] == "run"
            assert (resource[schema.RANK], resource[schema.PP_SIZE]) == ("3", "4")
            assert (resource[schema.R_HOST], resource[schema.R_PID]) == ("h", "4242")
            assert resource[schema.R_THREAD_MAIN_NAME] == threading.current_thread().name
            for span in spans:
                found = attrs(span["attributes"])
                assert not CONSTANTS & set(found)
                if span["name"] == schema.SPAN_STATS:
                    continue
                assert schema.T_KEYS not in found  # every key is PREFIX + name
                names = found[schema.T_NAMES]["values"] if found[schema.T_NAMES] else []
                worker = [n["stringValue"] for n in names] == ["w"]
                assert (found.get(schema.THREAD_NAME) == "worker") is worker
                assert (schema.THREAD_NAME in found) is worker
    v1_bytes = sum(p.stat().st_size for p in (tmp_path / "v1").iterdir())
    v2_bytes = sum(p.stat().st_size for p in (tmp_path / "v2").iterdir())
    assert v2_bytes < 0.75 * v1_bytes


def test_only_what_does_not_follow_is_written() -> None:
    """Each attribute version 2 may leave out is written exactly when it does not follow from
    the rest of the span or its resource, and every case decodes back to the same event, with
    the duration as an attribute (SDK spans) or left to the span's times (trace files)."""
    meta = TensorMeta(name="a", key=PREFIX + "a", shape=(2,), dtype="float32", device="cpu",
                      nbytes=8)
    other = TensorMeta(name="list", key=PREFIX + "list", dtype="list", is_tensor=False,
                       contiguous=True)
    ok = Event(direction=Direction.ATTACH, seq=0, rank=RANK, start_ns=1, mono_ns=2,
               duration_ns=3, thread_id=11, thread_name="MainThread", tensors=(meta,),
               keys_before=("x",), keys_after=("x", PREFIX + "a"), run_id="run",
               subject_type="sglang.Output")
    out = ok._replace(direction=Direction.EXTRACT, keys_before=("x", PREFIX + "a", "y"),
                      keys_after=("x", "y"), returned_none=False)
    res = schema.resource_attributes(RANK, "run", 2, "MainThread", 11, "cpu", "sglang.Output")
    def m(t: TensorMeta, **changes: Any) -> TensorMeta:
        return t._replace(**changes)

    cases: list[Any] = [
        (ok, set()),
        (ok._replace(keys_after=(PREFIX + "a", "x")), {schema.KEYS_AFTER}),
        (ok._replace(tensors=(m(meta, key="other.a"),), keys_after=("x", "other.a")),
         {schema.T_KEYS}),
        (ok._replace(rank=RANK), set()),
        (ok._replace(thread_id=12), {schema.THREAD_ID}),
        (ok._replace(thread_name="worker"), {schema.THREAD_NAME}),
        (ok._replace(subject_type="sglang.Other"), {schema.SUBJECT_TYPE}),
        (ok._replace(subject_type=""), {schema.SUBJECT_TYPE}),
        (ok._replace(dropped_before=2), {schema.DROPPED_BEFORE}),
        (ok._replace(returned_none=False), {schema.RETURNED_NONE}),
        (ok._replace(duration_ns=-5), {schema.DURATION_NS}),  # not what the times can say
        (ok._replace(tensors=(m(meta, device="cuda:0"),)), {schema.T_DEVICES}),
        (ok._replace(tensors=(m(meta, nbytes=9),)), {schema.T_NBYTES}),
        (ok._replace(tensors=(m(meta, dtype="float4_e2m1fn_x2"),)), {schema.T_NBYTES}),
        (ok._replace(tensors=(m(meta, dtype="int64", nbytes=16),)), set()),
        (ok._replace(tensors=(m(meta, shape=(), nbytes=4),)), set()),  # 0-d
        (ok._replace(tensors=(m(meta, contiguous=False),)), {schema.T_CONTIG}),
        (ok._replace(tensors=(meta, other), keys_after=("x", PREFIX + "a", PREFIX + "list")),
         {schema.T_IS_TENSOR}),
        (ok._replace(tensors=(m(other, nbytes=5),), keys_after=("x", PREFIX + "list")),
         {schema.T_IS_TENSOR, schema.T_NBYTES}),
        (ok._replace(tensors=(m(other, device="cpu"),), keys_after=("x", PREFIX + "list")),
         {schema.T_IS_TENSOR, schema.T_DEVICES}),
        (ok._replace(tensors=(), keys_after=("x",)), set()),
        (out, {schema.KEYS_TENSORS_AT}),
        (out._replace(returned_none=True), {schema.KEYS_TENSORS_AT, schema.RETURNED_NONE}),
        (out._replace(keys_before=("x", PREFIX + "a", "y"), keys_after=("x", PREFIX + "a", "y"),
                      error_type="RuntimeError", error_message="m", returned_none=True),
         {schema.KEYS_TENSORS_AT}),
        (out._replace(keys_before=("x", "y")), set()),  # the tensor keys not in before
        (out._replace(tensors=(meta, m(meta, name="b", key=PREFIX + "b")),
                      keys_before=(PREFIX + "a", "x", PREFIX + "b"), keys_after=("x",)),
         set()),  # the tensor keys not together: keys.before is written whole
    ]
    optional = {schema.KEYS_AFTER, schema.T_KEYS, schema.RANK, schema.WORLD_SIZE,
                schema.PP_RANK, schema.PP_SIZE, schema.TP_RANK, schema.TP_SIZE,
                schema.THREAD_ID, schema.THREAD_NAME, schema.DROPPED_BEFORE,
                schema.RETURNED_NONE, schema.DURATION_NS, schema.T_DEVICES, schema.T_NBYTES,
                schema.T_CONTIG, schema.T_IS_TENSOR, schema.KEYS_TENSORS_AT,
                schema.TENSOR_COUNT, schema.TOTAL_BYTES, schema.DIRECTION,
                schema.SUBJECT_TYPE}
    # A resource made before the rank was known (a guess): the span says what it lacks.
    guess = schema.resource_attributes(RankInfo(host="h", pid=4242), "run", 2, "MainThread", 11,
                                       "cpu", "sglang.Output")
    under = [(event, written, res) for event, written in cases]
    under.append((ok, {schema.RANK, schema.WORLD_SIZE, schema.PP_RANK, schema.PP_SIZE,
                       schema.TP_RANK, schema.TP_SIZE}, guess))
    for event, written, resource in under:
        # An SDK span keeps the duration and the direction (Jaeger's microseconds, its tag
        # search); a trace file's leaves them to its times and its name.
        for exact in (False, True):
            out_attrs = schema.event_to_attributes(event, resource, exact)
            expect = written | ({schema.DURATION_NS, schema.DIRECTION} if not exact else set())
            assert set(out_attrs) & optional == expect, (event, exact)
            assert schema.attributes_to_event(out_attrs, event.start_ns, event.end_ns,
                                              resource=resource,
                                              name=schema.span_name(event.direction)) == event
        # Without its name, a trace file's span cannot say its direction: one line says so.
        with pytest.raises(SchemaVersionError, match="'pptrace.direction' should be a string"):
            schema.attributes_to_event(schema.event_to_attributes(event, resource, True),
                                       event.start_ns, event.end_ns, resource=resource)
        full = schema.event_to_attributes(event)  # no resource: version 1, complete
        assert full[schema.VERSION] == 1 and optional - set(full) <= set(_RANKS)
        assert schema.attributes_to_event(full, event.start_ns, event.end_ns) == event
    # Without the resource a version 2 span cannot be rebuilt: one line says what is missing.
    bare = {schema.VERSION: 2, **schema.event_to_attributes(ok, res)}
    with pytest.raises(SchemaVersionError, match="'pptrace.tensor.devices' is missing and the "
                                                  "resource has no string"):
        schema.attributes_to_event(bare, resource={schema.VERSION: 2})
    with pytest.raises(SchemaVersionError, match="'pptrace.keys.tensors_at' is 9, outside"):
        schema.attributes_to_event({**schema.event_to_attributes(out, res),
                                    schema.KEYS_TENSORS_AT: 9}, resource=res)


_RANKS = {schema.RANK, schema.WORLD_SIZE, schema.PP_RANK, schema.PP_SIZE, schema.TP_RANK,
          schema.TP_SIZE, schema.KEYS_TENSORS_AT}


def _sdk_spans(provider: TracerProvider) -> tuple[InMemorySpanExporter, SdkSpanSink]:
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, SdkSpanSink(provider)


def test_the_sdk_path_compacts_against_its_provider_s_resource(tmp_path: Path) -> None:
    cfg = Config(trace_dir=str(tmp_path), run_id="run", native=False, exporters=("none",))
    ours = pptrace_provider(process_resource(RANK, "run"))
    engines = TracerProvider(resource=Resource({"service.name": "engine"}))
    for provider, version in ((ours, 2), (engines, 1)):
        memory, sink = _sdk_spans(provider)
        rec = Recorder(cfg, sink_factory=lambda _rank, sink=sink: sink,
                       rank_provider=lambda: (RANK, True))
        attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                         engine.pop_auxiliary_output_from_pp_tensors, rec)
        calls(attach, extract)
        rec.shutdown(timeout=5.0)
        spans = memory.get_finished_spans()
        resource = dict(provider.resource.attributes)
        events = [s for s in spans if s.name != schema.SPAN_STATS]
        assert len(events) == 24
        for span in events:
            found = dict(span.attributes or {})
            if version == 2:
                assert not CONSTANTS & set(found) and schema.T_KEYS not in found
                # No main thread nor device on an SDK resource: the spans say theirs; and
                # the duration, since Jaeger keeps span times in microseconds only.
                assert {schema.THREAD_NAME, schema.THREAD_ID, schema.DURATION_NS} <= set(found)
                if found[schema.T_NAMES] and schema.T_IS_TENSOR not in found:  # all tensors
                    assert schema.T_DEVICES in found
            else:
                assert found[schema.VERSION] == 1 and CONSTANTS <= set(found)
            event = schema.attributes_to_event(found, span.start_time or 0, span.end_time,
                                               resource=resource)
            assert event.rank == RANK and event.run_id == "run"
        (stats,) = [s for s in spans if s.name == schema.SPAN_STATS][-1:]
        back = schema.attributes_to_stats(dict(stats.attributes or {}), resource=resource)
        assert back.rank == RANK and back.final and back.recorded == 24
