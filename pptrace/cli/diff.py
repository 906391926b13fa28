"""``pptrace diff A B``: compare the auxiliary-output protocol of two runs.

Exit status: 0 when nothing differs, 1 when something does, 2 when an input is unusable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.report.diff import JSON_SCHEMA, diff, profile, render_text, to_json

__all__ = ["add_parser", "run"]

EPILOG = f"""\
A and B are each a trace file, a directory of per-rank files, or a glob (quote it).

Compared: the PP/TP layout; the auxiliary names per direction; each name's dtype and shape
pattern (a dimension that varies within a run, like the batch, shows as *); the mean payload
bytes per step; engine errors and analyzer findings per kind.

exit status: 0 no difference, 1 differences, 2 unusable input.
--format json writes {{"schema": "{JSON_SCHEMA}", "a", "b", "differences", "rows": [{{"section",
"subject", "a", "b", "changed"}}]}}.

example:
  pptrace diff traces-good/ traces-bad/
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``diff`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diff",
        help="compare two runs: names, shapes, dtypes, bytes per step, errors",
        description="Compare the auxiliary-output protocol of two traced runs "
        "(a good and a bad commit; pp=2 against pp=4).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A", help="the first run's traces")
    parser.add_argument("b", metavar="B", help="the second run's traces")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people (default) or json")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Load both runs, compare, print; return the exit status."""
    ta, tb = load_paths([args.a]), load_paths([args.b])
    rows = diff(profile(ta, analyze(ta)), profile(tb, analyze(tb)))
    if args.format == "json":
        json.dump(to_json(rows, args.a, args.b), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(rows, args.a, args.b))
    return 1 if any(r.changed for r in rows) else 0
