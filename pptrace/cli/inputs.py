"""The trace inputs of the commands that read traces (``analyze``, ``view``, ``diff``).

The options become typed values here (``Inputs``, a ``JaegerQuery``), and only those go down:
the loader takes paths and a progress callback, the Jaeger client a query.

    add_input_arguments(parser)                       # PATH..., --no-progress, --jaeger...
    inputs = inputs_from_args(args)                   # one-line error for a bad option
    status = Status(None if inputs.quiet else sys.stderr)
    with input_paths(inputs) as paths:                # Jaeger's spans in a temporary file
        trace = load_trace(paths, status)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from pptrace.cli.progress import Status
from pptrace.load.files import TRACE_SUFFIXES
from pptrace.load.jaeger_fetch import MAX_ANSWER_BYTES, JaegerQuery, fetch_to_file
from pptrace.load.loader import load_paths
from pptrace.model.errors import ConfigError, TraceInputError
from pptrace.model.trace import Trace

__all__ = [
    "DEFAULT_DIR",
    "Inputs",
    "add_input_arguments",
    "add_jaeger_arguments",
    "input_paths",
    "inputs_from_args",
    "jaeger_query",
    "load_trace",
    "parse_duration",
    "parse_time",
]

#: Where ``pptrace run`` writes traces by default; what ``analyze``/``view`` read without a path.
DEFAULT_DIR = "pptrace-traces"

INPUT_HELP = (
    "trace files, directories of per-rank files, or glob patterns: pptrace's own OTLP JSON "
    "lines, an OTLP JSON TracesData document, a Jaeger v3 API response ({\"result\": ...}) or "
    f"Jaeger JSON ({{\"data\": [...]}}), each plain or gzip/zstd-compressed; default "
    f"./{DEFAULT_DIR}"
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a command reads: paths, and spans fetched from Jaeger."""

    paths: tuple[str, ...] = ()
    jaeger: JaegerQuery | None = None
    quiet: bool = False  # --no-progress


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``PATH...``, ``--no-progress`` and the ``--jaeger`` options to a command's parser."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help=INPUT_HELP)
    add_progress_argument(parser)
    add_jaeger_arguments(parser)


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--no-progress``."""
    parser.add_argument(
        "--no-progress", action="store_true",
        help="write no progress on stderr (a status line on a terminal; elsewhere one line for "
             "each stage that takes a second or more)")


def add_jaeger_arguments(parser: argparse.ArgumentParser, *, url: bool = True) -> None:
    """Add ``--jaeger URL`` (unless ``url`` is False) and its service and window options."""
    g = parser.add_argument_group(
        "reading from Jaeger",
        "Fetch pptrace's spans from Jaeger's query service (API v3, else /api/traces) instead "
        "of, or beside, trace files.")
    if url:
        g.add_argument("--jaeger", metavar="URL",
                       help="Jaeger's query service, e.g. http://localhost:16686")
    g.add_argument("--jaeger-service", default="pptrace", metavar="NAME",
                   help="service name of the spans (OTEL_SERVICE_NAME of the run; default pptrace)")
    g.add_argument("--jaeger-since", default="1h", metavar="DURATION",
                   help="how far back to look, e.g. 30m, 2h, 1d (default 1h)")
    g.add_argument("--jaeger-start", metavar="TIME",
                   help="window start, ISO 8601 (overrides --jaeger-since)")
    g.add_argument("--jaeger-end", metavar="TIME", help="window end, ISO 8601 (default now)")
    g.add_argument("--jaeger-limit", type=int, default=1000, metavar="N",
                   help="most traces to fetch (default 1000; every pptrace span is a trace)")
    g.add_argument("--jaeger-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="deadline of each whole request: connecting, headers and body "
                        "(default 10)")
    g.add_argument("--jaeger-max-mb", type=float, default=MAX_ANSWER_BYTES / (1 << 20),
                   metavar="MB",
                   help=f"most of one answer to read (default {MAX_ANSWER_BYTES >> 20}; a larger "
                        "answer is an error, never read)")


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d`` (or plain seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise ConfigError(f"duration {text!r}: expected e.g. 30m, 2h, 1d")
    return float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)


def parse_time(text: str) -> int:
    """An ISO 8601 time (UTC when no zone is given) -> nanoseconds since the epoch."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"time {text!r}: expected ISO 8601, e.g. 2026-11-29T16:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def jaeger_query(url: str | None, args: argparse.Namespace,
                 now_ns: int | None = None) -> JaegerQuery | None:
    """The query for Jaeger at ``url`` that the window options describe; None without a URL.

    ``URL#NAME`` asks for service NAME (``pptrace diff`` compares two services this way).
    """
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--jaeger {url!r}: expected an http:// or https:// URL")
    base, _, service = url.partition("#")
    now_ns = time.time_ns() if now_ns is None else now_ns
    end = parse_time(args.jaeger_end) if args.jaeger_end else now_ns
    start = parse_time(args.jaeger_start) if args.jaeger_start else end - int(
        parse_duration(args.jaeger_since) * 1e9)
    if start >= end:
        raise ConfigError("--jaeger-start must be before --jaeger-end")
    if args.jaeger_limit < 1 or args.jaeger_timeout <= 0 or not args.jaeger_max_mb > 0:
        raise ConfigError("--jaeger-limit, --jaeger-timeout and --jaeger-max-mb must be positive")
    return JaegerQuery(url=base, service=service or args.jaeger_service, start_ns=start,
                       end_ns=end, limit=args.jaeger_limit, timeout=args.jaeger_timeout,
                       max_bytes=int(args.jaeger_max_mb * (1 << 20)))


