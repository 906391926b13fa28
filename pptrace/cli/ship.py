"""``pptrace ship DIR``: ship a trace directory's files to an OTLP collector, then exit.

What ``pptrace run``, ``pptrace demo`` and the first traced process of a directory start when OTLP
over ``http/json``, ``http/protobuf`` or ``grpc`` is asked for (``pptrace.export.ship_launch``), and
what a user can run by hand to send a finished directory to Jaeger. The collector is the one the
standard ``OTEL_EXPORTER_OTLP_*`` variables name. One shipper a directory: it exits at once (0) when
another holds the directory's lock. It ships until every process of the directory has finished
(``pptrace.ship.shipper``), keeps its positions and counts in ``DIR/pptrace-ship.state``, and says
one ``pptrace:`` line on stderr when anything was lost.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 pptrace ship pptrace-traces
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``ship`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ship",
        help="send a trace directory's spans to an OTLP collector (what --endpoint starts)",
        description=(
            "Read every trace file of DIR (segments and compressed files included) and post "
            "its spans to the OTLP collector that OTEL_EXPORTER_OTLP_ENDPOINT names, over "
            "OTEL_EXPORTER_OTLP_PROTOCOL (http/json, http/protobuf or grpc; schema version 1 "
            "spans: every attribute on every span). Positions are kept in "
            "DIR/pptrace-ship.state, so a second run sends only what the first did not. It ends "
            "when every process of DIR has finished and its files are sent."
        ),
    )
    p.add_argument("dir", metavar="DIR", help="the trace directory")
    p.add_argument("--watch", type=int, default=None, metavar="PID",
                   help="run at least as long as this process (pptrace run's command)")
    p.add_argument("--drain", type=float, default=10.0, metavar="SECONDS",
                   help="time to deliver what is left once the run is over (default 10)")
    p.add_argument("--linger", type=float, default=1.0, metavar="SECONDS",
                   help="quiet time after the run before exiting (default 1)")
    p.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Ship the directory (or exit when its shipper already runs)."""
    import fcntl

    from pptrace.export.ship_launch import LOCK_NAME
    from pptrace.ship.posters import make_poster
    from pptrace.ship.shipper import Shipper, install_signals, keep_freed_memory, lower_priority
    from pptrace.ship.state import summary_line

    if args.lock_fd is not None:  # taken by whoever started this process, held from then on
        fd = args.lock_fd
    else:
        os.makedirs(args.dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(args.dir, LOCK_NAME),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return 0  # another shipper has the directory
    try:
        poster = make_poster()
    except Exception as exc:
        print(f"pptrace: OTLP shipper not started: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    lower_priority()
    keep_freed_memory()
    shipper = Shipper(args.dir, poster, watch=args.watch, drain=args.drain,
                      linger=args.linger)
    install_signals(shipper)
    state = shipper.run()
    line = summary_line(state)
    if line:
        print(line, file=sys.stderr, flush=True)
    os.close(fd)  # the lock goes last: whoever waits for it finds the state final
    return 0
