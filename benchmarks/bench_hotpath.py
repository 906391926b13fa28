"""Micro benchmark: what pptrace costs on the engine's own path, per attach+extract pair.

    python benchmarks/bench_hotpath.py                 # 1, 4 and 16 tensors, 15 repeats
    python benchmarks/bench_hotpath.py --tensors 4 --repeats 31 --calls 2000

Variants, measured side by side in one run, interleaved: each repeat runs every variant for
``--calls`` calls, in chunks of ``calls / 10``, one chunk of each variant after another (in a
rotated order), so that a change in machine load within a repeat hits every variant alike. The
figures are medians over repeats; "x bare" is the median of the per-repeat ratios (each repeat
compares variants measured within the same few milliseconds):

- ``bare``: SGLang's real functions (``sampling_observer_pp``, loaded without its GPU deps);
- ``disabled``: pptrace's wrappers with the recorder disabled (``PPTRACE_ENABLED=0``);
- ``stream``: recording to OTLP JSON files in a temp dir, background flush thread running
  (default 1 s interval): what the caller sees, including the flush competing for the GIL;
- ``stream/caller``: the same wrappers, with the flush done between timed batches: the
  caller's path alone;
- ``flight``: flight-recorder mode (ring of 4096, background thread idle until a dump);
- ``caller/python`` and ``flight/python``: when the native metadata reader is built
  (``pptrace native build``), ``stream/caller`` and ``flight`` use it, and these two are the same
  recorders on the Python reads;
- ``caller/landed``: with the reader built, ``stream/caller``'s recorder once more, its
  wrappers made before the build and handed to it as a build landing while the process runs
  is (``pptrace run``'s background build): the Python wrapper's frame, then the C wrapper;
- ``otel-span``: the naive peer: an OpenTelemetry SDK span (TracerProvider + BatchSpanProcessor
  + a no-op exporter) around each call, with per-tensor attributes;
- ``reads only``: not a tracer: what a plain Python wrapper pays to read what every pptrace
  event needs (keys before and after, three clock reads, shape, dtype, device and contiguity of
  each tensor), with nothing kept.
- ``refs only``: not a tracer either: a plain Python wrapper that reads the keys and clocks,
  keeps references to the values instead of reading their metadata, and appends one tuple to a
  deque: what the caller would pay if the metadata were read later, on the recorder thread
  (pptrace does not: see docs/performance.md, "What runs on the engine's thread").

A loop that only builds the per-call dict is timed too and subtracted from every variant, so the
ratios compare the functions themselves. Each figure is given as the calling thread's CPU time
(the caller's path itself, immune to other processes on a shared machine) and as wall time. The
background cost (events to spans to a file line, on the recorder thread) is reported separately,
in microseconds of CPU per event.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from pptrace.engines.sglang_load import load_transport_module
from pptrace.export.sinks import build_sink
from pptrace.model.config import Config
from pptrace.record import native
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport

PREFIX = "__sampling_observer_output__."


class Output:
    """An auxiliary output with ``n`` small tensors (built once: only the transport is timed)."""

    def __init__(self, n: int) -> None:
        self.named = {f"t{i}": torch.zeros(8, 4) for i in range(n)}

    def to_pp_tensors(self) -> Mapping[str, torch.Tensor]:
        return self.named


class Observer:
    """An observer that hands back what it received."""

    def from_pp_tensors(self, tensors: Mapping[str, torch.Tensor]) -> Any:
        return tensors


class NullExporter(SpanExporter):
    """Accepts spans and does nothing (the peer's cost is on the caller's path)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def naive_peer(attach: Callable[..., Any], extract: Callable[..., Any],
               provider: TracerProvider) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The obvious instrumentation: a span around each call, one attribute set per tensor."""
    tracer = provider.get_tracer("naive-peer")

    def span_attach(tensors: Any, output: Any) -> Any:
        with tracer.start_as_current_span("attach") as span:
            before = set(tensors)
            result = attach(tensors, output)
            for key in tensors:
                if key not in before:
                    t = tensors[key]
                    span.set_attribute(f"tensor.{key}.shape", list(t.shape))
                    span.set_attribute(f"tensor.{key}.dtype", str(t.dtype))
                    span.set_attribute(f"tensor.{key}.device", str(t.device))
            return result

    def span_extract(tensors: Any, observer: Any) -> Any:
        with tracer.start_as_current_span("extract") as span:
            for key, t in tensors.items():
                if key.startswith(PREFIX):
                    span.set_attribute(f"tensor.{key}.shape", list(t.shape))
                    span.set_attribute(f"tensor.{key}.dtype", str(t.dtype))
                    span.set_attribute(f"tensor.{key}.device", str(t.device))
            return extract(tensors, observer)

    return span_attach, span_extract


def reads_only(attach: Callable[..., Any], extract: Callable[..., Any]
               ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The reads a pptrace event needs and nothing else, in a plain Python wrapper."""
    keys, time_ns, mono_ns = dict.keys, time.time_ns, time.monotonic_ns

    def read_attach(tensors: Any, output: Any) -> Any:
        before = tuple(keys(tensors))
        wall, t0 = time_ns(), mono_ns()
        result = attach(tensors, output)
        dur = mono_ns() - t0
        after = tuple(keys(tensors))
        for t in itertools.islice(tensors.values(), len(before), None):
            t.shape, t.dtype, t.device, t.is_contiguous()  # noqa: B018
        del wall, dur, after
        return result

    def read_extract(tensors: Any, observer: Any) -> Any:
        for k, t in tensors.items():
            if k.startswith(PREFIX):
                t.shape, t.dtype, t.device, t.is_contiguous()  # noqa: B018
        before = tuple(keys(tensors))
        wall, t0 = time_ns(), mono_ns()
        result = extract(tensors, observer)
        dur = mono_ns() - t0
        after = tuple(keys(tensors))
        del before, wall, dur, after
        return result

    return read_attach, read_extract


