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
    python benchmarks/bench_view.py --index --sizes 1000000   # the index build alone: the
        # synthetic trace analyzed once, then indexed 7 times with the analyzer's pairs
    python benchmarks/bench_view.py --tmux-files 1000000   # the real command in a real
        # terminal: 1M events over 8 ranks as trace files, `pptrace view DIR` in tmux, seconds
        # to the first painted grid and where they went (target: 5 s)
    python benchmarks/bench_view.py --tmux-messages 1000000   # 1M message records and 300k
        # events over 16 processes (bench_scale's writer), `pptrace view DIR` in tmux, then M:
        # seconds from the command's start to the painted message screen

``--tmux-files N`` writes N events over 8 ranks (pp2 x tp4) as real trace files with
``benchmarks/bench_analyze.py``'s writer (``--format``: v1, v1.gz, v2, v2.gz; default v2, what
pptrace writes), starts ``pptrace view DIR`` in a detached tmux session of 160x45 on its own
socket, and polls ``capture-pane`` every 20 ms. What the terminal shows marks the phases: the
loader's progress line (Python started, reading), ``pptrace: analyzing`` (loaded), the viewer's
loading screen (analyzed, Textual started), ``indexing`` (the index being built) and the grid's
header with painted cells (first paint). Then the same files are loaded, analyzed and indexed
in this process, to split the last phase into index build and the rest (mounting, drawing).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import shlex
import shutil
import statistics
import subprocess
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


# --- the real command in tmux ------------------------------------------------------------------

#: What the terminal shows at each phase, in order (the first screen that holds it marks it).
MARKS = (
    ("loading", "pptrace: loading"),  # the loader's progress: imports done, files being read
    ("analyzing", "pptrace: analyzing"),  # loaded
    ("viewer started", "pptrace view"),  # the loading screen's title: Textual is up
    ("indexing", "indexing"),  # the loading screen's phase: the index is being built
)
#: The grid is painted: its header, and a row of paired cells.
GRID = ("rank / dir", "= = = =")
#: What the header shows while a large trace's start is drawn and the rest is read.
PARTIAL = "◐"


_SERVERS = itertools.count()


def _tmux(socket: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *args],
                          capture_output=True, text=True, timeout=20, check=True)
    return done.stdout


#: The message screen is painted: its timeline's and its detail's titles.
MESSAGE_SCREEN = ("messages · stage × time", "message detail")


def measure_tmux(directory: str, timeout: float = 120.0,
                 then: tuple[str, tuple[str, ...]] | None = None) -> dict[str, float]:
    """Start ``pptrace view DIRECTORY`` in tmux; the seconds from the start of the command to
    each phase's first screen, and to the painted grid (``first_paint_s``). ``then``: a key
    pressed once the grid is painted, and what its screen shows: the seconds from the start to
    that screen (``then_s``)."""
    # A fresh server per run: a name just killed may not be free yet.
    socket = f"pptrace-bench-{os.getpid()}-{next(_SERVERS)}"
    command = (f"env -u COLUMNS -u LINES {shlex.quote(sys.executable)} -m pptrace view "
               f"{shlex.quote(directory)}; sleep 60")
    seen: dict[str, float] = {}
    try:
        start = time.perf_counter()
        _tmux(socket, "new-session", "-d", "-s", "view", "-x", "160", "-y", "45",
              "-c", directory, command)
        deadline = start + timeout
        while time.perf_counter() < deadline:
            screen = _tmux(socket, "capture-pane", "-p", "-t", "view")
            now = time.perf_counter() - start
            for name, text in MARKS:
                if name not in seen and text in screen:
                    seen[name] = now
            partial = PARTIAL in screen
            if "first_paint_s" not in seen and all(text in screen for text in GRID):
                seen["first_paint_s"] = now
                seen["partial"] = float(partial)
                if then is not None:
                    _tmux(socket, "send-keys", "-t", "view", then[0])
            elif then is not None and "first_paint_s" in seen and "then_s" not in seen and all(
                    text in screen for text in then[1]):
                seen["then_s"] = now
            # The whole trace shown (a large one's start is drawn first, marked PARTIAL).
            target = GRID if then is None else then[1]
            if ("then_s" in seen or then is None) and "first_paint_s" in seen and not partial \
                    and all(text in screen for text in target):
                seen["whole_s"] = now
                break
            time.sleep(0.02)
        else:
            raise SystemExit(f"no painted {'screen' if then else 'grid'} within {timeout:.0f} "
                             f"s; the screen was:\n{screen}")
        _tmux(socket, "send-keys", "-t", "view", "q")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=20)
    return seen


