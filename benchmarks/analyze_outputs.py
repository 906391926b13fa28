"""Differential check: ``pptrace analyze`` over every sample fault trace, saved, then compared.

Runs the sample pipeline once per fault with the options the tests use
(tests/test_analyze_faults.py, tests/test_analyze_messages_samples.py,
tests/test_messages_samples.py), plus the healthy runs and fingerprint-off variants of the TP
faults; keeps the traces, and writes what ``pptrace analyze`` says of each (``--format json
--max-per-kind 0``, and the default text) into a folder. Run it before and after an analyzer
change and compare the two folders byte for byte: every difference is then one to explain.

    python benchmarks/analyze_outputs.py --traces /tmp/tr --out /tmp/before  # runs what's missing
    python benchmarks/analyze_outputs.py --traces /tmp/tr --out /tmp/after   # the same traces
    python benchmarks/analyze_outputs.py --compare /tmp/before /tmp/after    # 1 on a difference

The traces are made once (a case whose folder already holds traces is not run again), so both
analyses read the same bytes; the runs take a few seconds each (real gloo processes).
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def _cases() -> dict[str, dict[str, Any]]:
    """Case name -> the sample pipeline's options (``PipelineOptions`` fields)."""
    from pptrace_samples.faults import FAULTS

    cases: dict[str, dict[str, Any]] = {}
    for ranks, tp in ((2, 1), (3, 1), (4, 2)):  # the healthy runs
        cases[f"healthy-{ranks}x{tp}"] = {"ranks": ranks, "tp": tp, "steps": 6}
    for name, fault in FAULTS.items():  # as tests/test_analyze_faults.py runs them
        cases[name] = {"ranks": 4 if fault.needs_tp > 1 else 2, "steps": 6, "fault": name}
    # as tests/test_analyze_messages_samples.py and tests/test_messages_samples.py run them
    cases["key-dropped"] = {"ranks": 3, "steps": 6, "fault": "key-dropped"}
    cases["tp-slice-not-replicated"] = {"ranks": 4, "steps": 6,
                                        "fault": "tp-slice-not-replicated"}
    cases["wrong-kind-delivered"] = {"ranks": 2, "steps": 6, "fault": "wrong-kind-delivered",
                                     "comm_timeout": 4.0}
    cases["recv-hangs"] = {"ranks": 2, "steps": 4, "fault": "recv-hangs", "comm_timeout": 4.0}
    cases["wrong-gather-group"] = {"ranks": 4, "tp": 2, "steps": 6,
                                   "fault": "wrong-gather-group", "fault_at": 2}
    # Without fingerprints the TP checks can compare shapes and dtypes only.
    for name in ("tp-disagree", "tp-slice-not-replicated", "healthy-4x2"):
        cases[f"{name}-nofp"] = {**cases[name], "fingerprint": False}
    return cases


def make_traces(root: Path, cases: dict[str, dict[str, Any]]) -> None:
    """Run the sample pipeline for each case whose folder holds no trace yet."""
    from pptrace_samples.launch import run_pipeline
    from pptrace_samples.options import PipelineOptions

    for name, options in cases.items():
        out = root / name
        if out.is_dir() and any(out.iterdir()):
            continue
        result = run_pipeline(PipelineOptions(out_dir=str(out), **options), timeout=90)
        print(f"{name}: ran (ok={result.ok})", file=sys.stderr)


def analyze_all(root: Path, dest: Path, cases: dict[str, dict[str, Any]]) -> None:
    """Write ``pptrace analyze``'s JSON and text for each case's traces into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "100"}
    for name in cases:
        for fmt, extra in (("json", ["--max-per-kind", "0"]), ("text", [])):
            got = subprocess.run(
                [sys.executable, "-m", "pptrace", "analyze", "--no-progress", "--format", fmt,
                 *extra, str(root / name)], capture_output=True, env=env, check=False)
            # The trace path is this machine's: name it by the case instead.
            out = got.stdout.replace(str(root).encode(), b"TRACES")
            (dest / f"{name}.{fmt}").write_bytes(out + f"\nexit {got.returncode}\n".encode())
        print(f"{name}: analyzed", file=sys.stderr)


def compare(a: Path, b: Path) -> int:
    """Print each file that differs between two output folders, as a diff; 1 if any does."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = 0
    for name in names:
        x, y = a / name, b / name
        if x.is_file() and y.is_file() and x.read_bytes() == y.read_bytes():
            continue
        differ += 1
        left = x.read_text().splitlines() if x.is_file() else []
        right = y.read_text().splitlines() if y.is_file() else []
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
            left, right, str(x), str(y), lineterm="", n=1))
    print(f"{len(names) - differ} of {len(names)} outputs identical, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, help="folder of the cases' traces (made if missing)")
    parser.add_argument("--out", type=Path, help="folder to write the analyses into")
    parser.add_argument("--only", nargs="*", default=None, help="these cases only")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.traces is None or args.out is None:
        parser.error("--traces and --out are needed (or --compare A B)")
    cases = _cases()
    if args.only:
        cases = {name: cases[name] for name in args.only}
    make_traces(args.traces, cases)
    analyze_all(args.traces, args.out, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
