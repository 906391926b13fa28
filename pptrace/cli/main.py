"""The ``pptrace`` command: one subcommand per module (``pptrace/cli/<name>.py``).

Each subcommand module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and sets
``func`` (taking the parsed namespace, returning the exit status) with ``set_defaults``.
Errors that pptrace expects (bad input, bad config) print one line and exit 2; no traceback.
A closed output pipe (``pptrace analyze ... | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from pptrace.cli.help import HelpFormatter
from pptrace.model.errors import PptraceError

__all__ = ["main"]

COMMANDS = ("demo", "analyze", "diff", "view", "export", "run", "native", "ship")


def _version() -> str:
    try:
        return version("pptrace")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser (of every command, or of ``commands`` only)."""
    parser = argparse.ArgumentParser(
        prog="pptrace",
        description=(
            "Trace and debug the auxiliary-output transport of pipeline-parallel sampling "
            "pipelines: record every attach and extract, and every PP message between stages, "
            "as OpenTelemetry spans, then find protocol mismatches, key collisions, corrupted "
            "transfers and hangs across ranks."
        ),
        epilog="Run 'pptrace COMMAND --help' for a command's options.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pptrace {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        command = importlib.import_module(f"pptrace.cli.{name}").add_parser(sub)
        command.formatter_class = HelpFormatter  # one help layout for every command
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pptrace`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # The OTLP shipper starts beside every traced run (``python -m pptrace ship``): it imports
    # no other command's modules (the analyzer's were a third of its start-up's CPU).
    parser = build_parser(("ship",) if argv[:1] == ["ship"] else COMMANDS)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return status
    except PptraceError as exc:
        print(f"pptrace: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pptrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # what a shell reports for a command ended by SIGPIPE (128 + 13)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's exit flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
