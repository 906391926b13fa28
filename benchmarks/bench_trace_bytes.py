"""Disk per traced call: a real demo run's trace files, divided by the calls they record.

A traced call is an attach, an extract, a message sent or a receive (one call, however many
spans the file spends on it). The demo runs once per ``--compress`` value, with the same seed
and steps; the files' bytes are summed and divided by the calls the loaded trace holds. It also
prints the spans the files hold per call, and how many receives kept a separate begin span.

    python benchmarks/bench_trace_bytes.py --steps 200
    python benchmarks/bench_trace_bytes.py --steps 200 --compress none gzip zstd
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from pptrace.load.compressed import CompressedLines, compression_of
from pptrace.load.loader import load_paths
from pptrace.model.messages import MessageOp


def measure(directory: str) -> dict[str, int]:
    """Bytes, calls and spans of the trace files in ``directory``."""
    trace = load_paths([directory])
    files = [os.path.join(directory, f) for f in os.listdir(directory)]
    size = sum(os.path.getsize(f) for f in files)
    # Begin spans as written (the loaded trace has a begin for every receive that had one).
    written = sum(_text(f).count(b'"name":"pptrace.recv.begin"') for f in files)
    events = sum(len(p.events) for p in trace.processes)
    sends = receives = 0
    for p in trace.processes:
        for m in p.messages:
            if m.op is MessageOp.SEND:
                sends += 1
            elif m.phase == "end":
                receives += 1
    return {"bytes": size, "calls": events + sends + receives, "events": events,
            "sends": sends, "receives": receives, "begins": written}


def _text(path: str) -> bytes:
    """A trace file's lines, decompressed as the loader does (every gzip member, zstd frame)."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        kind = compression_of(head)
        if kind is None:
            return f.read()
        return b"".join(CompressedLines(f, kind, path).pieces())


def run_demo(out: str, steps: int, compress: str, seed: int) -> None:
    """One demo run writing its traces to ``out``."""
    cmd = [sys.executable, "-m", "pptrace", "demo", "--steps", str(steps), "--out", out,
           "--compress", compress, "--seed", str(seed), "--no-analyze", "--no-view"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    """Run the demo per compression and print bytes per traced call."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compress", nargs="+", default=["none", "gzip"])
    args = ap.parse_args()
    print(f"{'compress':>8} {'bytes':>10} {'calls':>6} {'B/call':>8}  "
          "(attach+extract, sends, receives; begin spans written)")
    for compress in args.compress:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "demo")
            run_demo(out, args.steps, compress, args.seed)
            r = measure(out)
        print(f"{compress:>8} {r['bytes']:>10} {r['calls']:>6} {r['bytes'] / r['calls']:>8.1f}  "
              f"({r['events']}, {r['sends']}, {r['receives']}; {r['begins']})")


if __name__ == "__main__":
    main()