def measure_in_process(directory: str) -> dict[str, float]:
    """Load, analyze and index the same files here, phase by phase, as ``pptrace view`` does."""
    from pptrace_tui.index import TraceIndex

    from pptrace.analyze.analyzer import analysis
    from pptrace.load.loader import load_paths

    gc.collect()
    t = time.perf_counter()
    trace = load_paths([directory])
    out = {"load_s": time.perf_counter() - t, "events": float(trace.event_count)}
    t = time.perf_counter()
    result = analysis(trace)
    out["analyze_s"] = time.perf_counter() - t
    t = time.perf_counter()
    TraceIndex.build(trace, result.findings, pairs=result.pairs)
    out["index_s"] = time.perf_counter() - t
    return out


def measure_index(events: int, rounds: int = 7) -> list[float]:
    """Seconds of each of ``rounds`` index builds of the synthetic trace, from the analyzer's
    pairs and verdicts (the analysis made once, before)."""
    from pptrace_tui.index import TraceIndex

    from pptrace.analyze.analyzer import analysis

    trace, findings = synthetic(events)
    result = analysis(trace)
    times = []
    for _ in range(rounds):
        gc.collect()
        t = time.perf_counter()
        TraceIndex.build(result.trace, findings, pairs=result.pairs)
        times.append(time.perf_counter() - t)
    return times


