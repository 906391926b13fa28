"""Benchmark: load and analyze 10k, 100k and 1M events over 8 ranks, from real trace files,
plain and gzip-compressed, in schema version 1 and 2, side by side.

    python benchmarks/bench_analyze.py                 # 10k, 100k, 1M; v1, v1.gz, v2, v2.gz
    python benchmarks/bench_analyze.py --sizes 1000000 --formats v1 v1.gz
    python benchmarks/bench_analyze.py --keep DIR      # keep the generated files in DIR
    python benchmarks/bench_analyze.py --serial        # also load in one process: the ratio
    python benchmarks/bench_analyze.py --repeat 5      # the best of 5 rounds (default 3)
    python benchmarks/bench_analyze.py --sizes 1000000 --formats v2 --keep DIR --reuse \
        --baseline /tmp/base                           # beside main (git archive main | tar -x)

The layout is pp=2 x tp=4: the last stage's 4 ranks attach, stage 0's 4 ranks extract, so every one
of the 8 ranks records events. The files are OTLP/JSON lines with exactly the attributes pptrace's
exporter writes (``pptrace.model.schema.event_to_attributes`` under the resource of
``schema.resource_attributes``: version 2 leaves the per-process constants and what can be
derived to it), as many spans a line as the file sink writes
(``pptrace.export.file_sink.SPANS_PER_LINE``). Compressed, every 16 lines (1024 events: one
flush a second at about 1k events a second a rank) are one gzip member made by the writer's own
encoder (``pptrace.export.trace_file.encoder``).
They are generated from per-rank templates so that writing 1M events takes seconds. One
microbatch in 1000 carries a dtype change, so the analyzer has findings to report; every rank
ends with the final stats of a clean exit, as a traced run writes them.

Each size and format is measured in a fresh subprocess, ``--repeat`` times (3), the formats in
turn, and its best round shown: load seconds, analysis seconds, and peak resident memory
(``ru_maxrss``) of that process and its loader worker. "x plain" is a compressed format's load
+ analyze time over the same version's plain one; ``--baseline DIR`` measures the same files
with the ``pptrace`` package in DIR too, alternating with this checkout in each round, and
prints every round of both (``--reuse``: the files ``--keep`` left in DIR, not written
again); "cpu s" is the CPU time both processes spent on it (on a busy machine a truer
comparison than the wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

PP, TP = 2, 4
BATCHES = (1, 3, 8, 16)  # batch sizes cycle, so shapes vary like a real run's
FORMATS = ("v1", "v1.gz", "v2", "v2.gz")
FLUSH_LINES = 16  # lines a gzip member holds
# Events of a rank a flush writes before its stats span: one every millisecond, the recorder's
# flush every half second (a multiple of the file sink's spans a line).
FLUSH_EVENTS = 512


def _rank(pp: int, tp: int) -> Any:
    from pptrace.model.records import RankInfo

    return RankInfo(rank=pp * TP + tp, world_size=PP * TP, pp_rank=pp, pp_size=PP, tp_rank=tp,
                    tp_size=TP, host="bench-host", pid=40000 + pp * TP + tp)


def _value(v: object) -> dict[str, object]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    assert isinstance(v, list)
    return {"arrayValue": {"values": [_value(x) for x in v]}}


def _templates(pp: int, tp: int, direction: str, batch: int, dtype: str, version: int) -> str:
    """One span's JSON with %-placeholders for what changes per event."""
    from pptrace.model import schema
    from pptrace.model.records import PREFIX, Direction, Event, TensorMeta

    device = f"cuda:{tp}"
    tensors = (
        TensorMeta("topk_logprobs", PREFIX + "topk_logprobs", (batch, 20), "float32", device,
                   batch * 80),
        TensorMeta("topk_ids", PREFIX + "topk_ids", (batch, 20), "int64", device, batch * 160),
        TensorMeta("entropy", PREFIX + "entropy", (batch,), dtype, device,
                   batch * (2 if dtype == "float16" else 4)),
    )
    engine = ("next_token_ids",)
    keys = tuple(t.key for t in tensors)
    if direction == "attach":
        before, after = engine, engine + keys
        d = Direction.ATTACH
        subject = "pptrace_samples.observer.TopKOutput"
    else:
        before, after = engine + ("__msg_type__",) + keys, engine + ("__msg_type__",)
        d = Direction.EXTRACT
        subject = "pptrace_samples.observer.TopKObserver"
    ev = Event(direction=d, seq=123456789, rank=_rank(pp, tp), start_ns=0, mono_ns=987654321,
               duration_ns=2100, thread_id=140000000 + tp, thread_name="MainThread",
               subject_type=subject, subject_pp_capable=True, tensors=tensors,
               keys_before=before, keys_after=after, returned_none=direction == "attach",
               run_id="bench")
    attrs = schema.event_to_attributes(ev, _resource_attrs(pp, tp, version))

    span = {
        "traceId": "TRACEID", "spanId": "SPANID", "name": schema.span_name(d),
        "kind": "SPAN_KIND_INTERNAL", "startTimeUnixNano": "START", "endTimeUnixNano": "END",
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
        "status": {}, "flags": 256,
    }
    text = json.dumps(span, separators=(",", ":")).replace("%", "%%")
    for token, fmt in (('"TRACEID"', '"%032x"'), ('"SPANID"', '"%016x"'), ('"START"', '"%d"'),
                       ('"END"', '"%d"'), ('"123456789"', '"%d"'), ('"987654321"', '"%d"')):
        assert text.count(token) == 1, token
        text = text.replace(token, fmt)
    return text


