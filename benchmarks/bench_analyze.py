"""Benchmark: load and analyze 10k, 100k and 1M events over 8 ranks, from real trace files.

    python benchmarks/bench_analyze.py                 # 10k, 100k, 1M
    python benchmarks/bench_analyze.py --sizes 10000   # just one size
    python benchmarks/bench_analyze.py --keep DIR      # keep the generated files in DIR
    python benchmarks/bench_analyze.py --serial        # also load in one process: the ratio

The layout is pp=2 x tp=4: the last stage's 4 ranks attach, stage 0's 4 ranks extract, so every one
of the 8 ranks records events. The files are OTLP/JSON lines with exactly the attributes pptrace's
exporter writes (``pptrace.model.schema.event_to_attributes``), as many spans a line as the file
sink writes (``pptrace.export.file_sink.SPANS_PER_LINE``); they are generated from per-rank
templates so that writing 1M events takes seconds. One microbatch in 1000 carries a dtype change,
so the analyzer has findings to report.

Each size is measured in a fresh subprocess: load seconds, analysis seconds, and peak resident
memory (``ru_maxrss``) of that process.
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

PP, TP = 2, 4
BATCHES = (1, 3, 8, 16)  # batch sizes cycle, so shapes vary like a real run's


def _templates(pp: int, tp: int, direction: str, batch: int, dtype: str) -> str:
    """One span's JSON with %-placeholders for what changes per event."""
    from pptrace.model import schema
    from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta

    rank = RankInfo(rank=pp * TP + tp, world_size=PP * TP, pp_rank=pp, pp_size=PP, tp_rank=tp,
                    tp_size=TP, host="bench-host", pid=40000 + pp * TP + tp)
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
    ev = Event(direction=d, seq=123456789, rank=rank, start_ns=0, mono_ns=987654321,
               duration_ns=2100, thread_id=140000000 + tp, thread_name="MainThread",
               subject_type=subject, subject_pp_capable=True, tensors=tensors,
               keys_before=before, keys_after=after, returned_none=direction == "attach",
               run_id="bench")
    attrs = schema.event_to_attributes(ev)

    def value(v: object) -> dict[str, object]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, str):
            return {"stringValue": v}
        assert isinstance(v, list)
        return {"arrayValue": {"values": [value(x) for x in v]}}

    span = {
        "traceId": "TRACEID", "spanId": "SPANID", "name": schema.span_name(d), "kind": 1,
        "startTimeUnixNano": "START", "endTimeUnixNano": "END",
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
        "status": {},
    }
    text = json.dumps(span, separators=(",", ":")).replace("%", "%%")
    for token, fmt in (('"TRACEID"', '"%032x"'), ('"SPANID"', '"%016x"'), ('"START"', '"%d"'),
                       ('"END"', '"%d"'), ('"123456789"', '"%d"'), ('"987654321"', '"%d"')):
        assert text.count(token) == 1, token
        text = text.replace(token, fmt)
    return text


def _resource(pp: int, tp: int) -> str:
    r = pp * TP + tp
    attrs = [{"key": "service.name", "value": {"stringValue": "pptrace"}},
             {"key": "host.name", "value": {"stringValue": "bench-host"}},
             {"key": "process.pid", "value": {"intValue": str(40000 + r)}}]
    return json.dumps({"attributes": attrs}, separators=(",", ":"))


def generate(directory: str, total: int) -> int:
    """Write ``total`` events (half attach, half extract) as 8 per-rank files; return bytes."""
    from pptrace.export.file_sink import SPANS_PER_LINE as PER_LINE

    os.makedirs(directory, exist_ok=True)
    per_rank = total // (PP * TP)
    written = 0
    for pp in range(PP):
        direction = "attach" if pp == PP - 1 else "extract"
        for tp in range(TP):
            tpl = {(b, dt): _templates(pp, tp, direction, b, dt)
                   for b in BATCHES for dt in ("float32", "float16")}
            head = '{"resourceSpans":[{"resource":' + _resource(pp, tp) + \
                ',"scopeSpans":[{"scope":{"name":"pptrace"},"spans":['
            tail = "]}]}]}\n"
            path = os.path.join(directory, f"pptrace-rank{pp * TP + tp}-pid{40000 + pp * TP + tp}"
                                ".otlp.jsonl")
            # Stage 0 extracts 50 us after the last stage attached the same microbatch.
            t0 = 1_750_000_000_000_000_000 + (50_000 if direction == "extract" else 0)
            with open(path, "w", encoding="ascii") as f:
                for start in range(0, per_rank, PER_LINE):
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
                    line = head + ",".join(spans) + tail
                    f.write(line)
                    written += len(line)
    return written


def measure(directory: str) -> dict[str, float]:
    """Load and analyze in this process; return seconds and peak memory.

    The peak is this process's plus the loader worker's (``pptrace.load.worker``), as if both
    peaked at once: an upper bound of what the machine needs.
    """
    from pptrace.analyze.analyzer import analyze
    from pptrace.load.loader import load_paths

    t0 = time.perf_counter()
    trace = load_paths([directory])
    t1 = time.perf_counter()
    findings = analyze(trace)
    t2 = time.perf_counter()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"events": trace.event_count, "load_s": t1 - t0, "analyze_s": t2 - t1,
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
    parser.add_argument("--keep", help="write the files here and keep them")
    parser.add_argument("--serial", action="store_true",
                        help="also load each size in one process, for the ratio")
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
    print(f"cpus available: {len(os.sched_getaffinity(0))}; python {sys.version.split()[0]}")
    print(f"{'events':>9} {'file MB':>8} {'write s':>8} {'load s':>8} {'analyze s':>9} "
          f"{'total s':>8} {'us/event':>8} {'peak MB':>8} {'findings':>8}"
          + (f" {'1-proc load s':>13} {'x':>5}" if args.serial else ""))
    try:
        for size in args.sizes:
            directory = os.path.join(base, f"n{size}")
            shutil.rmtree(directory, ignore_errors=True)
            t0 = time.perf_counter()
            nbytes = generate(directory, size)
            write_s = time.perf_counter() - t0
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--measure", directory],
                check=True, capture_output=True, text=True,
            ).stdout
            m = json.loads(out.strip().splitlines()[-1])
            total = m["load_s"] + m["analyze_s"]
            serial = ""
            if args.serial:
                one = float(subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--measure-serial", directory],
                    check=True, capture_output=True, text=True,
                ).stdout.strip().splitlines()[-1])
                serial = f" {one:>13.2f} {one / m['load_s']:>5.2f}"
            print(f"{m['events']:>9} {nbytes / 1e6:>8.1f} {write_s:>8.2f} {m['load_s']:>8.2f} "
                  f"{m['analyze_s']:>9.2f} {total:>8.2f} {1e6 * total / m['events']:>8.2f} "
                  f"{m['peak_mb']:>8.0f} {m['findings']:>4}/{m['occurrences']:<4}{serial}",
                  flush=True)
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