def run_tmux(events: int, fmt: str, runs: int, keep: str | None) -> None:
    """Write the files (``keep``: into that directory, or use the ones already there), time
    the real command ``runs`` times, then the phases in process."""
    if shutil.which("tmux") is None:
        raise SystemExit("--tmux-files needs tmux (apt-get install tmux)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_analyze import generate

    with tempfile.TemporaryDirectory() as tmp:
        where = str(Path(keep).resolve()) if keep else tmp
        if keep and any(Path(where).glob("*.otlp.jsonl*")):
            print(f"using the trace files already in {where}")
        else:
            t = time.perf_counter()
            size = generate(where, events, fmt)
            print(f"wrote {events:,} events over 8 ranks ({fmt}, {size / 1e6:.0f} MB) in "
                  f"{time.perf_counter() - t:.1f} s")
        results = [measure_tmux(where) for _ in range(runs)]
        inside = measure_in_process(where)
    print(f"\n== pptrace view DIR in tmux (160x45), {events:,} events, {fmt} ==")
    print("  seconds from the start of the command to the first screen showing:")
    for name, _ in (*MARKS, ("first_paint_s", "")):
        times = [r[name] for r in results if name in r]
        label = "the painted grid (first paint)" if name == "first_paint_s" else repr(name)
        shown = "  ".join(f"{v:6.2f}" for v in times) if times else "   (never seen)"
        print(f"    {label:<34} {shown}")
    _print_whole(results, "the grid")
    best = min(r["first_paint_s"] for r in results)
    print(f"  first paint: best {best:.2f} s, median "
          f"{statistics.median(r['first_paint_s'] for r in results):.2f} s over {runs} run(s) "
          "(target: 5 s)")
    print("\n  the same files in this process, phase by phase:")
    print(f"    load (pptrace.load.loader)           {inside['load_s']:6.2f} s")
    print(f"    analyze (pptrace.analyze.analyzer)   {inside['analyze_s']:6.2f} s")
    print(f"    index build (pptrace_tui.index)      {inside['index_s']:6.2f} s")
    whole = min(r["whole_s"] for r in results)
    rest = whole - sum(inside[k] for k in ("load_s", "analyze_s", "index_s"))
    print(f"    the rest of the best whole grid      {rest:6.2f} s  (Python and imports, "
          "Textual's start, mounting and drawing; a large trace's start first)")


def _print_whole(results: list[dict[str, float]], what: str) -> None:
    """Whether the first paint was a large trace's start, and when the whole trace was shown."""
    partial = sum(1 for r in results if r.get("partial"))
    print(f"    first paint of the trace's start (marked {PARTIAL}, the rest read behind it): "
          f"{partial} of {len(results)} run(s)")
    print(f"    {what} on the whole trace{'':<{max(0, 26 - len(what))}}"
          + "  ".join(f"{r['whole_s']:6.2f}" for r in results))


def run_tmux_messages(messages: int, runs: int, keep: str | None) -> None:
    """``messages`` message records and 3 attach/extract events for every 10 (the issue's
    1M + 300k), 16 processes, written by ``bench_scale.generate``; ``pptrace view DIR`` in tmux
    ``runs`` times: the seconds to the grid, then to the message screen (key ``M``, sent at the
    painted grid; where the trace's first divergence is a message the viewer opens that screen
    by itself, and the key changes nothing)."""
    if shutil.which("tmux") is None:
        raise SystemExit("--tmux-messages needs tmux (apt-get install tmux)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_scale import generate

    events = messages * 3 // 10
    with tempfile.TemporaryDirectory() as tmp:
        where = str(Path(keep).resolve()) if keep else tmp
        if keep and any(Path(where).glob("*.otlp.jsonl*")):
            print(f"using the trace files already in {where}")
        else:
            Path(where).mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            generate(where, messages, events, 16)
            print(f"wrote {messages:,} messages and {events:,} events over 16 processes in "
                  f"{time.perf_counter() - t:.1f} s")
        results = [measure_tmux(where, then=("M", MESSAGE_SCREEN)) for _ in range(runs)]
    print(f"\n== pptrace view DIR in tmux (160x45), {messages:,} messages, {events:,} events ==")
    for name, label in (("first_paint_s", "the painted grid"),
                        ("then_s", "the message screen")):
        print(f"    {label:<44} " + "  ".join(f"{r[name]:6.2f}" for r in results))
    print("    (M is sent once the grid is painted; a trace whose first divergence is in the "
          "message layer\n     opens the message screen by itself, M then changing nothing)")
    _print_whole(results, "the message screen")
    best = min(r["then_s"] for r in results)
    print(f"  message screen: best {best:.2f} s, median "
          f"{statistics.median(r['then_s'] for r in results):.2f} s from the command's start "
          f"over {runs} run(s) (target: 5 s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--files", action="store_true",
                        help="write OTLP files first and time loading and analyzing them")
    parser.add_argument("--wide-pair", type=int, nargs="*", default=None, metavar="N",
                        help="instead: one pair of N tensors per cell (e.g. 10000 100000)")
    parser.add_argument("--index", action="store_true",
                        help="instead: the index build alone, 7 times at each size")
    parser.add_argument("--tmux-files", type=int, default=None, metavar="N",
                        help="instead: N events as trace files, `pptrace view DIR` in tmux")
    parser.add_argument("--format", default="v2", choices=("v1", "v1.gz", "v2", "v2.gz"),
                        help="--tmux-files: the files' format (default v2, what pptrace writes)")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="--tmux-files: write the files into DIR and keep them; files "
                             "already there are used as they are")
    parser.add_argument("--runs", type=int, default=3,
                        help="--tmux-files: how many times to start the viewer (default 3)")
    parser.add_argument("--tmux-messages", type=int, default=None, metavar="N",
                        help="instead: N message records (and 3 events for every 10) as trace "
                             "files, `pptrace view DIR` in tmux, then M: seconds to the "
                             "message screen")
    args = parser.parse_args()
    if args.tmux_messages:
        run_tmux_messages(args.tmux_messages, args.runs, args.keep)
        return 0
    if args.tmux_files:
        run_tmux(args.tmux_files, args.format, args.runs, args.keep)
        return 0
    if args.index:
        for n in args.sizes:
            times = measure_index(n)
            print(f"== index build, {n:,} events ==  best {min(times):.3f} s, median "
                  f"{statistics.median(times):.3f} s of {len(times)} (load average "
                  f"{os.getloadavg()[0]:.1f})")
        return 0
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