def _stats_span(pp: int, tp: int, version: int, events: int, time_ns: int,
                final: bool = True) -> str:
    """A stats span, as the recorder writes one at the end of every flush (``final``: the last
    one, of a clean exit)."""
    from pptrace.model import schema
    from pptrace.model.records import RecorderStats

    stats = RecorderStats(rank=_rank(pp, tp), time_ns=time_ns, recorded=events,
                          exported=events, run_id="bench", final=final)
    attrs = schema.stats_to_attributes(stats, _resource_attrs(pp, tp, version))
    return json.dumps({
        "traceId": f"{time_ns:032x}", "spanId": f"{time_ns % 2**64:016x}",
        "name": schema.SPAN_STATS, "kind": "SPAN_KIND_INTERNAL",
        "startTimeUnixNano": str(time_ns), "endTimeUnixNano": str(time_ns),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
        "status": {}, "flags": 256}, separators=(",", ":"))


def _resource_attrs(pp: int, tp: int, version: int) -> dict[str, Any]:
    """The process's resource attributes as the file sink writes them."""
    from pptrace.model import schema

    return schema.resource_attributes(_rank(pp, tp), "bench", version, main_thread="MainThread")


def _resource(pp: int, tp: int, version: int) -> str:
    attrs = {"service.name": "pptrace", **_resource_attrs(pp, tp, version)}
    items = [{"key": k, "value": _value(v)} for k, v in attrs.items()]
    return json.dumps({"attributes": items}, separators=(",", ":"))


