"""``pptrace analyze [PATH...]``: find where the auxiliary-output protocol broke, across ranks.

With no path (and no ``--jaeger``) it reads ``./pptrace-traces``.

Exit status: 0 clean, 1 findings at or above ``--fail-on``, 2 unusable input (one line on
stderr, printed by ``pptrace.cli.main``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pptrace.analyze.analyzer import analysis
from pptrace.cli.inputs import add_input_arguments, input_paths, inputs_from_args, load_trace
from pptrace.cli.progress import Status, text_width
from pptrace.model.findings import Severity
from pptrace.report.text import JSON_SCHEMA, PER_KIND, exit_status, render_text, to_json

__all__ = ["add_parser", "run"]

EPILOG = f"""\
exit status: 0 no findings at or above --fail-on, 1 findings at or above it, 2 unusable input.

The JSON report (--format json) has "schema": "{JSON_SCHEMA}", a "summary" (every finding
counted), the "processes" read, the "findings" (kind, severity, message, ranks, microbatch,
time_ns, channel, cascade, events, cause), "truncated" (null, or what --max-per-kind left out)
and the input "problems" that were skipped. See the README for the full schema.

Large inputs: with two or more cores and 32 MB or more in several files, a second process reads
half of them (the result is the same; PPTRACE_LOAD_WORKERS=0 reads in this process only).

examples:
  pptrace analyze                           # reads ./pptrace-traces
  pptrace analyze pptrace-traces/
  pptrace analyze 'traces/*.jsonl' --format json --fail-on warning > report.json
  pptrace analyze jaeger-download.json
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``analyze`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "analyze",
        help="check recorded traces for protocol mismatches and key collisions",
        description=(
            "Load traces from every rank and check the auxiliary-output protocol across ranks: "
            "engine errors, attaches on the last stage paired with extracts on stage 0 "
            "(names, order, shape, dtype, bytes, device type, content), TP ranks agreeing, "
            "namespace collisions, recorder losses, and the PP message layer where it was "
            "recorded (each send with its receive: keys, tensors, kinds, TP slices, stashes; "
            "a receive that never returned, and what its peer last sent)."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people (default) or json for CI")
    parser.add_argument("--fail-on", choices=("info", "warning", "error"), default="error",
                        help="exit 1 when a finding is at least this severe (default: error)")
    parser.add_argument("--max-per-kind", type=_count, default=PER_KIND, metavar="N",
                        help=f"list at most N findings of a kind, in text and JSON (default "
                        f"{PER_KIND}; 0: every one)")
    parser.set_defaults(func=run)
    return parser


def _count(text: str) -> int:
    """A whole number 0 or more (argparse prints the message as one line)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number 0 or more")
    return n


def run(args: argparse.Namespace) -> int:
    """Load, analyze, print the report; return the exit status."""
    fail_on = Severity.parse(args.fail_on)
    inputs = inputs_from_args(args)
    status = Status(None if inputs.quiet else sys.stderr)
    with input_paths(inputs) as paths:
        trace = load_trace(paths, status)
    status.stage(f"pptrace: analyzing {trace.event_count:,} events")
    result = analysis(trace)
    # The trace the findings were judged on: its wall-clock times aligned (result.clocks).
    trace, clocks, findings = result.trace, result.clocks, list(result.findings)
    status.end()
    per_kind = args.max_per_kind if args.max_per_kind > 0 else None
    if args.format == "json":
        json.dump(to_json(trace, findings, fail_on, per_kind=per_kind, clocks=clocks),
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(trace, findings, fail_on, per_kind=per_kind,
                                     width=text_width(sys.stdout), clocks=clocks))
    return exit_status(findings, fail_on)