def inputs_from_args(args: argparse.Namespace, *, follow: bool = False) -> Inputs:
    """The inputs the options name; without any, ``./pptrace-traces`` (see ``default_paths``)."""
    query = jaeger_query(getattr(args, "jaeger", None), args)
    paths = tuple(args.paths or ())
    if not paths and query is None:
        paths = default_paths(follow=follow)
    return Inputs(paths=paths, jaeger=query, quiet=bool(args.no_progress))


def default_paths(*, follow: bool = False, here: str = ".") -> tuple[str, ...]:
    """``./pptrace-traces`` when it exists; one-line error when it does not (``--follow`` waits
    for it). A directory that holds no trace files but run directories (``pptrace demo``
    writes ``pptrace-traces/demo-<time>/``) gives its newest run, said on stderr."""
    path = os.path.join(here, DEFAULT_DIR) if here != "." else DEFAULT_DIR
    if not os.path.isdir(path):
        if follow:
            return (path,)
        raise TraceInputError(
            f"no input: give trace files, directories or glob patterns, or --jaeger URL "
            f"(./{DEFAULT_DIR}, read by default, does not exist here)")
    if follow or _has_traces(path):
        return (path,)
    runs = [os.path.join(path, n) for n in os.listdir(path)
            if os.path.isdir(os.path.join(path, n)) and _has_traces(os.path.join(path, n))]
    if not runs:
        return (path,)  # the loader says what is wrong with it
    newest = max(runs, key=lambda p: (os.stat(p).st_mtime_ns, p))
    print(f"pptrace: reading {newest} (the newest run in ./{DEFAULT_DIR})", file=sys.stderr)
    return (newest,)


def _has_traces(directory: str) -> bool:
    try:
        return any(n.endswith(TRACE_SUFFIXES) for n in os.listdir(directory))
    except OSError:
        return False


@contextlib.contextmanager
def input_paths(inputs: Inputs) -> Iterator[list[str]]:
    """The paths to read: the named ones, then Jaeger's spans fetched into a temporary file
    (removed when the block ends)."""
    paths = list(inputs.paths)
    with contextlib.ExitStack() as stack:
        if inputs.jaeger is not None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pptrace-jaeger-"))
            paths.append(fetch_to_file(inputs.jaeger, tmp))
        yield paths


def load_trace(paths: Sequence[str], status: Status, *, allow_empty: bool = False) -> Trace:
    """Load ``paths`` with progress on ``status``; ``allow_empty``: see ``load_paths``."""
    try:
        return load_paths(paths, progress=status.loading(), allow_empty=allow_empty)
    finally:
        status.end()
