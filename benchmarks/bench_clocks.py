"""What clock alignment (``pptrace.analyze.clocks``) costs next to the analysis it serves.

A synthetic job: ``--processes`` ranks (a PP ring, one stage a rank) on ``--hosts`` hosts, each
host's recorded times shifted by its own skew, messages round the ring until the trace holds
``--events`` message events. It times, side by side in one run, the analysis alone and the
alignment (constraints from the analyzer's message pairs, then the offsets), and prints both and
their ratio. Each figure is the best of ``--repeat`` rounds.

    python benchmarks/bench_clocks.py --events 1000000 --processes 16 --hosts 4
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pptrace.analyze.analyzer import analysis  # noqa: E402
from pptrace.analyze.clocks import estimate, message_constraints  # noqa: E402
from pptrace.model.trace import Trace  # noqa: E402
from tests.helpers_analyze import Run, mt  # noqa: E402

MS = 1_000_000


def synthetic(events: int, processes: int, hosts: int) -> Trace:
    """The ring's trace, each host's times shifted by ``(host - 1) * 37 ms``."""
    run = Run(pp_size=processes)
    tensors = [mt("hidden", (8, 16))]
    while sum(len(v) for v in run.msgs.values()) < events:
        for stage in range(processes):
            run.message("proxy", tensors, frm=stage, to=(stage + 1) % processes)
    trace = run.trace()
    per_host = max(1, processes // hosts)
    procs = []
    for i, p in enumerate(trace.processes):
        skew = (i // per_host - 1) * 37 * MS
        procs.append(dataclasses.replace(
            p, messages=tuple(m._replace(wall_ns=m.wall_ns + skew) for m in p.messages)))
    return Trace(processes=tuple(procs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    trace = synthetic(args.events, args.processes, args.hosts)
    count = sum(len(p.messages) for p in trace.processes)
    best_analysis = best_align = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = analysis(trace)
        t1 = time.perf_counter()
        clocks = estimate(message_constraints(trace, result.message_pairs), len(trace.processes))
        t2 = time.perf_counter()
        best_analysis, best_align = min(best_analysis, t1 - t0), min(best_align, t2 - t1)
    print(f"{count:,} message events, {args.processes} processes on {args.hosts} hosts")
    print(f"analysis without alignment: {best_analysis:8.3f} s")
    print(f"alignment (pairs -> offsets): {best_align:6.3f} s   "
          f"ratio {best_align / best_analysis:.3f}")
    print("offsets (ms):", " ".join(f"{o.offset_ns / MS:+.1f}" for o in clocks.offsets))


if __name__ == "__main__":
    main()
