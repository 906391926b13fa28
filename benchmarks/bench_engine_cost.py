"""What tracing costs an engine's Python thread: a pure-Python work loop, with and without pptrace.

    python benchmarks/bench_engine_cost.py                     # 1000 and 200 pairs/s, 12 rounds
    python benchmarks/bench_engine_cost.py --rates 1000 --rounds 20 --variants files
    python benchmarks/bench_engine_cost.py --rates 1000 --variants "bare again,files"  # + noise
    python benchmarks/bench_engine_cost.py --rates 1000 --within --variants files  # + its own bare
    python benchmarks/bench_engine_cost.py --profile files     # cProfile of the recorder thread
    git archive main | tar -x -C /tmp/base                     # A/B, in the same rounds:
    python benchmarks/bench_engine_cost.py --base /tmp/base    # each traced variant twice

An engine's scheduler is a Python loop: whatever GIL time pptrace's threads take (the recorder
encoding events, an exporter building SDK spans or posting them) is work the scheduler does not
do, whatever the number of cores. Each variant is a process of its own, started once: a loop of
small pure-Python work units that makes, at a fixed rate, one attach+extract pair through
SGLang's real transport module (``sampling_observer_pp``, loaded without its GPU dependencies;
4 tensors):

- ``bare``: the module untraced;
- ``bare again``: a second untraced process, measured as the others are: its ratio to
  ``bare`` is this machine's noise on the figure (1.000x on a machine that gives two
  processes the same speed), the resolution the traced variants' figures have here;
- ``files``: ``pptrace.instrument()`` writing trace files (the default exporter);
- ``files+otlp sdk``: files and OTLP over ``http/protobuf`` in the engine's process
  (``PPTRACE_OTLP_SHIP=inline``): SDK spans, the official exporter;
- ``files+otlp json``: files and OTLP over ``http/json`` posted from the engine's process
  (``PPTRACE_OTLP_SHIP=inline``, ``pptrace.export.otlp_json.JsonShipper``);
- ``files+otlp shipped``: files and OTLP over ``http/json`` as it goes by default: the process
  writes its trace file only, and the directory's shipper (``pptrace ship``, a process of its
  own, started by the traced process) posts from the file;
- ``files+otlp shipped protobuf``: the same over ``http/protobuf``.

The variants take turns in short slices (``--warm`` seconds of the loop, then ``--seconds``
measured), a round being one slice of each in a rotated order, so that a change in the machine's
load hits them alike; between its slices a variant's process waits (its recorder and shipper
finish what its last slice left them). Each variant runs as ``--procs`` processes (default 3),
round r measuring the r % procs-th of each: two processes of the same code differ in speed by
a few percent here (``bare again`` measured 0.964x and 0.994x in two single-process runs), and
with one process a variant every round would compare the same pair. The warm part of a slice
covers a flush period (half ``PPTRACE_FLUSH_INTERVAL``), so that the measured part holds the
steady state: the flushes of events recorded before it, as many as it leaves to the next.
Each figure is the median of the per-round ratios to the bare slice of the same round, with a
95% bootstrap interval over the rounds and the min-max:

- ``wall``: work units done in the measured seconds (what the issue's targets speak of; other
  processes' load moves it);
- ``free core``: work units per second the loop thread ran or waited for the GIL, leaving out
  the time it was runnable but waited for a CPU (the kernel's ``schedstat``): the work kept on a
  machine with a free core for the engine's process (other processes still move it: on a
  shared machine the loop's CPU per unit swings by 10-20% from slice to slice);
- ``GIL + calls``: the work kept once the loop thread's GIL waits and its CPU inside the
  pairs' calls beyond the bare calls' (for as many pairs) are taken out: what pptrace's threads
  and wrappers take from the engine's thread, which other processes' load hardly moves (it
  leaves out what the recorder and shipper do to the loop's caches, and a core they take when
  none is free); ``calls µs/pair``: the loop thread's CPU inside one pair's calls;
- ``GIL ms/s``, ``waits/s``: the time the loop thread was blocked (neither running nor waiting
  for a CPU: it does nothing else that blocks, so it is the GIL) and how many times it blocked
  (its voluntary context switches), a second;
- ``loop µs/unit``: the loop thread's own CPU per work unit, as a ratio (the wrappers' hot path,
  whatever the recorder thread does to its caches, and the machine's swings);
- ``pptrace ms/s``: CPU a second of the process's other threads (the recorder, an exporter);
  ``shipper ms/s``: CPU a second of the shipper process (its threads together), during the
  measured seconds; ``runq ms/s``: the loop thread's wait for a CPU (the machine's load).

``--within`` adds a second table that no process's luck enters: each traced process also runs
a bare slice of its own just before each traced one, calling the engine's functions under
pptrace's wrappers (``unwrap``) with pptrace's threads left running, idle (its recorder wakes
every 50 ms; its shipper has shipped the last traced slice while the other variants ran), and
each traced slice is compared with that one.

The collector is a local HTTP server in its own process that counts the spans it receives (no
parsing beyond that); the delivery lines compare them with the events the run recorded and the
OTLP sink confirmed (delivered once each: neither lost nor duplicated, stats spans aside), and
the shipper's CPU over the run (its rusage, start-up included) per event.
``--profile VARIANT`` runs that variant alone and prints the recorder thread's cProfile.
"""