def refs_only(attach: Callable[..., Any], extract: Callable[..., Any]
              ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Keys, clocks and references to the values, one tuple appended: no metadata read."""
    keys, items, time_ns, mono_ns = dict.keys, dict.items, time.time_ns, time.monotonic_ns
    kept: collections.deque[Any] = collections.deque(maxlen=4096)
    keep = kept.append

    def refs_attach(tensors: Any, output: Any) -> Any:
        before = tuple(keys(tensors))
        wall, t0 = time_ns(), mono_ns()
        result = attach(tensors, output)
        dur = mono_ns() - t0
        keep((0, wall, t0, dur, before, tuple(items(tensors)), type(output), result is None))
        return result

    def refs_extract(tensors: Any, observer: Any) -> Any:
        held = tuple(items(tensors))
        wall, t0 = time_ns(), mono_ns()
        result = extract(tensors, observer)
        dur = mono_ns() - t0
        keep((1, wall, t0, dur, held, tuple(keys(tensors)), type(observer), result is None))
        return result

    return refs_attach, refs_extract


def landed_later(bare: tuple[Any, Any], rec: Recorder) -> tuple[Any, Any]:
    """Wrappers made while this process had found no native build, then handed to the reader
    by the recorder thread once it is there: what a process started before ``pptrace run``'s
    background build ended records with."""
    saved = native._loaded, native._awaited
    native._loaded, native._awaited = (None, "not built (as before a build)"), \
        native.library_path()
    try:
        pair = wrap_transport(*bare, rec)
    finally:
        native._loaded, native._awaited = saved
    end = time.monotonic() + 10
    while rec._upkeep and time.monotonic() < end:  # the recorder thread's next round
        time.sleep(0.05)
    if rec._upkeep or type(pair[0]) is not types.FunctionType:
        sys.exit("the landed reader was not taken up by the recorder thread")
    return pair


def timed_loop(attach: Callable[..., Any] | None, extract: Callable[..., Any] | None,
               output: Output, observer: Observer, calls: int) -> tuple[float, float]:
    """(CPU, wall) nanoseconds over ``calls`` attach+extract pairs (GC off).

    CPU is this thread's own CPU time: on a shared machine it leaves out the time the thread
    was preempted by other processes or waited for the GIL held by a recorder thread, so it is
    the cost of the caller's path itself; wall includes both.
    """
    ids = torch.zeros(8, dtype=torch.long)
    cpu, wall = time.thread_time_ns, time.perf_counter_ns
    gc.disable()
    try:
        if attach is None or extract is None:  # the loop alone
            c0, w0 = cpu(), wall()
            for _ in range(calls):
                tensors = {"next_token_ids": ids}
            return cpu() - c0, wall() - w0
        c0, w0 = cpu(), wall()
        for _ in range(calls):
            tensors = {"next_token_ids": ids}
            attach(tensors, output)
            extract(tensors, observer)
        return cpu() - c0, wall() - w0
    finally:
        gc.enable()


def run(n: int, repeats: int, calls: int, tmp: str) -> None:
    mod = load_transport_module(allow_bare=True)
    if mod is None:
        sys.exit("SGLang's transport module is not installed (pip install --no-deps sglang)")
    bare = (mod.add_auxiliary_output_to_pp_tensors, mod.pop_auxiliary_output_from_pp_tensors)

    def recorder(**kw: Any) -> Recorder:
        cfg = Config(trace_dir=f"{tmp}/n{n}", run_id="bench", **kw)
        return Recorder(cfg, sink_factory=lambda rank: build_sink(cfg, rank)).start()

    off = Recorder(Config(enabled=False))
    stream = recorder()
    caller = recorder(flush_interval=3600.0)  # flushed by hand, between timed batches
    flight = recorder(mode="flight")
    hand_flushed: dict[str, Recorder] = {"stream/caller": caller}
    # With the native reader built, the same two again on the Python reads, side by side.
    python_reads: dict[str, tuple[Any, Any]] = {}
    closing: list[Recorder] = []
    if native.reader() is not None:
        py_caller = recorder(flush_interval=3600.0, native=False)
        py_flight = recorder(mode="flight", native=False)
        hand_flushed["caller/python"] = py_caller
        closing = [py_caller, py_flight]
        landed = recorder(flush_interval=3600.0)
        hand_flushed["caller/landed"] = landed
        closing.append(landed)
        python_reads = {"caller/python": wrap_transport(*bare, py_caller),
                        "flight/python": wrap_transport(*bare, py_flight),
                        "caller/landed": landed_later(bare, landed)}
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NullExporter()))
    variants: dict[str, tuple[Any, Any]] = {
        "loop only": (None, None),
        "bare": bare,
        "disabled": wrap_transport(*bare, off),
        "stream": wrap_transport(*bare, stream),
        "stream/caller": wrap_transport(*bare, caller),
        "flight": wrap_transport(*bare, flight),
        **python_reads,
        "otel-span": naive_peer(*bare, provider),
        "reads only": reads_only(*bare),
        "refs only": refs_only(*bare),
    }
    output, observer = Output(n), Observer()
    names = list(variants)
    cpu_samples: dict[str, list[float]] = {k: [] for k in names}
    wall_samples: dict[str, list[float]] = {k: [] for k in names}
    flush_ns: list[float] = []
    for name in names:  # warm-up
        timed_loop(*variants[name], output, observer, max(1, calls // 10))
    for rec in hand_flushed.values():
        rec.flush()
    chunks = 10
    sizes = [calls // chunks + (1 if i < calls % chunks else 0) for i in range(chunks)]
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        cpu_ns = dict.fromkeys(names, 0.0)
        wall_ns = dict.fromkeys(names, 0.0)
        for size in sizes:
            for name in order:
                c, w = timed_loop(*variants[name], output, observer, size)
                cpu_ns[name] += c
                wall_ns[name] += w
                if name == "stream/caller":
                    t0 = time.thread_time_ns()
                    events = caller.flush()
                    if events:
                        flush_ns.append((time.thread_time_ns() - t0) / events)
                elif name in hand_flushed:
                    hand_flushed[name].flush()
        for name in names:  # per pair, the loop's own cost subtracted
            cpu_samples[name].append((cpu_ns[name] - cpu_ns["loop only"]) / calls)
            wall_samples[name].append((wall_ns[name] - wall_ns["loop only"]) / calls)

    def medians(samples: dict[str, list[float]]) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in samples.items() if k != "loop only"}

    def ratios(samples: dict[str, list[float]], to: str) -> dict[str, float]:
        return {k: statistics.median(a / b for a, b in zip(v, samples[to], strict=True))
                for k, v in samples.items() if k != "loop only"}

    cpu, wall = medians(cpu_samples), medians(wall_samples)
    cpu_x, wall_x = ratios(cpu_samples, "bare"), ratios(wall_samples, "bare")
    cpu_xs = ratios(cpu_samples, "stream/caller")
    print(f"\n{n} tensor(s) per call: attach+extract, {repeats} interleaved repeats x "
          f"{calls} calls, medians (the loop's own cost subtracted)")
    print(f"  {'variant':<15}{'CPU us/call':>12}{'x bare':>8}{'x stream/caller':>17}"
          f"{'wall us/call':>14}{'x bare':>8}")
    for k in cpu:
        print(f"  {k:<15}{cpu[k] / 1000:>12.2f}{cpu_x[k]:>8.2f}{cpu_xs[k]:>17.1f}"
              f"{wall[k] / 1000:>14.2f}{wall_x[k]:>8.2f}")
    if flush_ns:
        per_event = statistics.median(flush_ns) / 1000
        print(f"  background (recorder thread CPU): {per_event:.1f} us per event "
              f"({2 * per_event:.1f} us per call, off the caller's path)")
    for rec in (stream, caller, flight, *closing):
        rec.shutdown(5.0)
    provider.shutdown()
    lost = stream.stats()
    print(f"  stream recorder: recorded {lost.recorded}, exported {lost.exported}, "
          f"dropped {lost.dropped}")
    fs = flight.stats()
    print(f"  flight recorder at exit: recorded {fs.recorded}, overwritten {fs.overwritten} "
          f"(ring of {flight.config.flight_size}), dump exported {fs.exported}, "
          f"dropped {fs.dropped} (exit timeout 5 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tensors", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}")
    st = native.status()
    print(f"native metadata reader: {st.reason}"
          + ("; stream and flight use it, caller/python and flight/python do not" if st.loaded
             else "; stream and flight use the Python reads"))
    with tempfile.TemporaryDirectory(prefix="pptrace-bench-") as tmp:
        for n in args.tensors:
            run(n, args.repeats, args.calls, tmp)


if __name__ == "__main__":
    main()
