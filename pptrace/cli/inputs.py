"""Input arguments shared by the commands that read traces (``analyze``, ``view``).

    add_input_arguments(parser)        # PATH... and --no-progress
    trace = load_from_args(args)       # progress on stderr when it is a terminal

Loading itself lives in ``pptrace.load.loader`` and takes paths, never this namespace.
"""

from __future__ import annotations

import argparse
import sys

from pptrace.load.jaeger_fetch import add_jaeger_arguments, jaeger_paths
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from pptrace.model.progress import TerminalProgress
from pptrace.model.trace import Trace

__all__ = ["add_input_arguments", "input_paths", "load_from_args"]

INPUT_HELP = (
    "trace files, directories of per-rank files, or glob patterns: pptrace's own OTLP JSON "
    "lines, an OTLP JSON TracesData document, a Jaeger v3 API response ({\"result\": ...}) or "
    "Jaeger JSON ({\"data\": [...]})"
)


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``PATH...`` and ``--no-progress`` to a command's parser."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help=INPUT_HELP)
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="do not show loading progress (shown on a terminal only)",
    )
    add_jaeger_arguments(parser)  # --jaeger URL and its window: see pptrace.load.jaeger_fetch


def input_paths(args: argparse.Namespace) -> list[str]:
    """The paths given on the command line; one-line error when there are none."""
    paths = list(getattr(args, "paths", None) or [])
    paths += jaeger_paths(args)  # with --jaeger: fetched once into a temporary file
    if not paths:
        raise TraceInputError(
            "no input: give trace files, directories or glob patterns, or --jaeger URL")
    return paths


def load_from_args(args: argparse.Namespace) -> Trace:
    """Load the trace the arguments name, with progress on stderr when it is a terminal."""
    paths = input_paths(args)
    progress = None
    if not getattr(args, "no_progress", False) and sys.stderr.isatty():
        progress = TerminalProgress(sys.stderr)
    try:
        return load_paths(paths, progress=progress)
    finally:
        if progress is not None:
            progress.close()
