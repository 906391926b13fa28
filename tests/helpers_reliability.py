"""Shared pieces for the reliability, fault, crash, concurrency and fuzz tests.

    mod = transport()              # SGLang's real module (or pptrace.record.engine without it)
    rec = make_recorder(Config(), ListSink())
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
"""

from __future__ import annotations

import functools
import json
import os
import struct
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from pptrace.model import errors, schema
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.record.recorder import Recorder
from tests.doubles import NotPP, Observer, Output, RaisingObserver

RANK = RankInfo(rank=0, world_size=1, pp_rank=0, pp_size=1, tp_rank=0, tp_size=1,
                host="testhost", pid=os.getpid())


@functools.lru_cache(maxsize=1)
def transport() -> types.ModuleType:
    """SGLang's real transport module when installed, else pptrace's reference engine."""
    from pptrace.engines.sglang_load import load_transport_module

    mod = load_transport_module(allow_bare=True)
    if mod is None:
        import pptrace.record.engine as mod
    return mod


# --- sinks ------------------------------------------------------------------------------------


class ListSink:
    """An in-memory recorder sink."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.stats: list[RecorderStats] = []
        self.closed = False

    def export(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def export_stats(self, stats: RecorderStats) -> None:
        self.stats.append(stats)

    def shutdown(self, timeout: float) -> None:
        self.closed = True


class RaisingSink(ListSink):
    """A sink whose every call raises ``make_exc()`` (any BaseException subclass)."""

    def __init__(self, make_exc: Callable[[], BaseException]) -> None:
        super().__init__()
        self.make_exc = make_exc
        self.calls = 0

    def export(self, events: Sequence[Event]) -> None:
        self.calls += 1
        raise self.make_exc()

    def export_stats(self, stats: RecorderStats) -> None:
        self.calls += 1
        raise self.make_exc()

    def shutdown(self, timeout: float) -> None:
        raise self.make_exc()


def make_recorder(config: Config, sink: Any = None,
                  sink_factory: Callable[[RankInfo], Any] | None = None) -> Recorder:
    """A recorder with a fixed rank (no torch.distributed probing) and the given sink."""
    if sink_factory is None and sink is not None:
        def sink_factory(rank: RankInfo) -> Any:
            return sink
    return Recorder(config, sink_factory=sink_factory, rank_provider=lambda: (RANK, True))


def file_sink_factory(config: Config) -> Callable[[RankInfo], Any]:
    """The real file sink (OTLP JSON lines through the SDK), as the recorder builds it."""
    from pptrace.export.sinks import build_sink

    return lambda rank: build_sink(config, rank)


# --- scenarios: one call of attach or extract, built fresh each time ----------------------------

SENTINEL = object()  # what observers return, so identity can be compared across runs


@dataclass(frozen=True)
class Scenario:
    name: str
    direction: str  # "attach" | "extract"
    build: Callable[[], tuple[dict[Any, Any], Any]]


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


# Tensors shared by both runs of a scenario, so that "same object" can be checked.
T1, T2 = _t(1.0, 2.0), _t(3.0)
LIST = [1.0]
IDS = torch.tensor([7, 8])


def scenarios() -> list[Scenario]:
    """Every branch of attach and extract, the happy paths and each error."""
    ids = IDS
    P = PREFIX
    return [
        Scenario("attach none", "attach", lambda: ({"next_token_ids": ids}, None)),
        Scenario("attach ok", "attach",
                 lambda: ({"next_token_ids": ids}, Output({"a": T1, "b": T2}))),
        Scenario("attach not pp", "attach", lambda: ({"next_token_ids": ids}, NotPP())),
        Scenario("attach empty", "attach", lambda: ({"next_token_ids": ids}, Output({}))),
        Scenario("attach bad name", "attach",
                 lambda: ({"next_token_ids": ids}, Output({"a": T1, 3: T2}))),
        Scenario("attach empty name", "attach",
                 lambda: ({"next_token_ids": ids}, Output({"": T1}))),
        Scenario("attach not tensor", "attach",
                 lambda: ({"next_token_ids": ids}, Output({"a": T1, "b": LIST}))),
        Scenario("attach duplicate", "attach",
                 lambda: ({"next_token_ids": ids, P + "b": T2}, Output({"a": T1, "b": T2}))),
        Scenario("extract none", "extract", lambda: ({"next_token_ids": ids}, Observer(SENTINEL))),
        Scenario("extract ok", "extract",
                 lambda: ({"next_token_ids": ids, P + "a": T1, P + "b": T2}, Observer(SENTINEL))),
        Scenario("extract no observer", "extract", lambda: ({P + "a": T1}, None)),
        Scenario("extract not pp", "extract", lambda: ({P + "a": T1}, NotPP())),
        Scenario("extract not tensor", "extract", lambda: ({P + "a": LIST}, Observer(SENTINEL))),
        Scenario("extract not reconstructed", "extract", lambda: ({P + "a": T1}, Observer(None))),
        Scenario("extract observer raises", "extract",
                 lambda: ({P + "a": T1}, RaisingObserver(ValueError("observer broke")))),
        Scenario("extract non-str key", "extract",
                 lambda: ({P + "a": T1, 5: T2}, Observer(SENTINEL))),
    ]


@dataclass(frozen=True)
class Outcome:
    """What the engine saw from one call: the result object or the error, and the dict after."""

    result: Any
    error: tuple[type, str] | None
    error_obj: BaseException | None
    after: list[tuple[Any, Any]]


def run_call(fn: Callable[[Any, Any], Any], tensors: dict[Any, Any], arg: Any) -> Outcome:
    try:
        result = fn(tensors, arg)
    except Exception as exc:
        return Outcome(None, (type(exc), str(exc)), exc, list(tensors.items()))
    return Outcome(result, None, None, list(tensors.items()))


def same_outcome(bare: Outcome, wrapped: Outcome) -> None:
    """Assert two outcomes are indistinguishable to the engine (identity where it matters)."""
    assert bare.error == wrapped.error
    assert bare.result is wrapped.result
    assert [k for k, _ in bare.after] == [k for k, _ in wrapped.after]
    assert all(a is b for (_, a), (_, b) in zip(bare.after, wrapped.after, strict=True))


# --- reading trace files before / besides pptrace.load.loader ---------------------------------


def _attr_value(value: dict[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_attr_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(owner: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: _attr_value(a.get("value", {})) for a in owner.get("attributes", [])}


def iter_resource_spans(
        path: str) -> Iterator[tuple[int, dict[str, Any], dict[str, Any] | None]]:
    """Yield (line number, resource attributes, span dict) for every span of an OTLP JSON lines
    file; a line that does not parse yields (line number, {}, None)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                yield number, {}, None
                continue
            for rs in data.get("resourceSpans", []):
                resource = _attributes(rs.get("resource", {}))
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        yield number, resource, span


