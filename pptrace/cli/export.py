"""``pptrace export --perfetto OUT.json [PATH...]``: write traces for ui.perfetto.dev.

The inputs are read as ``analyze`` reads them (``pptrace.cli.inputs``: files, directories, globs,
``--jaeger``; with none, ``./pptrace-traces``), analyzed, and written as Chrome trace-event JSON
(``pptrace.report.perfetto``). The file is written beside its final name and renamed into place,
so a reader never sees half of it; ``-`` writes to stdout.

Exit status: 0 written, 2 unusable input or output (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
from collections.abc import Sequence
from typing import IO, Any

from pptrace.analyze.analyzer import analysis
from pptrace.cli.inputs import add_input_arguments, input_paths, inputs_from_args, load_trace
from pptrace.cli.progress import Status
from pptrace.model.errors import ConfigError
from pptrace.model.text import inert
from pptrace.report.perfetto import AUX_FLOW, MESSAGE_FLOW, to_chrome_trace

__all__ = ["add_parser", "run", "write_json"]

EPILOG = """\
In Perfetto: a track per rank (sorted by PP stage, then TP rank), a slice per attach and
extract (click one: seq, names, shapes, dtypes, bytes, error), an arrow from each attach to
the extract it was paired with, and each finding as a marker on the ranks it names. Message
layer records, where a trace has them, add send/recv slices and arrows.

exit status: 0 written, 2 unusable input or output.

examples:
  pptrace export --perfetto pp.json                  # reads ./pptrace-traces
  pptrace export --perfetto pp.json pptrace-traces/demo-20260102-030405/
  pptrace export --perfetto - 'traces/*.jsonl' | gzip > pp.json.gz
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``export`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "export",
        help="write traces as Chrome trace-event JSON for ui.perfetto.dev",
        description=(
            "Load traces from every rank, analyze them, and write them as Chrome trace-event "
            "JSON, which ui.perfetto.dev and chrome://tracing open."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--perfetto", required=True, metavar="FILE",
                        help="the JSON file to write (replaced if it exists; - for stdout)")
    add_input_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _target(path: str, inputs: Sequence[str]) -> str:
    """The output path, checked before any input is read (one-line error when unusable)."""
    if path == "-":
        return path
    if os.path.isdir(path):
        raise ConfigError(f"--perfetto {inert(path)!r} is a directory: give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"--perfetto {inert(path)!r}: directory {inert(parent)!r} does not "
                          "exist")
    for given in inputs:
        where = os.path.abspath(given)
        if where == os.path.abspath(path) or (os.path.isdir(where) and where == parent):
            # Every *.json there is read as a trace: the next analyze would skip it as a
            # problem, the next export would fail on it.
            raise ConfigError(f"--perfetto {inert(path)!r} is among the inputs ({inert(given)!r}"
                              "): write it outside the trace directory")
    return path


def write_json(doc: dict[str, Any], path: str, stdout: IO[str] | None = None) -> None:
    """Write ``doc`` to ``path`` whole (a temporary file renamed into place), or to stdout."""
    if path == "-":
        out = stdout or sys.stdout
        json.dump(doc, out, separators=(",", ":"))
        out.write("\n")
        return
    # A hidden name beside the target, created like any file (the umask applies, not
    # mkstemp's 0600), so the rename is atomic on one file system.
    head, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(head, f".{name}.{secrets.token_hex(4)}.tmp")
    try:
        fh = open(tmp, "x", encoding="utf-8")  # closed by the with below
    except OSError as exc:
        raise ConfigError(f"--perfetto {inert(path)!r}: {exc.strerror or exc}") from None
    try:
        with fh:
            json.dump(doc, fh, separators=(",", ":"))
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ConfigError(f"--perfetto {inert(path)!r}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _count(n: int, noun: str) -> str:
    """``1 finding``, ``1,400 calls``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def run(args: argparse.Namespace) -> int:
    """Load, analyze, write the Chrome trace; return the exit status."""
    inputs = inputs_from_args(args)
    target = _target(args.perfetto, inputs.paths)
    status = Status(None if inputs.quiet else sys.stderr)
    with input_paths(inputs) as paths:
        trace = load_trace(paths, status)
    status.stage(f"pptrace: analyzing {trace.event_count:,} events")
    result = analysis(trace)
    trace = result.trace  # its times aligned, as the findings were judged (result.clocks)
    status.end()
    doc = to_chrome_trace(trace, result.findings, pairs=result.pairs,
                          message_pairs=result.message_pairs,
                          broadcast_pairs=result.broadcast_pairs)
    write_json(doc, target)
    if target != "-":
        flows = doc["otherData"]["flows"]
        counts = [_count(len(trace.processes), "rank"), _count(trace.event_count, "call"),
                  f"{_count(flows[AUX_FLOW], 'attach->extract arrow')}"]
        if flows[MESSAGE_FLOW]:
            counts.append(_count(flows[MESSAGE_FLOW], "send->recv arrow"))
        counts.append(_count(len(result.findings), "finding"))
        print(f"pptrace: wrote {inert(target)} ({', '.join(counts)}); open it in "
              "https://ui.perfetto.dev", file=sys.stderr)
    return 0
