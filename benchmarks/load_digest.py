"""Differential check: a SHA-256 of everything ``load_paths`` gives for a trace, record by record.

Two versions of the loader read a trace alike when their digests agree: run it with each
(``PYTHONPATH`` set to a copy of main for the other), with and without the loader's worker.

    python benchmarks/load_digest.py /tmp/sc1m/m1000000-e300000-p16
    PPTRACE_LOAD_WORKERS=0 python benchmarks/load_digest.py DIR          # in one process
    PYTHONPATH=/tmp/base python benchmarks/load_digest.py DIR            # another pptrace
    python benchmarks/load_digest.py --no-sources DIR                    # files left out

Each process's rank, stats and files, then its events and messages, then the trace's foreign
spans, problems and files, each by its ``repr`` (hashes of ``None`` differ between processes).
"""

from __future__ import annotations

import argparse
import hashlib
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--no-sources", action="store_true",
                        help="leave each process's files out of the digest")
    args = parser.parse_args()
    from pptrace.load.loader import load_paths

    trace = load_paths(args.paths)
    h = hashlib.sha256()
    for p in trace.processes:
        h.update(repr((p.rank, p.stats) if args.no_sources else (p.rank, p.stats, p.sources))
                 .encode())
        for e in p.events:
            h.update(repr(e).encode())
        for m in p.messages:
            h.update(repr(m).encode())
    h.update(repr((trace.foreign, trace.problems, trace.sources)).encode())
    print(f"{h.hexdigest()} events={trace.event_count} "
          f"messages={sum(len(p.messages) for p in trace.processes)} "
          f"worker={'off' if os.environ.get('PPTRACE_LOAD_WORKERS') == '0' else 'on'}")


if __name__ == "__main__":
    main()
