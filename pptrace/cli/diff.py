"""``pptrace diff A B``: compare the auxiliary-output protocol of two runs.

Each side is read as ``analyze`` reads its inputs (``pptrace.cli.inputs``): a file, a directory
or a glob, or a Jaeger query URL (``http://jaeger:16686#SERVICE``) with the same window options,
with the same progress on stderr.

Exit status: 0 when nothing differs, 1 when something does, 2 when an input is unusable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pptrace.analyze.analyzer import analyze
from pptrace.cli.inputs import (
    Inputs,
    add_jaeger_arguments,
    add_progress_argument,
    input_paths,
    jaeger_query,
    load_trace,
)
from pptrace.cli.progress import Status, text_width
from pptrace.model.trace import Trace
from pptrace.report.diff import CHANGE_RULE, JSON_SCHEMA, diff, profile, render_text, to_json

__all__ = ["add_parser", "run"]

EPILOG = f"""\
A and B are each a trace file, a directory of per-rank files, a glob (quote it), or the URL of
Jaeger's query service: http://jaeger:16686 reads service --jaeger-service in the window of the
--jaeger-* options, http://jaeger:16686#NAME service NAME (two services of one Jaeger, say).

Compared: the PP/TP layout; the auxiliary names per direction; each name's dtype and shape
pattern (a dimension that varies within a run, like the batch, shows as *); the mean payload
bytes per step; the message layer where it was recorded (per message kind: its sends, its keys,
each key's dtype and shape pattern, /tp for TP slices); engine errors and analyzer findings per
kind. The table's columns are A and B.
{CHANGE_RULE[0].upper()}{CHANGE_RULE[1:]}.

exit status: 0 no difference, 1 differences, 2 unusable input.
--format json writes {{"schema": "{JSON_SCHEMA}", "a", "b", "differences", "rule", "rows":
[{{"section", "subject", "a", "b", "changed"}}]}}.

examples:
  pptrace diff traces-good/ traces-bad/
  pptrace diff traces-good/ 'http://jaeger:16686#pptrace-bad' --jaeger-since 2h
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
    parser.add_argument("a", metavar="A", help="the first run's traces (a path or a Jaeger URL)")
    parser.add_argument("b", metavar="B", help="the second run's traces (a path or a Jaeger URL)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people (default) or json")
    add_progress_argument(parser)
    add_jaeger_arguments(parser, url=False)
    parser.set_defaults(func=run)
    return parser


def _side(where: str, args: argparse.Namespace) -> Inputs:
    """One side's inputs: a Jaeger URL, else a path."""
    if where.startswith(("http://", "https://")):
        return Inputs(jaeger=jaeger_query(where, args), quiet=args.no_progress)
    return Inputs(paths=(where,), quiet=args.no_progress)


def _load(inputs: Inputs, status: Status) -> Trace:
    with input_paths(inputs) as paths:
        return load_trace(paths, status)


def run(args: argparse.Namespace) -> int:
    """Load both runs, compare, print; return the exit status."""
    a, b = _side(args.a, args), _side(args.b, args)  # both checked before either is read
    status = Status(None if args.no_progress else sys.stderr)
    ta = _load(a, status)
    tb = _load(b, status)
    status.stage(f"pptrace: analyzing {ta.event_count + tb.event_count:,} events")
    rows = diff(profile(ta, analyze(ta)), profile(tb, analyze(tb)))
    status.end()
    if args.format == "json":
        json.dump(to_json(rows, args.a, args.b), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(rows, args.a, args.b, columns=text_width(sys.stdout)))
    return 1 if any(r.changed for r in rows) else 0