from __future__ import annotations

import argparse
import http.server
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

VARIANTS = ("bare", "bare again", "files", "files+otlp sdk", "files+otlp json",
            "files+otlp shipped", "files+otlp shipped protobuf")
PROTOCOL = {"files+otlp sdk": "http/protobuf", "files+otlp json": "http/json",
            "files+otlp shipped": "http/json", "files+otlp shipped protobuf": "http/protobuf"}
INLINE = ("files+otlp sdk", "files+otlp json")  # OTLP posted from the engine's process


# --- the collector (its own process) ------------------------------------------------------------


def _serve(port_out: Any, counts: Any) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    class Handler(http.server.BaseHTTPRequestHandler):
        # The answer's head and body in one write, as a collector sends them: written apart, the
        # body waits for the head's ACK, which the client delays (40 ms a request).
        wbufsize = -1
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Type") == "application/json":
                spans, out, kind = body.count(b'"spanId"'), b"{}", "application/json"
            else:
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                spans = sum(len(ss.spans) for rs in request.resource_spans
                            for ss in rs.scope_spans)
                out, kind = b"", "application/x-protobuf"
            slot = int(self.path.strip("/").split("/")[0])  # /SLOT/v1/traces: the variant's
            with counts.get_lock():
                counts[slot] += spans
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


# --- the kernel's view of threads ---------------------------------------------------------------


def _sched(path: str) -> tuple[int, int, int]:
    """A thread's (ns on a CPU, ns runnable waiting for one, voluntary switches); zeros if gone."""
    try:
        with open(f"{path}/schedstat") as f:
            run, wait, _ = (int(x) for x in f.read().split())
        with open(f"{path}/status") as f:
            vol = next(int(line.split()[1]) for line in f
                       if line.startswith("voluntary_ctxt_switches"))
    except (OSError, ValueError, StopIteration):
        return 0, 0, 0
    return run, wait, vol