def iter_spans(path: str) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """Yield (line number, span dict) for every span of an OTLP JSON lines file; a line that
    does not parse yields (line number, None)."""
    for number, _, span in iter_resource_spans(path):
        yield number, span


def read_trace_file(path: str) -> tuple[list[Event], list[RecorderStats], list[int]]:
    """Decode a pptrace OTLP JSON lines file directly, schema version 1 or 2 (what a version 2
    span leaves to its resource is read there): (events, stats, unparsable line numbers)."""
    events: list[Event] = []
    stats: list[RecorderStats] = []
    bad: list[int] = []
    for number, resource, span in iter_resource_spans(path):
        if span is None:
            bad.append(number)
            continue
        attrs = _attributes(span)
        if span.get("name") == schema.SPAN_STATS:
            stats.append(schema.attributes_to_stats(attrs, resource=resource))
        elif span.get("name") in (schema.SPAN_ATTACH, schema.SPAN_EXTRACT):
            start = int(span.get("startTimeUnixNano", 0))
            end = int(span.get("endTimeUnixNano", start))
            events.append(schema.attributes_to_event(attrs, start, end, resource=resource,
                                                      name=span["name"]))
    return events, stats, bad


def trace_files(directory: str) -> list[str]:
    """Every trace file under ``directory``."""
    return sorted(
        os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".jsonl")
    )




