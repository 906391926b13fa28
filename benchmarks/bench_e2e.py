"""End to end: decode steps per second of the sample PP pipeline (4 gloo ranks), tracing off vs on.

    python benchmarks/bench_e2e.py                          # 5 interleaved repeats, 200 steps
    python benchmarks/bench_e2e.py --repeats 7 --steps 300 --ranks 4

Each repeat runs the pipeline once per variant, in a rotated order, so that machine noise hits
the variants alike; the figure is the median over repeats. The rate is taken from the ranks'
own progress reports, between the moments every rank had finished 10% and 90% of the steps, so
process start-up, rendezvous and the exit flush are left out:

- ``off``: the ranks call the engine's bare functions (pptrace's wrapper is not installed);
- ``stream``: pptrace recording in stream mode to OTLP JSON files (what the sample does);
- ``flight``: pptrace in flight-recorder mode (a ring, written out at exit).

Beside the rate, each rank notes its own process CPU time (every thread: the engine loop, gloo,
pptrace's recorder) at the same two steps; the sum over ranks per step is what tracing costs in
CPU, a figure that other processes on a shared machine barely move, unlike the rate.

Fingerprinting is off in every variant (pptrace's default); the sample's own check of every
output on stage 0 runs in all of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from pptrace_samples import launch
from pptrace_samples.options import PipelineOptions

_ORIGINAL_CHILD = launch._child
VARIANTS = ("off", "stream", "flight")


def _child(variant: str, opts: PipelineOptions, rank: int, messages: Any) -> None:
    """A rank process with the variant's tracing, then the sample's own rank code."""
    import pptrace_samples.pipeline as pipeline

    from pptrace.model.config import Config

    if variant == "off":
        pipeline.wrap_transport = lambda attach, extract, _recorder: (attach, extract)
        pipeline.Config = lambda **kw: Config(**{**kw, "enabled": False})  # type: ignore[misc]
    elif variant == "flight":
        pipeline.Config = lambda **kw: Config(**{**kw, "mode": "flight"})  # type: ignore[misc]
    _ORIGINAL_CHILD(opts, rank, messages)


class _CpuMarks:
    """The rank's message queue, which also notes this process's CPU time at two steps.

    ``time.process_time`` counts every thread of the rank (the engine loop, gloo's threads and
    pptrace's recorder thread): what tracing costs the rank in all, immune to other processes
    on a shared machine. The marks go to ``path`` as JSON when the second is reached.
    """

    def __init__(self, messages: Any, lo: int, hi: int, path: str) -> None:
        self.messages, self.lo, self.hi, self.path = messages, lo, hi, path
        self.marks: dict[int, float] = {}

    def put(self, message: Any) -> None:
        if message[0] == "step" and message[2] in (self.lo, self.hi):
            self.marks[message[2]] = time.process_time()
            if message[2] == self.hi:
                with open(self.path, "w") as f:
                    json.dump({"lo": self.marks.get(self.lo), "hi": self.marks[self.hi]}, f)
        self.messages.put(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.messages, name)


@dataclasses.dataclass
class _Child:
    """A picklable ``launch._child`` stand-in that carries the variant and the CPU marks."""

    variant: str
    lo: int
    hi: int

    def __call__(self, opts: PipelineOptions, rank: int, messages: Any) -> None:
        path = os.path.join(opts.out_dir, f"cpu-rank{rank}.json")
        _child(self.variant, opts, rank, _CpuMarks(messages, self.lo, self.hi, path))


def run_once(variant: str, ranks: int, steps: int, out_dir: str) -> tuple[float, float]:
    """Run the pipeline once; return (decode steps per second, CPU seconds per step summed
    over the ranks), both over the middle 80% of the steps."""
    lo, hi = max(1, steps // 10), max(2, steps * 9 // 10)
    marks: dict[str, float] = {}

    def on_progress(done: dict[int, int]) -> None:
        slowest = min(done.values())
        now = time.perf_counter()
        if slowest >= lo and "lo" not in marks:
            marks["lo"] = now
        if slowest >= hi and "hi" not in marks:
            marks["hi"] = now

    launch._child = _Child(variant, lo, hi)  # type: ignore[assignment]
    try:
        opts = PipelineOptions(ranks=ranks, steps=steps, out_dir=out_dir, fingerprint=False)
        result = launch.run_pipeline(opts, on_progress=on_progress, timeout=600)
    finally:
        launch._child = _ORIGINAL_CHILD
    if not result.ok or "hi" not in marks:
        sys.exit(f"{variant}: the pipeline failed: exit codes {result.exit_codes}")
    if variant != "off":
        lost = sum(r.dropped for r in result.reports.values())
        if lost:
            print(f"  note: {variant} run dropped {lost} events (counted in its trace)")
    cpu = 0.0
    for rank in range(ranks):
        with open(os.path.join(out_dir, f"cpu-rank{rank}.json")) as f:
            m = json.load(f)
        cpu += m["hi"] - m["lo"]
    return (hi - lo) / (marks["hi"] - marks["lo"]), cpu / (hi - lo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"sample pipeline, {args.ranks} ranks (gloo, CPU), {args.steps} steps, "
          f"{args.repeats} interleaved repeats, {os.cpu_count()} CPUs")
    from pptrace.record import native

    print(f"native metadata reader (the ranks' wrappers): {native.status().reason}")
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpus: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="pptrace-e2e-") as tmp:
        for r in range(args.repeats):
            order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
            for variant in order:
                out = f"{tmp}/{variant}{r}"
                os.makedirs(out, exist_ok=True)
                rate, cpu = run_once(variant, args.ranks, args.steps, out)
                rates[variant].append(rate)
                cpus[variant].append(cpu)
                print(f"  repeat {r} {variant:<7}{rate:8.1f} steps/s {cpu * 1e3:8.2f} ms CPU/step",
                      flush=True)
    base = statistics.median(rates["off"])
    print(f"\n  {'variant':<9}{'steps/s (median)':>17}{'vs off':>9}   all repeats")
    for variant, values in rates.items():
        med = statistics.median(values)
        every = " ".join(f"{v:.0f}" for v in values)
        print(f"  {variant:<9}{med:>17.1f}{(med / base - 1) * 100:>8.1f}%   {every}")
    base = statistics.median(cpus["off"])
    print(f"\n  {'variant':<9}{'CPU ms/step, all ranks (median)':>32}{'vs off':>9}   all repeats")
    for variant, values in cpus.items():
        med = statistics.median(values)
        every = " ".join(f"{v * 1e3:.2f}" for v in values)
        print(f"  {variant:<9}{med * 1e3:>32.2f}{(med / base - 1) * 100:>+8.1f}%   {every}")
    print("\n  paired by repeat (the variants of one repeat ran back to back): median of the "
          "per-repeat ratios to off, with a 95% bootstrap interval over the repeats")
    for variant in VARIANTS[1:]:
        for name, table in (("steps/s", rates), ("CPU/step", cpus)):
            ratios = [v / o for v, o in zip(table[variant], table["off"], strict=True)]
            lo, hi = _interval(ratios)
            print(f"  {variant:<9}{name:<10}{(statistics.median(ratios) - 1) * 100:>+7.1f}%   "
                  f"[{(lo - 1) * 100:+.1f}%, {(hi - 1) * 100:+.1f}%]")


def _interval(ratios: list[float], draws: int = 10_000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``ratios`` (seeded: reproducible)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


if __name__ == "__main__":
    main()
