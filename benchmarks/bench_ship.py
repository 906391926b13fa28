"""The OTLP shipper's CPU an event: ``pptrace ship DIR`` on a real trace file, side by side.

    python benchmarks/bench_ship.py                                  # http/json and http/protobuf
    git archive main | tar -x -C /tmp/shipbase                       # the tree before, to compare:
    python benchmarks/bench_ship.py --base /tmp/shipbase --rounds 4
    python benchmarks/bench_ship.py --profile http/protobuf          # cProfile of one shipper
    python benchmarks/bench_ship.py --base /tmp/shipbase --stages    # re-encoding + body only

The trace file is a real one: ``bench_engine_cost.py``'s work loop (SGLang's real transport
module, 4 tensors) traced with files only at ``--rate`` pairs a second for ``--seconds``, its
process ended (a final stats span). Each measured run copies that directory afresh (no state
file), starts a local collector's slot and runs ``python -m pptrace ship DIR --linger 0`` to it
(the tree's pptrace first on ``PYTHONPATH``), and takes the shipper's CPU from ``wait4`` (user +
system, start-up included: about half a second of imports) and its wall time; the trees and the
protocols take turns, round after round. The shipper's ``random`` is seeded the same in every
run, so its span ids are the same and the request bodies of two trees can be compared whole: the
collector keeps a digest of each body and the report says whether both trees posted the same
bytes in the same requests (what a change to the shipper's speed must keep), and how many spans
the collector got against the events and stats spans the state file counts delivered.

``--stages`` measures the re-encoding and the request's body alone, in a process of each tree
(no posting, no state file): the CPU an event of ``Reencoder.line`` and ``Poster.body`` over
the file's first 400 lines (50 first, to learn the templates, not counted).
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROTOCOLS = ("http/json", "http/protobuf")
#: The shipper as ``pptrace ship`` runs it, its ids drawn from a seeded ``random``.
_SHIP = """
import random, sys
random.seed(25)
from pptrace.cli.main import main
sys.exit(main(["ship", sys.argv[1], "--linger", "0"]))
"""
_STAGES = """
import inspect, random, sys, time
from pptrace.ship.reencode import Reencoder
from pptrace.export.otlp_json import Poster, Target
protobuf = sys.argv[2] == "http/protobuf"  # the tree before had no protobuf from values
kw = {"protobuf": True} if protobuf and "protobuf" in inspect.signature(Reencoder).parameters \
    else {}
random.seed(25)
reencoder, poster = Reencoder(**kw), Poster(Target("http://127.0.0.1:9", protocol=sys.argv[2]))
with open(sys.argv[1], encoding="ascii") as f:
    lines = [next(f).rstrip() for _ in range(400)]
for line in lines[:50]:
    poster.body(reencoder.line(line).lines)
began, events = time.process_time(), 0
for line in lines[50:]:
    got = reencoder.line(line)
    events += got.events
    poster.body(got.lines)
print((time.process_time() - began) / events * 1e6)
"""
_PROFILE = """
import cProfile, pstats, random, sys
random.seed(25)
from pptrace.cli.main import main
profiler = cProfile.Profile()
profiler.enable()
main(["ship", sys.argv[1], "--linger", "0"])
profiler.disable()
pstats.Stats(profiler).sort_stats(sys.argv[2]).print_stats(int(sys.argv[3]))
"""


class Collector:
    """A local OTLP/HTTP collector: per slot (``/SLOT/v1/traces``), each body's digest and the
    spans it held."""

    def __init__(self) -> None:
        self.digests: dict[int, list[str]] = {}
        self.spans: dict[int, int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The answer's head and body in one write, as a collector sends them: written apart, the
            # body waits for the head's ACK, which the client delays (40 ms a request).
            wbufsize = -1

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                slot = int(self.path.strip("/").split("/")[0])
                if self.headers.get("Content-Type") == "application/json":
                    spans, out = body.count(b'"spanId"'), b"{}"
                else:
                    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    spans = sum(len(ss.spans) for rs in request.resource_spans
                                for ss in rs.scope_spans)
                    out = b""
                with outer._lock:
                    outer.digests.setdefault(slot, []).append(hashlib.sha256(body).hexdigest())
                    outer.spans[slot] = outer.spans.get(slot, 0) + spans
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def make_trace(dest: str, rate: float, seconds: float) -> None:
    """A finished trace directory from ``bench_engine_cost.py``'s loop, traced with files."""
    sys.path.insert(0, HERE)
    import bench_engine_cost

    env = bench_engine_cost._env("files", "http://127.0.0.1:9")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "bench_engine_cost.py"), "--child", "files",
         str(rate), dest], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(dest))
    out, _ = proc.communicate(f"slice 0 {seconds}\nend\n", timeout=seconds + 120)
    if proc.returncode:
        sys.exit(f"the traced loop failed ({proc.returncode})")
    print(f"trace: {json.loads(out.splitlines()[-1])}")