# --- a recording child process (crash safety) ---------------------------------------------------


def recording_child(trace_dir: str, interval: float, how: str) -> None:
    """Record attach/extract pairs until killed, printing "<pair> <monotonic ns>" after each.

    ``how``: "recorder" (a plain Recorder with the file sink) or "startup" (``pptrace.instrument``
    patching the engine module, which owns the exit and SIGTERM flush). Stops by itself after
    ``PPTRACE_TEST_PAIRS`` pairs when that is set (a normal exit).
    """
    import sys
    import time

    config = Config(trace_dir=trace_dir, flush_interval=interval, exit_timeout=5.0)
    mod = transport()
    if how == "startup":
        from pptrace.activation.startup import instrument
        from pptrace.record.wrapper import is_wrapped

        instrument(config)
        attach = mod.add_auxiliary_output_to_pp_tensors
        extract = mod.pop_auxiliary_output_from_pp_tensors
        assert is_wrapped(attach) and is_wrapped(extract)
    else:
        from pptrace.export.sinks import build_sink
        from pptrace.record.wrapper import wrap_transport

        rec = Recorder(config, sink_factory=lambda rank: build_sink(config, rank),
                       rank_provider=lambda: (RANK, True)).start()
        attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                         mod.pop_auxiliary_output_from_pp_tensors, rec)
    limit = int(os.environ.get("PPTRACE_TEST_PAIRS", "0")) or None
    print("ready", flush=True)
    pair = 0
    while limit is None or pair < limit:
        d = {"next_token_ids": IDS}
        attach(d, Output({"a": T1}))
        extract(d, Observer(SENTINEL))
        print(pair, time.monotonic_ns(), flush=True)
        pair += 1
        time.sleep(0.002)
    sys.stdout.flush()


def write_good_trace(directory: str, flushes: int = 3) -> str:
    """Record ``flushes`` attach/extract pairs, one flush each, with the real file sink; return
    the trace file's path (one OTLP JSON line per flush, plus stats)."""
    from pptrace.record.wrapper import wrap_transport

    config = Config(trace_dir=directory, flush_interval=60)
    rec = make_recorder(config, sink_factory=file_sink_factory(config))
    mod = transport()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    for _ in range(flushes):
        d = {"next_token_ids": IDS}
        attach(d, Output({"a": T1}))
        extract(d, Observer(SENTINEL))
        rec.flush()
    rec.shutdown(timeout=5.0)
    (path,) = trace_files(directory)
    return path


# --- hypothesis strategies: schema-valid but otherwise arbitrary records -----------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-2, 6)
NAMES = st.sampled_from(["scores", "", "a", PREFIX, "next_token_ids", "__msg_type__",
                         "\x1b[31mx", "[b]y[/b]", "a\nb", "é", "x" * 300]) | st.text(max_size=12)
TEMPLATES = [errors.ATTACH_NOT_PP, errors.ATTACH_EMPTY, errors.ATTACH_BAD_NAME,
             errors.ATTACH_NOT_TENSOR, errors.ATTACH_DUPLICATE, errors.EXTRACT_NO_OBSERVER,
             errors.EXTRACT_NOT_PP, errors.EXTRACT_NOT_TENSOR, errors.EXTRACT_NOT_RECONSTRUCTED]


