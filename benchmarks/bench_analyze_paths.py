"""Benchmark: the analyzer alone, on in-memory traces, with equal tuples shared or not.

    python benchmarks/bench_analyze_paths.py                  # 100k and 1M events
    python benchmarks/bench_analyze_paths.py --sizes 100000

The trace is ``bench_analyze``'s (pp=2 x tp=4, batch sizes cycling, stage 0 receiving entropy
as float16 in one microbatch in 1000), built in memory so that no loader time is counted. The
loader shares one tuple between equal tensors lists and equal key lists; "shared" builds the
trace that way, "unshared" gives every template its own tuples (each rank's events still share
theirs), so that every pair takes the analyzer's slower, comparing path. Per size and way: the
best of a few runs in CPU seconds (a shared machine's waiting is not counted), microseconds per
event, and the ratio of the two ways measured side by side.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

from pptrace.analyze.analyzer import analyze
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import ProcessTrace, Trace

PP, TP = 2, 4
BATCHES = (1, 3, 8, 16)


def build(total: int, shared: bool) -> Trace:
    """``total`` events over PP x TP ranks, half attaches, half extracts."""
    pool: dict[Any, Any] = {}

    def one(value: Any) -> Any:
        return pool.setdefault(value, value) if shared else value

    per_rank = total // (PP * TP)
    procs = []
    for pp in range(PP):
        attach = pp == PP - 1
        for tp in range(TP):
            rank = RankInfo(rank=pp * TP + tp, world_size=PP * TP, pp_rank=pp, pp_size=PP,
                            tp_rank=tp, tp_size=TP, host="bench-host", pid=40000 + pp * TP + tp)
            shapes = {}
            for b in BATCHES:
                for dtype in ("float32", "float16"):
                    tensors = (
                        TensorMeta("topk_logprobs", PREFIX + "topk_logprobs", (b, 20),
                                   "float32", "cuda:0", b * 80),
                        TensorMeta("topk_ids", PREFIX + "topk_ids", (b, 20), "int64", "cuda:0",
                                   b * 160),
                        TensorMeta("entropy", PREFIX + "entropy", (b,), dtype, "cuda:0",
                                   b * (2 if dtype == "float16" else 4)),
                    )
                    keys = tuple(t.key for t in tensors)
                    before = ("next_token_ids",) if attach else (
                        "next_token_ids", "__msg_type__", *keys)
                    after = ("next_token_ids", *keys) if attach else (
                        "next_token_ids", "__msg_type__")
                    shapes[(b, dtype)] = (one(tensors), one(before), one(after))
            t0 = 1_750_000_000_000_000_000 + (0 if attach else 50_000)
            events = []
            for seq in range(per_rank):
                dtype = "float16" if not attach and seq % 1000 == 999 else "float32"
                tensors, before, after = shapes[(BATCHES[seq % len(BATCHES)], dtype)]
                events.append(Event(
                    direction=Direction.ATTACH if attach else Direction.EXTRACT, seq=seq,
                    rank=rank, start_ns=t0 + seq * 1_000_000, mono_ns=seq * 1_000_000,
                    duration_ns=2100, subject_type="pptrace_samples.observer.TopK",
                    subject_pp_capable=True, tensors=tensors, keys_before=before,
                    keys_after=after, returned_none=attach, run_id="bench"))
            # The final stats of a clean exit (a trace without them gets a finding per rank).
            stats = RecorderStats(rank=rank, time_ns=t0 + per_rank * 1_000_000,
                                  recorded=per_rank, exported=per_rank, run_id="bench",
                                  final=True)
            procs.append(ProcessTrace(rank=rank, events=tuple(events), stats=stats))
    return Trace(processes=tuple(procs))


def best_cpu(trace: Trace, repeats: int) -> tuple[float, int]:
    """The best CPU seconds of ``repeats`` analyses, and how many findings they gave."""
    best, found = float("inf"), 0
    for _ in range(repeats):
        gc.collect()
        t0 = time.process_time()
        found = len(analyze(trace))
        best = min(best, time.process_time() - t0)
    return best, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'events':>9} {'shared s':>9} {'us/event':>8} {'unshared s':>10} {'us/event':>8} "
          f"{'ratio':>6} {'findings':>8}")
    for size in args.sizes:
        shared = build(size, shared=True)
        s, found = best_cpu(shared, args.repeats)
        del shared
        u, found_u = best_cpu(build(size, shared=False), args.repeats)
        assert found == found_u, (found, found_u)  # a benchmark's own sanity check
        print(f"{size:>9} {s:>9.3f} {1e6 * s / size:>8.2f} {u:>10.3f} {1e6 * u / size:>8.2f} "
              f"{u / s:>6.2f} {found:>8}", flush=True)


if __name__ == "__main__":
    main()