def _env(tree: str, url: str, protocol: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PPTRACE_"))}
    env["PYTHONPATH"] = tree
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
    return env


def ship_once(tree: str, trace: str, work: str, url: str, protocol: str) -> dict[str, Any]:
    """One ``pptrace ship`` of a fresh copy of ``trace``: its CPU, wall time and counts."""
    target = os.path.join(work, "run")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(trace, target)
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _SHIP, target], env=_env(tree, url, protocol),
                            cwd=work)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"pptrace ship failed ({proc.returncode}) with {tree}")
    with open(os.path.join(target, "pptrace-ship.state")) as f:
        totals = json.load(f)["totals"]
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "totals": totals}


def stages(trees: dict[str, str], protocols: list[str], path: str, rounds: int) -> None:
    """Print each tree's CPU an event for re-encoding and the body, trees alternating."""
    got: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for protocol in protocols:
            for name, tree in trees.items():
                out = subprocess.run([sys.executable, "-c", _STAGES, path, protocol],
                                     env=_env(tree, "http://127.0.0.1:9", protocol), check=True,
                                     capture_output=True, text=True, cwd=os.path.dirname(path))
                got.setdefault((name, protocol), []).append(float(out.stdout))
    for (name, protocol), values in got.items():
        print(f"{protocol:<14} {name:<5} re-encoding + body: "
              f"{', '.join(f'{v:.1f}' for v in values)} µs an event")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=1000, help="pairs a second (default 1000)")
    parser.add_argument("--seconds", type=float, default=20,
                        help="seconds of the traced loop (default 20: some 40,000 events)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree and protocol")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--base", metavar="DIR", help="also run the pptrace of DIR (a `git "
                        "archive` of another commit), in the same rounds")
    parser.add_argument("--trace", metavar="DIR", help="the finished trace directory to ship "
                        "(made there first when it does not exist; default: a temporary one)")
    parser.add_argument("--profile", metavar="PROTOCOL", help="cProfile one shipper; print it")
    parser.add_argument("--sort", default="tottime", help="the profile's order (tottime)")
    parser.add_argument("--stages", action="store_true",
                        help="the re-encoding and the body alone, µs an event, each tree")
    args = parser.parse_args()
    protocols = [p for p in args.protocols.split(",") if p]
    trees = {"now": ROOT, **({"base": os.path.abspath(args.base)} if args.base else {})}
    collector = Collector()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="pptrace-bench-ship-") as work:
        trace = args.trace or os.path.join(work, "trace")
        if not os.path.isdir(trace):
            make_trace(os.path.abspath(trace), args.rate, args.seconds)
        names = [n for n in os.listdir(trace) if n.startswith("pptrace-rank")]
        sizes = [f"{n} ({os.path.getsize(os.path.join(trace, n)):,} B)" for n in sorted(names)]
        print(f"trace files: {', '.join(sizes)}")
        if args.profile:
            target = os.path.join(work, "run")
            shutil.copytree(trace, target)
            subprocess.run([sys.executable, "-c", _PROFILE, target, args.sort, "40"],
                           env=_env(ROOT, f"{collector.url}/0", args.profile), cwd=work,
                           check=True)
            return
        if args.stages:
            stages(trees, protocols, os.path.join(trace, sorted(names)[0]), args.rounds)
            return
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        slots: dict[tuple[str, str, int], int] = {}
        for rnd in range(args.rounds):
            order = list(trees.items())
            if rnd % 2:
                order.reverse()
            for protocol in protocols:
                for name, tree in order:
                    slot = slots[(name, protocol, rnd)] = len(slots)
                    runs.setdefault((name, protocol), []).append(
                        ship_once(tree, trace, work, f"{collector.url}/{slot}", protocol))
    rounds = range(args.rounds)
    for protocol in protocols:
        print(f"\n{protocol}:")
        for name in trees:
            got = runs[(name, protocol)]
            events = got[0]["totals"]["events_sent"]
            cpu = [g["cpu"] for g in got]
            print(f"  {name:<5} CPU {statistics.median(cpu):.3f} s "
                  f"({', '.join(f'{c:.2f}' for c in cpu)}), "
                  f"{statistics.median(cpu) / max(1, events) * 1e6:.1f} µs an event; wall "
                  f"{statistics.median(g['wall'] for g in got):.2f} s; "
                  f"{events} events, {got[0]['totals']['stats_sent']} stats spans delivered, "
                  f"{got[0]['totals']['events_lost']} lost; collector got "
                  f"{[collector.spans.get(slots[(name, protocol, r)], 0) for r in rounds]} spans")
        bodies = {name: [collector.digests.get(slots[(name, protocol, r)], [])
                         for r in range(args.rounds)] for name in trees}
        for name, per_round in bodies.items():
            same = all(b == per_round[0] for b in per_round)
            print(f"  {name}: {len(per_round[0])} requests a run; every run's bodies the same: "
                  f"{same}")
        if "base" in bodies:
            print(f"  now and base posted the same bytes in the same requests: "
                  f"{bodies['now'][0] == bodies['base'][0]}")
    print(f"\nload after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