@st.composite
def tensors(draw: st.DrawFn) -> TensorMeta:
    name = draw(NAMES)
    return TensorMeta(
        name=name,
        key=draw(st.sampled_from([PREFIX + name, name, ""])),
        shape=tuple(draw(st.lists(st.integers(-1, 2**40), max_size=4))),
        dtype=draw(st.sampled_from(["float32", "int64", "bfloat16", "", "list", "weird dtype"])),
        device=draw(st.sampled_from(["cpu", "cuda:0", "cuda:7", "", "meta", "cuda:x:y"])),
        nbytes=draw(st.integers(0, 2**62)),
        contiguous=draw(st.booleans()),
        is_tensor=draw(st.booleans()),
        fingerprint=draw(st.none() | st.sampled_from(["b2:00", "x64:ff", ""])),
    )


@st.composite
def ranks(draw: st.DrawFn) -> RankInfo:
    return RankInfo(
        rank=draw(st.none() | SMALL),
        world_size=draw(st.none() | SMALL),
        pp_rank=draw(st.none() | SMALL),
        pp_size=draw(st.none() | SMALL),
        tp_rank=draw(st.none() | SMALL),
        tp_size=draw(st.none() | SMALL),
        host=draw(st.sampled_from(["h", "", "\x1b]0;t\x07"])),
        pid=draw(st.integers(0, 3)),
    )


@st.composite
def events(draw: st.DrawFn) -> Event:
    direction = draw(st.sampled_from(list(Direction)))
    error = draw(st.none() | st.sampled_from(TEMPLATES))
    message = error.format(name=draw(NAMES)) if error else None
    ts = draw(st.lists(tensors(), max_size=4))
    return Event(
        direction=direction,
        seq=draw(st.integers(0, 6) | INT64),
        rank=draw(ranks()),
        start_ns=draw(st.integers(0, 2**63 - 1)),
        mono_ns=draw(INT64),
        duration_ns=draw(st.integers(0, 10**12)),
        thread_id=draw(st.integers(0, 2**40)),
        thread_name=draw(st.sampled_from(["MainThread", "", "w\x1b[1m"])),
        subject_type=draw(st.sampled_from(["Out", "", "builtins.NoneType", "x.y.Z"])),
        subject_pp_capable=draw(st.none() | st.booleans()),
        tensors=tuple(ts),
        keys_before=tuple(draw(st.lists(NAMES, max_size=4))),
        keys_after=tuple(draw(st.lists(NAMES, max_size=4))),
        returned_none=draw(st.booleans()),
        error_type=(draw(st.sampled_from(["RuntimeError", "AttributeError", "x"]))
                    if error else None),
        error_message=message,
        inserted_before_error=tuple(draw(st.lists(NAMES, max_size=2))) if error else (),
        dropped_before=draw(st.integers(0, 2**40)),
        run_id=draw(st.sampled_from(["", "r1", "r2"])),
    )


# --- a two-rank trace whose tensor names carry escape sequences and markup ----------------------

EVIL = ["\x1b[31mred\x1b[0m", "[bold magenta]markup[/bold magenta]", "bell\x07\x1b]0;pwned\x07",
        "cr\rX", "nl\nFAIL: forged line", "\x9b31mC1", "rtl\u202eexe.txt"]


def write_hostile_traces(directory: Any) -> None:
    """Two ranks whose tensor names carry escape sequences and markup; the extract side sees
    other shapes and another order, so the report quotes every name."""
    from pptrace.export.sinks import build_sink
    from pptrace.record.wrapper import wrap_transport

    mod = transport()

    def recorder(rank: RankInfo) -> Recorder:
        cfg = Config(trace_dir=str(directory), flush_interval=60)
        return Recorder(cfg, sink_factory=lambda r: build_sink(cfg, r),
                        rank_provider=lambda: (rank, True))

    last = recorder(RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1,
                             host="h", pid=1001))
    first = recorder(RankInfo(rank=0, world_size=2, pp_rank=0, pp_size=2, tp_rank=0, tp_size=1,
                              host="h", pid=1000))
    attach, _ = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                               mod.pop_auxiliary_output_from_pp_tensors, last)
    _, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                mod.pop_auxiliary_output_from_pp_tensors, first)
    for _ in range(2):
        attach({"next_token_ids": IDS}, Output({n: T1 for n in EVIL}))
        received = {"next_token_ids": IDS}
        for n in reversed(EVIL):
            received[PREFIX + n] = torch.zeros(3)
        extract(received, Observer(SENTINEL))
    last.shutdown(timeout=5.0)
    first.shutdown(timeout=5.0)