def generate(directory: str, total: int, fmt: str = "v1") -> int:
    """Write ``total`` events (half attach, half extract) as 8 per-rank files in format ``fmt``
    (``v1``, ``v1.gz``, ``v2``, ``v2.gz``); return the bytes on disk."""
    from pptrace.export.file_sink import SPANS_PER_LINE as PER_LINE
    from pptrace.export.trace_file import encoder

    version = 2 if fmt.startswith("v2") else 1
    compress = "gzip" if fmt.endswith(".gz") else "none"
    encode = encoder(compress)
    os.makedirs(directory, exist_ok=True)
    per_rank = total // (PP * TP)
    written = 0
    for pp in range(PP):
        direction = "attach" if pp == PP - 1 else "extract"
        for tp in range(TP):
            tpl = {(b, dt): _templates(pp, tp, direction, b, dt, version)
                   for b in BATCHES for dt in ("float32", "float16")}
            head = '{"resourceSpans":[{"resource":' + _resource(pp, tp, version) + \
                ',"scopeSpans":[{"scope":{"name":"pptrace","version":"0"},"spans":['
            tail = "]}]}]}"
            name = f"pptrace-rank{pp * TP + tp}-pid{40000 + pp * TP + tp}.otlp.jsonl"
            path = os.path.join(directory, name + (".gz" if compress == "gzip" else ""))
            # Stage 0 extracts 50 us after the last stage attached the same microbatch.
            t0 = 1_750_000_000_000_000_000 + (50_000 if direction == "extract" else 0)
            with open(path, "wb") as f:
                lines: list[str] = []
                for start in range(0, per_rank, PER_LINE):
                    if start and start % FLUSH_EVENTS == 0:  # a flush ends: its stats span
                        lines.append(head + _stats_span(pp, tp, version, start,
                                                        t0 + start * 1_000_000, False) + tail)
                    spans = []
                    for seq in range(start, min(per_rank, start + PER_LINE)):
                        b = BATCHES[seq % len(BATCHES)]
                        # Stage 0 receives entropy as float16 in one microbatch in 1000.
                        dt = "float16" if direction == "extract" and seq % 1000 == 999 else \
                            "float32"
                        begin = t0 + seq * 1_000_000
                        n = (pp * TP + tp) * per_rank + seq + 1
                        spans.append(tpl[(b, dt)] % (n, n, begin, begin + 2100, seq,
                                                     seq * 1_000_000))
                    lines.append(head + ",".join(spans) + tail)
                    if len(lines) == FLUSH_LINES:
                        written += f.write(encode(lines))
                        lines = []
                end = t0 + per_rank * 1_000_000
                lines.append(head + _stats_span(pp, tp, version, per_rank, end) + tail)
                if lines:
                    written += f.write(encode(lines))
    return written


def measure(directory: str) -> dict[str, float]:
    """Load and analyze in this process; return seconds and peak memory.

    The peak is this process's plus the loader worker's (``pptrace.load.worker``), as if both
    peaked at once: an upper bound of what the machine needs.
    """
    from pptrace.analyze.analyzer import analyze
    from pptrace.load.loader import load_paths

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

    c0, t0 = cpu(), time.perf_counter()
    trace = load_paths([directory])
    t1 = time.perf_counter()
    findings = analyze(trace)
    t2 = time.perf_counter()
    cpu_s = cpu() - c0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"events": trace.event_count, "load_s": t1 - t0, "analyze_s": t2 - t1, "cpu_s": cpu_s,
            "peak_mb": (peak_kb + worker_kb) / 1024, "findings": len(findings),
            "occurrences": sum(1 + f.cascade for f in findings)}


