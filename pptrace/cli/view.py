"""``pptrace view [PATH...]``: open the terminal viewer on recorded traces.

The viewer needs a terminal: without one on stdin and stdout the command exits 2 at once, with
one line saying what to run instead (``pptrace analyze``). The traces are loaded (with progress
on a terminal) and analyzed before the full-screen app starts, so bad input fails with the usual
one-line error; the app then indexes the trace behind its own loading screen. With no path it
reads ``./pptrace-traces``; ``--follow`` waits for traces there (or in the paths given) when
there are none yet: the app starts on an empty ``Trace`` and re-reads every second. The viewer
is found through the ``pptrace.viewers`` entry point, so pptrace never imports the viewer (nor
Textual) to record, load or analyze.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pptrace.cli.inputs import add_input_arguments, input_paths, inputs_from_args, load_trace
from pptrace.cli.progress import Status
from pptrace.model.errors import ConfigError
from pptrace.model.heap import keep_too, kept

if TYPE_CHECKING:
    from pptrace.analyze.analyzer import Analysis
    from pptrace.load.head import Head
    from pptrace.model.findings import Finding
    from pptrace.model.trace import Trace

__all__ = ["add_parser", "has_terminal", "run", "view"]

EPILOG = """\
keys (the footer shows them; ? lists every one; ctrl+p searches the actions):
  arrows move in the grid    n/p next/previous event    ]/[ next/previous finding
  space play/pause, +/- speed    d first divergence    f filter    / search
  e/m export what is on screen as JSON/Markdown    t light/dark    q quit

large traces: over 96 MB of trace files, the viewer draws the start of the trace at once
(the header marks it: "◐ the first 2% of 1.4 GB of trace files, reading 40% ...") and puts the
whole trace in its place when it is read; PPTRACE_VIEW_START_MB sets the size (0: off).

examples:
  pptrace view                               # reads ./pptrace-traces
  pptrace view pptrace-traces/
  pptrace view 'traces/*.jsonl' --theme light
  pptrace view pptrace-traces/ --follow      # watch a running engine
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Create the ``view`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "view",
        help="explore traces in a terminal UI: rank x microbatch grid, replay, pair detail",
        description=(
            "Open a keyboard-first terminal viewer on recorded traces: a rank x microbatch grid "
            "coloured by what happened, a replay of every event in recorded order, the two sides "
            "of each attach/extract pair side by side, and the analyzer's findings grouped by "
            "kind. Trace text is always shown literally."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument("--follow", action="store_true",
                        help="re-read the inputs every second as they grow (a running engine); "
                             "waits for traces when there are none yet")
    parser.add_argument("--theme", choices=("dark", "light"), default="dark",
                        help="colour theme (default: dark; 't' switches in the app)")
    parser.set_defaults(func=run)
    return parser


Loader = Callable[[Callable[[str], None]], "tuple[Trace, Analysis | list[Finding]]"]


def _reloader(paths: Sequence[str], follow: bool) -> Loader:
    """A loader for ``--follow``: re-reads the same inputs, analyzes, reports its phase."""

    def load(status: Callable[[str], None]) -> tuple[Trace, Analysis | list[Finding]]:
        from pptrace.analyze.analyzer import analysis
        from pptrace.load.loader import load_paths

        status(f"reading {len(paths)} input(s)")

        def progress(done: int, total: int, source: str) -> None:
            status(f"reading {_percent(done / total if total else 1.0)} of the trace files")

        trace = load_paths(paths, progress, allow_empty=follow)
        status(f"analyzing {trace.event_count:,} events")
        result = analysis(trace)  # the viewer pairs on the analyzer's channels
        return result.trace, result  # its times aligned, as the findings were judged

    return load


START_ENV = "PPTRACE_VIEW_START_MB"


def _start_mb() -> float:
    """Above how many MB of trace files the viewer draws a trace's start first (0: never)."""
    from pptrace.load.head import MIN_TOTAL

    raw = os.environ.get(START_ENV, "").strip()
    if not raw:
        return MIN_TOTAL / (1 << 20)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"{START_ENV}={raw!r}: expected a number of MB, at least 0 "
                          "(0: always read the whole trace first)")
    return value


def _percent(fraction: float) -> str:
    """A fraction as a percentage that is never rounded to 0 or 100 when it is not."""
    pct = 100 * fraction
    if 0 < pct < 1:
        return f"{pct:.1f}%"
    return f"{min(99, int(pct)) if fraction < 1 else 100}%"


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _viewer() -> Callable[..., str | None]:
    """The installed viewer's ``open_viewer`` (the ``pptrace.viewers`` entry point)."""
    found = entry_points(group="pptrace.viewers", name="textual")
    if not found:
        raise ConfigError("the terminal viewer is not installed: reinstall pptrace "
                          "(pip install -e .) so that its 'pptrace.viewers' entry point exists")
    try:
        viewer: Callable[..., str | None] = next(iter(found)).load()
    except ImportError as exc:  # the entry point is there, its dependency (Textual) is not
        missing = exc.name or "textual"
        raise ConfigError(f"the terminal viewer needs {missing}, which is not installed: "
                          "pip install 'pptrace[view]' (or run pptrace analyze for a report)"
                          ) from None
    return viewer


def has_terminal() -> bool:
    """Whether stdin and stdout are both a terminal (the full-screen viewer needs both)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run(args: argparse.Namespace) -> int:
    """Load and analyze the inputs, then run the viewer until the user quits."""
    from pptrace.analyze.analyzer import analysis
    from pptrace.load.head import load_head

    if not has_terminal():
        named = " ".join(shlex.quote(p) for p in args.paths or ())
        raise ConfigError(
            "pptrace view needs a terminal on stdin and stdout; for a report instead, run: "
            f"pptrace analyze{' ' + named if named else ''}")
    _viewer()  # before reading anything: a viewer that cannot start says so at once
    start_mb = _start_mb()
    inputs = inputs_from_args(args, follow=args.follow)
    status = Status(None if inputs.quiet else sys.stderr)
    # --follow re-reads the same paths (a directory gains files as ranks start); a Jaeger
    # fetch is not re-fetched: its temporary file is read again until the viewer closes.
    with input_paths(inputs) as paths:
        # A large trace: its start first, drawn while the viewer reads the whole of it.
        head = None
        if start_mb:
            status.stage("pptrace: reading the start of the trace")
            head = load_head(paths, min_total=int(start_mb * (1 << 20)), allow_empty=args.follow)
        trace = head.trace if head is not None else load_trace(
            paths, status, allow_empty=args.follow)
        status.stage(f"pptrace: analyzing {trace.event_count:,} events")
        result = analysis(trace)
        status.end()
        return view(result.trace, result, paths, follow=args.follow, theme=args.theme,
                    head=head)


def view(trace: Trace, findings: Analysis | list[Finding], paths: Sequence[str], *,
         follow: bool = False, theme: str = "dark", head: Head | None = None) -> int:
    """Open the viewer on a loaded, analyzed trace (``pptrace demo`` calls this too);
    ``findings``: the analyzer's ``analysis(trace)`` (its channels are what the grid pairs on),
    or its findings alone (the viewer then asks the analyzer for the channels); ``paths`` are
    re-read for ``follow``, and read whole at once when ``trace`` is their ``head``. Returns
    the exit status."""
    open_viewer = _viewer()
    first = [True]
    reload = _reloader(paths, follow)
    extra: dict[str, str] = {}
    whole_pending = [head is not None]  # the next call reads the whole trace after its start
    if head is not None:
        extra["partial"] = (f"the first {_percent(head.fraction)} of "
                            f"{_size(head.on_disk)} of trace files")

    def loader(status: Callable[[str], None]) -> tuple[Trace, Analysis | list[Finding]]:
        if first[0]:  # the first call gets what was just loaded; later calls re-read
            first[0] = False
            return trace, findings
        loaded = reload(status)
        if whole_pending[0]:
            whole_pending[0] = False
            # The whole trace, after its start: it lives as long as the viewer, as the first
            # load does (its index and message index are built next, with the collector on).
            keep_too()
        return loaded

    # The trace lives as long as the viewer: no collector pass over it (a full one took 0.6 s
    # at 1M messages, in the middle of opening the message screen).
    with kept():
        error = open_viewer(loader, follow=follow, theme=theme, **extra)
    if error is not None:
        print(f"pptrace: error: {error}", file=sys.stderr)
        return 2
    return 0