def worker_child(trace_dir: str, threads: int, exit_timeout: float) -> None:
    """Record on ``threads`` engine worker threads as fast as they can (``pptrace.instrument``
    owns the SIGTERM flush) while the main thread only waits: run until killed."""
    import sys
    import threading

    from pptrace.activation.startup import instrument

    instrument(Config(trace_dir=trace_dir, flush_interval=0.05, exit_timeout=exit_timeout))
    mod = transport()
    attach = mod.add_auxiliary_output_to_pp_tensors
    extract = mod.pop_auxiliary_output_from_pp_tensors
    done = [0] * threads

    def work(i: int) -> None:
        while True:
            d = {"next_token_ids": IDS}
            attach(d, Output({"a": T1}))
            extract(d, Observer(SENTINEL))
            done[i] += 1

    for i in range(threads):
        threading.Thread(target=work, args=(i,), name=f"engine-worker-{i}", daemon=True).start()
    while min(done) < 200:
        threading.Event().wait(0.01)
    print("ready", flush=True)
    sys.stdout.flush()
    while True:
        threading.Event().wait(1.0)


# --- overload: a child recording faster than its recorder thread can write -----------------------

#: One progress sample: (monotonic ns, events recorded at least by then), little-endian int64s.
PROGRESS = struct.Struct("<qq")
PROGRESS_SLOTS = 1 << 16


def overload_child(trace_dir: str, interval: float, threads: int, progress: str) -> None:
    """Record on ``threads`` threads as fast as they can, until killed, with a plain Recorder
    and the file sink. Every 64 pairs a thread writes a progress sample into the memory-mapped
    file ``progress`` (a memory write: no system call, no wait for the GIL, so the samples stay
    dense while the threads starve everything else), slot ``n % PROGRESS_SLOTS``."""
    import itertools
    import mmap
    import threading

    from pptrace.export.sinks import build_sink
    from pptrace.record.wrapper import wrap_transport

    config = Config(trace_dir=trace_dir, flush_interval=interval, exit_timeout=5.0)
    rec = Recorder(config, sink_factory=lambda rank: build_sink(config, rank),
                   rank_provider=lambda: (RANK, True)).start()
    mod = transport()
    attach, extract = wrap_transport(mod.add_auxiliary_output_to_pp_tensors,
                                     mod.pop_auxiliary_output_from_pp_tensors, rec)
    with open(progress, "r+b") as f:
        mm = mmap.mmap(f.fileno(), PROGRESS.size * PROGRESS_SLOTS)
    slots = itertools.count()
    pack, now = PROGRESS.pack_into, time.monotonic_ns

    def work() -> None:
        out, obs = Output({"a": T1}), Observer(SENTINEL)
        while True:
            for _ in range(64):
                d = {"next_token_ids": IDS}
                attach(d, out)
                extract(d, obs)
            recorded = rec.recorded  # read before the clock: at least this many by then
            pack(mm, PROGRESS.size * (next(slots) % PROGRESS_SLOTS), now(), recorded)

    for i in range(threads):
        threading.Thread(target=work, name=f"engine-worker-{i}", daemon=True).start()
    print("ready", flush=True)
    while True:
        threading.Event().wait(1.0)


def read_progress(progress: str) -> list[tuple[int, int]]:
    """The overload child's progress samples, (monotonic ns, recorded at least), by time."""
    with open(progress, "rb") as f:
        data = f.read()
    samples = [PROGRESS.unpack_from(data, i) for i in range(0, len(data), PROGRESS.size)]
    return sorted((t, n) for t, n in samples if t)