def measure_serial_load(directory: str) -> float:
    """Seconds to load in one process (``PPTRACE_LOAD_WORKERS=0``), for the side-by-side ratio."""
    from pptrace.load.loader import load_paths

    os.environ["PPTRACE_LOAD_WORKERS"] = "0"
    t0 = time.perf_counter()
    load_paths([directory])
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                        help="schema version and compression of the files (default: all)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="measure each format this many times, in turns; show the best")
    parser.add_argument("--keep", help="write the files here and keep them")
    parser.add_argument("--serial", action="store_true",
                        help="also load each size in one process, for the ratio")
    parser.add_argument("--baseline", help="also measure with the pptrace package in this "
                        "folder (a copy of main), alternating; every round printed")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: read the files kept there instead of writing them")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--measure-serial", help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    if args.measure_serial:
        print(json.dumps(measure_serial_load(args.measure_serial)))
        return
    base = args.keep or tempfile.mkdtemp(prefix="pptrace-bench-")
    print(f"cpus available: {len(os.sched_getaffinity(0))}; python {sys.version.split()[0]}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'format':>6} {'events':>9} {'file MB':>8} {'B/event':>7} {'write s':>8} "
          f"{'load s':>7} {'analyze s':>9} {'total s':>8} {'x plain':>7} {'cpu s':>6} "
          f"{'peak MB':>7} "
          f"{'findings':>9}" + (f" {'1-proc load s':>13} {'x':>5}" if args.serial else ""))
    try:
        for size in args.sizes:
            written: dict[str, tuple[str, int, float]] = {}  # format -> directory, bytes, s
            for fmt in args.formats:
                directory = os.path.join(base, f"n{size}-{fmt}")
                if args.reuse and args.keep and os.path.isdir(directory):
                    nbytes = sum(os.path.getsize(os.path.join(directory, f))
                                 for f in os.listdir(directory))
                    written[fmt] = (directory, nbytes, 0.0)
                    continue
                shutil.rmtree(directory, ignore_errors=True)
                t0 = time.perf_counter()
                nbytes = generate(directory, size, fmt)
                written[fmt] = (directory, nbytes, time.perf_counter() - t0)
            if args.baseline:
                _side_by_side(args, written)
                continue
            # Rounds over every format in turn, so that a busy moment costs each format alike;
            # each format's best round is shown.
            best: dict[str, dict[str, float]] = {}
            for _ in range(args.repeat):
                for fmt in args.formats:
                    out = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--measure",
                         written[fmt][0]], check=True, capture_output=True, text=True,
                    ).stdout
                    m = json.loads(out.strip().splitlines()[-1])
                    m["total_s"] = m["load_s"] + m["analyze_s"]
                    if fmt not in best or m["total_s"] < best[fmt]["total_s"]:
                        best[fmt] = m
            for fmt in args.formats:
                directory, nbytes, write_s = written[fmt]
                m = best[fmt]
                version = fmt.split(".")[0]
                ratio = (f"{m['total_s'] / best[version]['total_s']:>7.2f}" if version in best
                         else f"{'':>7}")
                serial = ""
                if args.serial:
                    one = float(subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--measure-serial",
                         directory], check=True, capture_output=True, text=True,
                    ).stdout.strip().splitlines()[-1])
                    serial = f" {one:>13.2f} {one / m['load_s']:>5.2f}"
                print(f"{fmt:>6} {m['events']:>9} {nbytes / 1e6:>8.1f} "
                      f"{nbytes / m['events']:>7.0f} {write_s:>8.2f} {m['load_s']:>7.2f} "
                      f"{m['analyze_s']:>9.2f} {m['total_s']:>8.2f} {ratio} {m['cpu_s']:>6.2f} "
                      f"{m['peak_mb']:>7.0f} "
                      f"{m['findings']:>4}/{m['occurrences']:<4}{serial}", flush=True)
            if not args.keep:
                for directory, _, _ in written.values():
                    shutil.rmtree(directory, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def _side_by_side(args: argparse.Namespace, written: dict[str, tuple[str, int, float]]) -> None:
    """Every round of this checkout and of ``--baseline``, alternating, per format."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    codes = [("this", here), ("baseline", os.path.abspath(args.baseline))]
    for round_ in range(1, args.repeat + 1):
        for fmt in args.formats:
            for label, root in codes:
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--measure", written[fmt][0]],
                    check=True, capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": root}, cwd=root).stdout
                m = json.loads(out.strip().splitlines()[-1])
                print(f"{fmt:>6} {m['events']:>9} {written[fmt][1] / 1e6:>8.1f} round {round_} "
                      f"{label:>8}: load {m['load_s']:.2f} s, analyze {m['analyze_s']:.2f} s, "
                      f"cpu {m['cpu_s']:.2f} s, peak {m['peak_mb']:.0f} MB, findings "
                      f"{m['findings']}/{m['occurrences']}; load average "
                      f"{os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
