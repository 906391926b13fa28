"""Regenerate the golden traces in this folder with pptrace's real exporter.

    python tests/data/make_golden.py

``golden-pp2/``: a pp=2 run of 6 microbatches through ``pptrace.export.spans`` (OTLP JSON lines, one
file per rank, as a traced run writes them), in which stage 0 received ``entropy`` as float16
from microbatch 4 on, and microbatch 2's send was skipped. The other formats are derived from it
by the loader tests at run time.
"""

from __future__ import annotations

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from helpers_analyze import golden_run  # noqa: E402

from pptrace.export.sinks import build_sink  # noqa: E402
from pptrace.model.config import Config  # noqa: E402


def main() -> None:
    out = os.path.join(HERE, "golden-pp2")
    shutil.rmtree(out, ignore_errors=True)
    trace = golden_run().trace()
    for proc in trace.processes:
        sink = build_sink(Config(trace_dir=out, run_id="golden"), proc.rank)
        sink.export(list(proc.events))
        assert proc.stats is not None
        sink.export_stats(proc.stats)
        sink.shutdown(1.0)


if __name__ == "__main__":
    main()
