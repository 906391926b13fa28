"""``python -m pptrace.ship DIR [--watch PID]``: the OTLP shipper of one trace directory.

Exits at once (status 0) when another shipper holds the directory's lock. Otherwise it ships
until the run is over (``pptrace.ship.shipper``), writes its counts to the state file
(``pptrace-ship.state`` in DIR), and says one ``pptrace:`` line on stderr when anything was lost.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from collections.abc import Sequence

from pptrace.export.otlp_json import Poster, traces_target
from pptrace.export.ship_launch import LOCK_NAME
from pptrace.ship.shipper import Shipper, install_signals
from pptrace.ship.state import ShipState

__all__ = ["main", "summary_line"]


def summary_line(state: ShipState) -> str:
    """The closing line when something was lost (empty when everything arrived)."""
    t = state.totals()
    lost = t["events_lost"] + t["messages_lost"]
    if not (lost or t["files_gone"] or t["files_damaged"] or t["skipped"]):
        return ""
    why = ", ".join(f"{n} {cause}" for cause, n in sorted(t["causes"].items(),
                                                          key=lambda kv: -kv[1])) or "see below"
    parts = [f"{t['events_sent']} events and {t['messages_sent']} messages delivered",
             f"{t['events_lost']} events and {t['messages_lost']} messages lost ({why})"]
    if t["files_gone"]:
        parts.append(f"{t['files_gone']} segments deleted by rotation before shipped")
    if t["files_damaged"]:
        parts.append(f"{t['files_damaged']} files unreadable")
    if t["skipped"]:
        parts.append(f"{t['skipped']} spans undecodable")
    return f"pptrace: OTLP shipper ({state.endpoint}): {'; '.join(parts)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the shipper of a directory (or exit when one already runs)."""
    parser = argparse.ArgumentParser(prog="python -m pptrace.ship")
    parser.add_argument("dir")
    parser.add_argument("--watch", type=int, default=None, metavar="PID",
                        help="run at least as long as this process")
    parser.add_argument("--drain", type=float, default=10.0, metavar="SECONDS",
                        help="time to deliver what is left once the run is over (default 10)")
    parser.add_argument("--linger", type=float, default=1.0, metavar="SECONDS",
                        help="quiet time after the run before exiting (default 1)")
    parser.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.lock_fd is not None:  # taken by whoever started this process, held from then on
        fd = args.lock_fd
    else:
        os.makedirs(args.dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(args.dir, LOCK_NAME),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another shipper has the directory
    try:
        target = traces_target()
    except Exception as exc:
        print(f"pptrace: OTLP shipper not started: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    shipper = Shipper(args.dir, Poster(target), watch=args.watch, drain=args.drain,
                      linger=args.linger)
    install_signals(shipper)
    state = shipper.run()
    line = summary_line(state)
    if line:
        print(line, file=sys.stderr, flush=True)
    os.close(fd)  # the lock goes last: whoever waits for it finds the state final
    return 0


if __name__ == "__main__":
    sys.exit(main())
