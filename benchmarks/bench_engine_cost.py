"""What tracing costs an engine's Python thread: a pure-Python work loop, with and without pptrace.

    python benchmarks/bench_engine_cost.py                      # 1000 and 200 pairs/s, 3 rounds
    python benchmarks/bench_engine_cost.py --rates 1000 --rounds 5 --seconds 4

An engine's scheduler is a Python loop: whatever GIL time pptrace's threads take (the recorder
encoding events, an exporter building SDK spans or posting them) is work the scheduler does not
do, whatever the number of cores. Each variant runs in a fresh process: a loop of small
pure-Python work units that makes, at a fixed rate, one attach+extract pair through SGLang's real
transport module (``sampling_observer_pp``, loaded without its GPU dependencies; 4 tensors). The
figure is the work units done in ``--seconds``, as a ratio to the bare loop of the same round:

- ``bare``: the module untraced;
- ``files``: ``pptrace.instrument()`` writing trace files (the default exporter);
- ``files+otlp sdk``: files and OTLP over ``http/protobuf`` in the engine's process
  (``PPTRACE_OTLP_SHIP=inline``): SDK spans, the official exporter (the path every OTLP export
  took before ``http/json``, and ``http/protobuf``'s before it was shipped);
- ``files+otlp json``: files and OTLP over ``http/json`` posted from the engine's process
  (``PPTRACE_OTLP_SHIP=inline``): the trace-file encoder's lines, version 1, posted by
  ``pptrace.export.otlp_json.JsonShipper`` (the default before the file shipper);
- ``files+otlp shipped``: files and OTLP over ``http/json`` as it goes by default now: the
  process writes its trace file only, and the directory's shipper (``pptrace ship``, a process
  of its own, started by the traced process) posts from the file. Its CPU is not the traced
  process's: on a machine without a free core it still competes for one (the wall figure);
- ``files+otlp shipped protobuf``: the same over ``http/protobuf``: the shipper posts the
  spans as a protobuf request (``pptrace.export.otlp_proto``).

For the shipped variants the delivery line also gives the shipper process's own CPU time
(its start-up included), from ``wait4`` once it has exited.

Rounds alternate the variants (a rotated order each round), so that a change in the machine's
load hits them alike. Two figures: the work done in wall time (what the issue's targets
speak of; on a shared machine other processes' load moves it, round to round), and the work per
CPU second of the whole process, every pptrace thread included (on a machine with a free core
for the process, what pptrace's threads take of the one GIL; robust to other processes). The
collector is a local HTTP server in its own process that counts the
spans it receives (no parsing beyond that); the last columns compare them with the events the
run recorded and the OTLP sink confirmed (delivered once each: neither lost nor duplicated,
stats spans aside).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.server
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

VARIANTS = ("bare", "files", "files+otlp sdk", "files+otlp json", "files+otlp shipped",
            "files+otlp shipped protobuf")
PROTOCOL = {"files+otlp sdk": "http/protobuf", "files+otlp json": "http/json",
            "files+otlp shipped": "http/json", "files+otlp shipped protobuf": "http/protobuf"}
INLINE = ("files+otlp sdk", "files+otlp json")  # OTLP posted from the engine's process


# --- the collector (its own process) ------------------------------------------------------------


def _serve(port_out: Any, counts: Any) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    class Handler(http.server.BaseHTTPRequestHandler):
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
            with counts.get_lock():
                counts.value += spans
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


# --- one variant (a fresh process) --------------------------------------------------------------


def _work_unit() -> int:
    x = 0
    for i in range(200):
        x += i * i
    return x


def child(variant: str, rate: float, seconds: float, trace_dir: str) -> dict[str, Any]:
    """Run the work loop for one variant; its counts."""
    import torch

    from pptrace.engines.sglang_load import load_transport_module

    module = load_transport_module(allow_bare=True)
    if module is None:
        sys.exit("SGLang's transport module is not installed (pip install --no-deps sglang)")
    state: Any = None
    if variant != "bare":
        import pptrace
        from pptrace.activation import startup

        exporters = ("file",) if variant == "files" else ("file", "otlp")
        pptrace.instrument(exporters=exporters, trace_dir=trace_dir)
        state = startup._state

    class Output:
        named = {f"t{i}": torch.zeros(8, 4) for i in range(4)}

        def to_pp_tensors(self) -> Any:
            return self.named

    class Observer:
        def from_pp_tensors(self, tensors: Any) -> Any:
            return tensors

    attach = module.add_auxiliary_output_to_pp_tensors
    extract = module.pop_auxiliary_output_from_pp_tensors
    output, observer, token = Output(), Observer(), torch.zeros(4, dtype=torch.long)

    def loop(duration: float) -> tuple[int, int]:
        units = pairs = 0
        start = time.perf_counter()
        due, end, period = start, start + duration, 1.0 / rate
        now = start
        while now < end:
            _work_unit()
            units += 1
            now = time.perf_counter()
            if now >= due:
                tensors = {"next_token_ids": token}
                attach(tensors, output)
                extract(tensors, observer)
                pairs += 1
                due += period
        return units, pairs

    loop(1.0)  # warm-up: the sink opens, templates are made, the exporter connects
    cpu0 = time.process_time()
    units, pairs = loop(seconds)
    cpu = time.process_time() - cpu0  # every thread of the process: pptrace's included
    out: dict[str, Any] = {"units": units, "pairs": pairs, "cpu": cpu}
    if state is not None:
        import pptrace

        pptrace.uninstrument()
        stats = state.recorder.stats()
        processor = state.processor
        sent = getattr(processor, "sent_events", None)
        if sent is None and processor is not None:  # the SDK path counts spans, stats included
            sent = processor.sent
        if variant.startswith("files+otlp shipped"):  # the shipper's counts, once it is done
            from pptrace.export import ship_launch
            from pptrace.export.ship_launch import STATE_NAME, wait_for_shipper
            from pptrace.ship.state import ShipState

            wait_for_shipper(trace_dir, 120)
            shipper_cpu = 0.0
            for pid in list(ship_launch._started):  # this process started it: its rusage
                _, _, usage = os.wait4(pid, 0)
                shipper_cpu += usage.ru_utime + usage.ru_stime
            out["shipper_cpu"] = shipper_cpu
            totals = ShipState.load(os.path.join(trace_dir, STATE_NAME)).totals()
            sent = totals["events_sent"]
            stats = dataclasses.replace(stats, sink_dropped=(("otlp", totals["events_lost"]),))
        out.update(recorded=stats.recorded, dropped=stats.dropped,
                   sink_dropped=dict(stats.sink_dropped), otlp_confirmed=sent)
    return out


def run_child(variant: str, rate: float, seconds: float, endpoint: str) -> dict[str, Any]:
    env = dict(os.environ)
    for key in ("PPTRACE_ENABLED", "PPTRACE_EXPORT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        env.pop(key, None)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = PROTOCOL.get(variant, "http/json")
    env["PPTRACE_OTLP_SHIP"] = "inline" if variant in INLINE else "files"
    with tempfile.TemporaryDirectory(prefix="pptrace-bench-cost-") as tmp:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", variant, str(rate), str(seconds), tmp],
            env=env, capture_output=True, text=True, timeout=seconds * 4 + 120)
    if proc.returncode != 0:
        sys.exit(f"{variant} at {rate}/s failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,200", help="pairs a second (default 1000,200)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time a variant")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", nargs=4, metavar=("VARIANT", "RATE", "SECONDS", "DIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, rate, seconds, trace_dir = args.child
        print(json.dumps(child(variant, float(rate), float(seconds), trace_dir)))
        return
    variants = [v for v in args.variants.split(",") if v]
    if variants[0] != "bare":
        variants.insert(0, "bare")
    ctx = multiprocessing.get_context("spawn")
    port_q: Any = ctx.Queue()
    counts: Any = ctx.Value("q", 0)
    server = ctx.Process(target=_serve, args=(port_q, counts), daemon=True)
    server.start()
    endpoint = f"http://127.0.0.1:{port_q.get(timeout=30)}"
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}; {args.rounds} rounds x {args.seconds:g} s a variant")
    try:
        for rate in [float(r) for r in args.rates.split(",")]:
            ratios: dict[str, list[float]] = {v: [] for v in variants}
            cpu_ratios: dict[str, list[float]] = {v: [] for v in variants}
            delivery: dict[str, list[str]] = {v: [] for v in variants}
            for rnd in range(args.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                units: dict[str, int] = {}
                per_cpu: dict[str, float] = {}
                for variant in order:
                    before = counts.value
                    result = run_child(variant, rate, args.seconds, endpoint)
                    units[variant] = result["units"]
                    per_cpu[variant] = result["units"] / max(1e-9, result["cpu"])
                    if variant in PROTOCOL:
                        received = counts.value - before
                        delivery[variant].append(
                            f"recorded {result['recorded']}, dropped {result['dropped']}, "
                            f"otlp lost {result['sink_dropped'].get('otlp', 0)}, confirmed "
                            f"{result['otlp_confirmed']}, collector got {received} spans"
                            + (f", shipper CPU {result['shipper_cpu']:.2f} s"
                               if "shipper_cpu" in result else ""))
                for variant in variants:
                    ratios[variant].append(units[variant] / units["bare"])
                    cpu_ratios[variant].append(per_cpu[variant] / per_cpu["bare"])
            print(f"\n{rate:g} pairs/s, x the bare loop of the same round (median; min-max "
                  f"over {args.rounds} rounds): work done in {args.seconds:g} s of wall time; "
                  "work per CPU second of the whole process")
            for variant in variants:
                r, c = ratios[variant], cpu_ratios[variant]
                print(f"  {variant:<28} wall {statistics.median(r):5.3f}x "
                      f"({min(r):.3f}-{max(r):.3f})   cpu {statistics.median(c):5.3f}x "
                      f"({min(c):.3f}-{max(c):.3f})")
            for variant in variants:
                for line in delivery[variant]:
                    print(f"  {variant}: {line}")
    finally:
        server.terminate()
    print(f"\nload after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
