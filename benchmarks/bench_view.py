"""How fast ``pptrace view`` opens and answers keys on large traces (headless, Textual Pilot).

For traces of 100k and 1M events (built in memory from records, as the loader returns them):
- first progress paint: the loading screen is on screen (the user sees progress);
- first paint: the main screen with the grid is drawn (index built, widgets mounted);
- timeline: the background ordering of all events by time (replay keys need it);
- keypress: median and worst time from a key press until the app is idle again, for grid moves,
  replay steps and finding jumps, and the median CPU time the process spent on it. Pilot decides
  "idle" by sleeping in 20 ms slices until the CPU rests, so even an unbound key ("x") takes
  about 100 ms of wall time: that floor is printed, and the CPU time is the viewer's own work.
Targets: first paint under 2 s (100k) and 5 s (1M); under 100 ms a keypress at 1M.
The last lines print the 1M/100k ratios measured side by side in this run: a virtualised grid
keeps the keypress ratio near 1.

    python benchmarks/bench_view.py            # 100k and 1M
    python benchmarks/bench_view.py --sizes 100000
    python benchmarks/bench_view.py --files --sizes 100000   # end to end from OTLP files:
        # write per-rank files, then time loading and analyzing before the viewer
    python benchmarks/bench_view.py --wide-pair 10000 100000   # one pair of N tensors: first
        # paint, and a key that moves to the next such pair (the pair detail drawn again)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers_tui import synthetic  # noqa: E402
from pptrace_tui.app import PptraceViewer  # noqa: E402
from pptrace_tui.screens.loading import LoadingScreen  # noqa: E402
from pptrace_tui.screens.main import MainScreen  # noqa: E402

#: "x" is bound to nothing: its time is Pilot's own round trip, the floor under every other key.
KEYS = ["x", "right", "left", "down", "up", "pagedown", "n", "p", "right_square_bracket", "end",
        "home"]
ROUNDS = 5


def from_files(events: int, directory: str) -> tuple[object, list[object], dict[str, float]]:
    """Write the synthetic trace as per-rank OTLP/JSON lines files, then load and analyze them
    the way ``pptrace view`` does; return the trace, findings and the two timings."""
    from helpers_analyze import write_otlp_lines

    from pptrace.analyze.analyzer import analyze
    from pptrace.load.loader import load_paths

    trace, _ = synthetic(events)
    for proc in trace.processes:
        write_otlp_lines(f"{directory}/rank{proc.rank.rank}.otlp.jsonl", proc.events)
    del trace
    gc.collect()
    t = time.perf_counter()
    loaded = load_paths([directory])
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    findings = analyze(loaded)
    return loaded, list(findings), {"load_s": load_s, "analyze_s": time.perf_counter() - t}


async def measure(events: int, files: str | None = None) -> dict[str, float]:
    pre: dict[str, float] = {}
    if files is not None:
        trace, findings, pre = from_files(events, files)
    else:
        trace, findings = synthetic(events)
    gc.collect()
    out: dict[str, float] = {"events": float(trace.event_count), **pre}  # type: ignore[attr-defined]
    start = time.perf_counter()
    app = PptraceViewer.of(trace, findings)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 45)) as pilot:
        while not isinstance(app.screen, (LoadingScreen, MainScreen)):
            await asyncio.sleep(0.001)
        out["progress_paint_s"] = time.perf_counter() - start
        while not isinstance(app.screen, MainScreen) or app.screen.painted_at is None:
            await asyncio.sleep(0.005)
        screen = app.screen
        assert isinstance(screen, MainScreen) and screen.painted_at is not None
        out["first_paint_s"] = screen.painted_at - start  # set right after the first refresh
        while not screen.index.timeline_ready:
            await asyncio.sleep(0.01)
        out["timeline_ready_s"] = time.perf_counter() - start
        await pilot.pause()
        for key in KEYS:
            times, cpu = [], []
            for _ in range(ROUNDS):
                t, c = time.perf_counter(), time.process_time()
                await pilot.press(key)
                await pilot.pause()
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            out[f"key {key} median_ms"] = 1000 * statistics.median(times)
            out[f"key {key} max_ms"] = 1000 * max(times)
            out[f"key {key} cpu_ms"] = 1000 * statistics.median(cpu)
    all_medians = [v for k, v in out.items() if k.endswith("median_ms") and "key x " not in k]
    all_max = [v for k, v in out.items() if k.endswith("max_ms") and "key x " not in k]
    out["keypress_median_ms"] = statistics.median(all_medians)
    out["keypress_cpu_ms"] = statistics.median(
        [v for k, v in out.items() if k.endswith("cpu_ms") and "key x " not in k])
    out["keypress_worst_ms"] = max(all_max)
    return out


async def measure_wide(tensors: int) -> dict[str, float]:
    """A trace of 3 pairs whose payload has ``tensors`` tensors (issue 15, item 6)."""
    from helpers_tui import pipeline, tensor
    from pptrace_tui.widgets.pair_detail import PairDetail

    trace = pipeline(3, payload=tuple(tensor(f"t{i}", (4,)) for i in range(tensors)))
    start = time.perf_counter()
    app = PptraceViewer.of(trace, [])
    out: dict[str, float] = {}
    async with app.run_test(size=(160, 45)) as pilot:
        while not isinstance(app.screen, MainScreen) or app.screen.painted_at is None:
            await asyncio.sleep(0.005)
        out["first_paint_s"] = app.screen.painted_at - start
        await pilot.pause()
        times, drawn = [], []
        for key in ["right", "right", "left", "left", "right"]:
            t = time.perf_counter()
            await pilot.press(key)
            await pilot.pause()
            times.append(time.perf_counter() - t)
            drawn.append(app.screen.query_one(PairDetail).lines_drawn)
        out["key_median_ms"] = 1000 * statistics.median(times)
        out["key_max_ms"] = 1000 * max(times)
        out["lines_drawn_max"] = float(max(drawn))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--files", action="store_true",
                        help="write OTLP files first and time loading and analyzing them")
    parser.add_argument("--wide-pair", type=int, nargs="*", default=None, metavar="N",
                        help="instead: one pair of N tensors per cell (e.g. 10000 100000)")
    args = parser.parse_args()
    if args.wide_pair:
        for n in args.wide_pair:
            r = asyncio.run(measure_wide(n))
            print(f"== one pair of {n:,} tensors ==  first paint {r['first_paint_s']:.2f} s, "
                  f"key to the next pair: median {r['key_median_ms']:.0f} ms, worst "
                  f"{r['key_max_ms']:.0f} ms; tensor lines drawn per pair at most "
                  f"{r['lines_drawn_max']:.0f}")
        return 0
    results = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            r = asyncio.run(measure(n, tmp if args.files else None))
        results[n] = r
        print(f"\n== {int(r['events']):,} events ==")
        if args.files:
            print(f"  pptrace.load.loader of the OTLP files      {r['load_s']:7.3f} s")
            print(f"  pptrace.analyze.analyzer                    {r['analyze_s']:7.3f} s")
        print(f"  loading screen (progress) painted  {r['progress_paint_s']:7.3f} s")
        print(f"  first paint of the grid            {r['first_paint_s']:7.3f} s")
        print(f"  timeline ordered (background)      {r['timeline_ready_s']:7.3f} s")
        for key in KEYS:
            print(f"  key {key:<22} median {r[f'key {key} median_ms']:7.1f} ms"
                  f"   worst {r[f'key {key} max_ms']:7.1f} ms"
                  f"   cpu {r[f'key {key} cpu_ms']:6.1f} ms")
        print(f"  bound keys: median {r['keypress_median_ms']:.1f} ms, "
              f"worst {r['keypress_worst_ms']:.1f} ms "
              f"(an unbound key, Pilot's floor: {r['key x median_ms']:.1f} ms; "
              f"above it: {r['keypress_median_ms'] - r['key x median_ms']:.1f} ms)")
    if 100_000 in results and 1_000_000 in results:
        small, big = results[100_000], results[1_000_000]
        print("\n== 1M / 100k, side by side in this run ==")
        for key in ("first_paint_s", "timeline_ready_s", "keypress_median_ms",
                    "keypress_worst_ms", "keypress_cpu_ms"):
            print(f"  {key:<22} {big[key] / small[key]:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