def _cpu_ns(pid: int | str, skip: int | None = None) -> int:
    """ns on a CPU of every thread of process ``pid`` (but ``skip``)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        if skip is None or int(tid) != skip:
            total += _sched(f"/proc/{pid}/task/{tid}")[0]
    return total


# --- one variant (a process of its own) ---------------------------------------------------------


def _work_unit() -> int:
    x = 0
    for i in range(200):
        x += i * i
    return x


class Worker:
    """The work loop of one variant, its module traced or not."""

    def __init__(self, variant: str, rate: float, trace_dir: str) -> None:
        import torch

        from pptrace.engines.sglang_load import load_transport_module

        module = load_transport_module(allow_bare=True)
        if module is None:
            sys.exit("SGLang's transport module is not installed (pip install --no-deps sglang)")
        self.variant, self.rate, self.trace_dir = variant, rate, trace_dir
        self.state: Any = None
        if not variant.startswith("bare"):
            import pptrace
            from pptrace.activation import startup

            exporters = ("file",) if variant == "files" else ("file", "otlp")
            pptrace.instrument(exporters=exporters, trace_dir=trace_dir)
            self.state = startup._state

        class Output:
            named = {f"t{i}": torch.zeros(8, 4) for i in range(4)}

            def to_pp_tensors(self) -> Any:
                return self.named

        class Observer:
            def from_pp_tensors(self, tensors: Any) -> Any:
                return tensors

        self.attach = module.add_auxiliary_output_to_pp_tensors
        self.extract = module.pop_auxiliary_output_from_pp_tensors
        # The engine's own functions under pptrace's wrappers: a slice of this process that
        # calls these instead is its bare reference (pptrace's threads left idle).
        self.functions = {False: (self.attach, self.extract), True: (self.attach, self.extract)}
        if self.state is not None:
            from pptrace.record.wrapper import unwrap

            self.functions[True] = (unwrap(self.attach), unwrap(self.extract))
        self.output, self.observer = Output(), Observer()
        self.token = torch.zeros(4, dtype=torch.long)
        self.tid = threading.get_native_id()

    def loop(self, duration: float, bare: bool = False) -> tuple[int, int, float]:
        """Work units and pairs done in ``duration`` seconds, and the loop thread's CPU seconds
        inside the pairs' calls (the wrappers' hot path, when traced; ``bare``: the engine's
        functions under them)."""
        (attach, extract), output, observer = self.functions[bare], self.output, self.observer
        token, units, pairs, in_calls = self.token, 0, 0, 0
        cpu = time.thread_time_ns
        start = time.perf_counter()
        due, end, period = start, start + duration, 1.0 / self.rate
        now = start
        while now < end:
            _work_unit()
            units += 1
            now = time.perf_counter()
            if now >= due:
                tensors = {"next_token_ids": token}
                began = cpu()
                attach(tensors, output)
                extract(tensors, observer)
                in_calls += cpu() - began
                pairs += 1
                due += period
        return units, pairs, in_calls / 1e9

    def shippers(self) -> list[int]:
        from pptrace.export import ship_launch

        return list(ship_launch._started)

    def slice(self, warm: float, seconds: float, bare: bool = False) -> dict[str, Any]:
        """One slice: ``warm`` seconds of the loop, then ``seconds`` measured (``bare``: calling
        the engine's functions under pptrace's wrappers)."""
        self.loop(warm, bare)
        me = f"/proc/self/task/{self.tid}"
        shippers = self.shippers()
        _, wait0, vol0 = _sched(me)
        run0 = time.thread_time()  # exact; schedstat's run time lags by up to a tick
        others0 = _cpu_ns("self", skip=self.tid)
        ship0 = sum(_cpu_ns(pid) for pid in shippers)
        began = time.perf_counter()
        units, pairs, in_calls = self.loop(seconds, bare)
        wall = time.perf_counter() - began
        run = time.thread_time() - run0
        _, wait1, vol1 = _sched(me)
        others1 = _cpu_ns("self", skip=self.tid)
        ship1 = sum(_cpu_ns(pid) for pid in shippers)
        runq = (wait1 - wait0) / 1e9
        return {"units": units, "pairs": pairs, "in_calls": in_calls, "wall": wall, "run": run,
                "runq": runq,
                "blocked": max(0.0, wall - run - runq), "waits": vol1 - vol0,
                "others": (others1 - others0) / 1e9, "shipper": (ship1 - ship0) / 1e9}

    def end(self) -> dict[str, Any]:
        """Stop tracing; what was recorded, dropped, confirmed (and the shipper's counts)."""
        if self.state is None:
            return {}
        import pptrace

        pptrace.uninstrument()
        stats = self.state.recorder.stats()
        processor = self.state.processor
        sent = getattr(processor, "sent_events", None)
        if sent is None and processor is not None:  # the SDK path counts spans, stats included
            sent = processor.sent
        lost = dict(stats.sink_dropped).get("otlp", 0)
        shipper_cpu = 0.0
        if self.variant.startswith("files+otlp shipped"):  # the shipper's counts, once done
            from pptrace.export.ship_launch import STATE_NAME, wait_for_shipper
            from pptrace.ship.state import ShipState

            wait_for_shipper(self.trace_dir, 120)
            for pid in self.shippers():  # this process started it: its rusage once it exits
                _, _, usage = os.wait4(pid, 0)
                shipper_cpu += usage.ru_utime + usage.ru_stime
            totals = ShipState.load(os.path.join(self.trace_dir, STATE_NAME)).totals()
            sent, lost = totals["events_sent"], totals["events_lost"]
        out = {"recorded": stats.recorded, "dropped": stats.dropped, "otlp_lost": lost,
               "otlp_confirmed": sent}
        if self.variant.startswith("files+otlp shipped"):
            out["shipper_cpu"] = shipper_cpu
        return out


def child(variant: str, rate: float, trace_dir: str) -> None:
    """Serve the parent's commands on stdin: ``slice WARM SECONDS``, ``end``."""
    worker = Worker(variant, rate, trace_dir)
    worker.loop(1.0)  # the sink opens, templates are made, the exporter connects
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "slice":
            print(json.dumps(worker.slice(float(cmd[1]), float(cmd[2]), cmd[3:] == ["bare"])),
                  flush=True)
        elif cmd[0] == "end":
            print(json.dumps(worker.end()), flush=True)
            return


def _env(variant: str, endpoint: str) -> dict[str, str]:
    """The variant's environment; ``endpoint`` is its own (``/SLOT``: the collector counts
    each variant's spans apart)."""
    env = dict(os.environ)
    for key in ("PPTRACE_ENABLED", "PPTRACE_EXPORT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        env.pop(key, None)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = PROTOCOL.get(variant, "http/json")
    env["PPTRACE_OTLP_SHIP"] = "inline" if variant in INLINE else "files"
    return env


class Proc:
    """A variant's process, driven over its stdin and stdout."""

    def __init__(self, variant: str, rate: float, endpoint: str, trace_dir: str,
                 base: str | None = None) -> None:
        self.variant = variant
        env = _env(variant, endpoint)
        if base is not None:  # pptrace from there (its shipper too: it inherits the path)
            env["PYTHONPATH"] = os.pathsep.join([base, env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep)
        # Run from elsewhere than a checkout: the shipper is ``python -m pptrace ship``, and
        # ``-m`` puts the working directory first on the path, before PYTHONPATH.
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", variant, str(rate),
             trace_dir], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=os.path.dirname(trace_dir))

    def ask(self, command: str | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"{self.variant} failed ({self.proc.wait()})")
            if line.startswith("{"):
                out: dict[str, Any] = json.loads(line)
                return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# --- the figures --------------------------------------------------------------------------------


def _interval(values: list[float], draws: int = 4000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values`` (seeded: reproducible)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def _ratio_cell(values: list[float]) -> str:
    lo, hi = _interval(values)
    return (f"{statistics.median(values):.3f}x [{lo:.3f}-{hi:.3f}] "
            f"({min(values):.3f}-{max(values):.3f})")


def _ratios(mine: list[dict[str, Any]], bare: list[dict[str, Any]],
            figure: Callable[[dict[str, Any]], float]) -> list[float]:
    """Each round's ``figure`` of the variant as a ratio to the bare loop's."""
    return [figure(m) / figure(b) for m, b in zip(mine, bare, strict=True)]


def _kept(mine: list[dict[str, Any]], bare: list[dict[str, Any]]) -> list[float]:
    """Each round's work kept once the loop thread's loss to pptrace alone is taken out: its
    GIL waits, and its CPU in the calls beyond the bare calls' (for as many pairs)."""
    return [1 - (m["blocked"] + m["in_calls"] - b["in_calls"] / b["pairs"] * m["pairs"])
            / m["wall"] for m, b in zip(mine, bare, strict=True)]


def _per_second(slices: list[dict[str, Any]], key: str) -> float:
    return statistics.median(s[key] / s["wall"] for s in slices) * 1e3


def report(rate: float, variants: list[str], slices: dict[str, list[dict[str, Any]]],
           args: argparse.Namespace) -> None:
    rounds = len(slices["bare"])
    print(f"\n{rate:g} pairs/s, {rounds} rounds of {args.warm:g} s warm + {args.seconds:g} s "
          "measured a variant: median of the per-round ratios to bare [95% bootstrap] (min-max)")
    print(f"  {'variant':<34} {'wall':<30} {'free core':<30} {'GIL + calls':<30}")
    bare = slices["bare"]
    for variant in variants:
        mine = slices[variant]
        wall = _ratios(mine, bare, lambda s: s["units"] / s["wall"])
        free = _ratios(mine, bare, lambda s: s["units"] / (s["run"] + s["blocked"]))
        kept = _kept(mine, bare)
        print(f"  {variant:<34} {_ratio_cell(wall):<30} {_ratio_cell(free):<30} "
              f"{_ratio_cell(kept):<30}")
    print(f"\n  {'variant':<34} {'calls µs/pair':>13} {'GIL ms/s':>8} {'waits/s':>7} "
          f"{'pptrace ms/s':>12} {'shipper ms/s':>12} {'runq ms/s':>9} {'loop µs/unit':>12}")
    for variant in variants:
        mine = slices[variant]
        loop = _ratios(mine, bare, lambda s: s["run"] / s["units"])
        print(f"  {variant:<34} "
              f"{statistics.median(m['in_calls'] / m['pairs'] for m in mine) * 1e6:>13.1f} "
              f"{_per_second(mine, 'blocked'):>8.1f} "
              f"{statistics.median(m['waits'] / m['wall'] for m in mine):>7.0f} "
              f"{_per_second(mine, 'others'):>12.1f} {_per_second(mine, 'shipper'):>12.1f} "
              f"{_per_second(mine, 'runq'):>9.1f} {statistics.median(loop):>11.3f}x")


def report_within(own: dict[str, list[dict[str, Any]]],
                  slices: dict[str, list[dict[str, Any]]]) -> None:
    """Each traced slice against the bare slice its own process ran just before it."""
    print("\n  within one process (--within): each traced slice to the bare slice the same "
          "process ran just before it, calling the engine's functions under the wrappers")
    print(f"  {'variant':<34} {'wall':<30} {'GIL + calls':<30} {'loop µs/unit':>12}")
    for label, bare in own.items():
        mine = slices[label]
        wall = _ratios(mine, bare, lambda s: s["units"] / s["wall"])
        kept = _kept(mine, bare)
        loop = _ratios(mine, bare, lambda s: s["run"] / s["units"])
        print(f"  {label:<34} {_ratio_cell(wall):<30} {_ratio_cell(kept):<30} "
              f"{statistics.median(loop):>11.3f}x")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def profile(variant: str, rate: float, seconds: float, endpoint: str) -> None:
    """Run ``variant`` alone for ``seconds`` with cProfile in the recorder thread; print it."""
    code = f"""
import cProfile, io, pstats, sys, threading
threading.setprofile(None)
profiler = cProfile.Profile()
_orig = threading.Thread.run
def run(self):
    if self.name == "pptrace-recorder":
        profiler.enable()
    _orig(self)
threading.Thread.run = run
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import bench_engine_cost as b
import tempfile
with tempfile.TemporaryDirectory() as d:
    w = b.Worker({variant!r}, {rate!r}, d)
    w.loop({seconds!r})
    profiler.disable()
    w.end()
out = io.StringIO()
pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
print(out.getvalue())
"""
    subprocess.run([sys.executable, "-c", code], env=_env(variant, endpoint), check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,200", help="pairs a second (default 1000,200)")
    parser.add_argument("--rounds", type=int, default=12,
                        help="rounds, each one slice of every variant (default 12)")
    parser.add_argument("--seconds", type=float, default=1.5,
                        help="measured seconds of a slice (default 1.5)")
    parser.add_argument("--warm", type=float, default=0.6,
                        help="seconds of the loop before each measured part (default 0.6)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {', '.join(VARIANTS)} (default all)")
    parser.add_argument("--procs", type=int, default=3,
                        help="processes of each variant, taking turns round by round (default 3):"
                        " two processes of the same code differ in speed by a few percent here, "
                        "so one process a variant would measure its luck as much as pptrace")
    parser.add_argument("--within", action="store_true",
                        help="also give each traced process a bare slice of its own before each "
                        "traced one (the engine's functions under the wrappers, pptrace's threads "
                        "idle), and the ratios within each process: no luck of the process in them")
    parser.add_argument("--base", metavar="DIR",
                        help="also run each traced variant with the pptrace of DIR (a `git "
                        "archive` of another commit), as 'base: VARIANT', in the same rounds")
    parser.add_argument("--profile", metavar="VARIANT",
                        help="cProfile the recorder thread of VARIANT (first rate, --seconds)")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "RATE", "DIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, rate, trace_dir = args.child
        child(variant, float(rate), trace_dir)
        return
    variants = [v for v in args.variants.split(",") if v]
    if variants[0] != "bare":
        variants.insert(0, "bare")
    rates = [float(r) for r in args.rates.split(",")]
    ctx = multiprocessing.get_context("spawn")
    port_q: Any = ctx.Queue()
    counts: Any = ctx.Array("q", 2 * len(VARIANTS) * max(1, args.procs))
    server = ctx.Process(target=_serve, args=(port_q, counts), daemon=True)
    server.start()
    endpoint = f"http://127.0.0.1:{port_q.get(timeout=30)}"
    print(f"load before: {_load()}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    try:
        if args.profile:
            profile(args.profile, rates[0], args.seconds, f"{endpoint}/0")
            return
        for rate in rates:
            run_rate(rate, variants, args, endpoint, counts)
    finally:
        server.terminate()
    print(f"\nload after: {_load()}")


def run_rate(rate: float, variants: list[str], args: argparse.Namespace, endpoint: str,
             counts: Any) -> None:
    labels = list(variants)
    if args.base:
        labels += [f"base: {v}" for v in variants if not v.startswith("bare")]
    n = max(1, args.procs)
    with tempfile.TemporaryDirectory(prefix="pptrace-bench-cost-") as tmp:
        before = list(counts)
        # Each label's processes, each with a slot of its own: the collector counts each slot's
        # spans apart. Round r measures every label's process r % n, so that the per-round
        # ratios compare a different pair of processes from one round to the next.
        procs: dict[str, list[Proc]] = {label: [] for label in labels}
        slots: dict[str, list[int]] = {label: [] for label in labels}
        for i in range(n):
            for label in labels:
                slot = len(labels) * i + labels.index(label)
                variant = label.removeprefix("base: ")
                procs[label].append(Proc(variant, rate, f"{endpoint}/{slot}",
                                         os.path.join(tmp, str(slot)),
                                         args.base if label.startswith("base: ") else None))
                slots[label].append(slot)
        try:
            for group in procs.values():
                for p in group:
                    p.ask(None)  # ready
            slices: dict[str, list[dict[str, Any]]] = {v: [] for v in labels}
            # --within: each traced process's own bare slice, just before its traced one (after
            # the other variants' slices: its recorder and shipper are done with its last one).
            own: dict[str, list[dict[str, Any]]] = {
                v: [] for v in labels if args.within and not v.startswith("bare")}
            for rnd in range(args.rounds):
                order = labels[rnd % len(labels):] + labels[:rnd % len(labels)]
                for label in order:
                    proc = procs[label][rnd % n]
                    if label in own:
                        own[label].append(proc.ask(f"slice {args.warm} {args.seconds} bare"))
                    slices[label].append(proc.ask(f"slice {args.warm} {args.seconds}"))
            report(rate, labels, slices, args)
            if own:
                report_within(own, slices)
            for label in labels:
                ends = [p.ask("end") for p in procs[label]]
                if label.removeprefix("base: ") not in PROTOCOL:
                    continue
                got = {k: sum(e[k] for e in ends) for k in ends[0]}
                # counted before each post was answered
                received = sum(counts[slot] - before[slot] for slot in slots[label])
                print(f"  {label} ({n} processes): recorded {got['recorded']}, dropped "
                      f"{got['dropped']}, otlp lost {got['otlp_lost']}, confirmed "
                      f"{got['otlp_confirmed']}, collector got {received} spans" + (
                          f"; the shipper's CPU, start-up included: {got['shipper_cpu']:.2f} s, "
                          f"{got['shipper_cpu'] / max(1, got['otlp_confirmed']) * 1e6:.0f} µs "
                          "an event" if "shipper_cpu" in got else ""))
        finally:
            for group in procs.values():
                for p in group:
                    p.close()

if __name__ == "__main__":
    main()
