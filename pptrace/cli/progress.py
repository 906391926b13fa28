"""Progress on stderr, the one implementation every command uses (loading, the demo's steps,
the viewer's analysis).

On a terminal, one status line rewrites itself in place, a few times a second. Off a terminal
(a log, a pipe, CI), each stage that took a second or more writes one plain line when it ends,
with its final figures; quicker stages write nothing, so a command that reads a small trace
leaves stderr empty. ``--no-progress`` gives ``Status(None)``, which writes nothing at all.

    status = Status(sys.stderr)                       # Status(None) for --no-progress
    trace = load_paths(paths, progress=status.loading())
    status.stage(f"pptrace: analyzing {trace.event_count:,} events")
    findings = analyze(trace)
    status.end()

Rich's progress bar is not used: Rich comes only with the ``view`` extra, and a status line
whose look depends on what else is installed would need two of everything (code, tests); the
line here is what a user needs, and it is the same on every install.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import IO

from pptrace.model.progress import Progress

__all__ = ["Status", "text_width"]


def text_width(stream: IO[str]) -> int | None:
    """The columns of the terminal ``stream`` writes to (None off a terminal: a log or a pipe
    gets one line per item, to grep)."""
    if not stream.isatty():
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((80, 24)).columns


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class Status:
    """A command's progress: a self-rewriting line on a terminal, a line per long stage off one."""

    def __init__(self, stream: IO[str] | None, *, hz: float = 8.0,
                 quiet_below: float = 1.0) -> None:
        self.stream = stream
        self.tty = stream is not None and stream.isatty()
        # One column short of the terminal: a line as wide as it wraps, and "\r" then goes
        # back to the start of the second line only, leaving the first behind.
        self.width = max(20, (text_width(stream) or 80) - 1) if self.tty and stream else 79
        self.interval = 1.0 / hz
        self.quiet_below = quiet_below  # off a terminal, stages quicker than this say nothing
        self._text = ""  # the current stage's latest figures
        self._started: float | None = None  # when the current stage began; None: no stage
        self._drawn = 0.0  # when the terminal line was last drawn
        self._shown = False  # a line is on the terminal

    def stage(self, text: str) -> None:
        """Begin a stage (ending the one before), with its first figures."""
        self.end()
        self._started = time.monotonic()
        self.update(text, force=True)

    def update(self, text: str, *, force: bool = False) -> None:
        """New figures for the current stage (drawn at most ``hz`` times a second)."""
        if self._started is None:
            self._started = time.monotonic()
        self._text = text
        if not self.tty or self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self._drawn < self.interval:
            return
        self._drawn = now
        self.stream.write("\r" + text[:self.width].ljust(self.width))
        self.stream.flush()
        self._shown = True

    def end(self, text: str | None = None, *, keep: bool = False) -> None:
        """End the current stage with its final figures: on a terminal the line is erased (or
        kept, with ``keep``); off one, a stage that took long enough writes one line."""
        if self._started is None:
            return
        final = self._text if text is None else text
        elapsed = time.monotonic() - self._started
        self._started, self._text = None, ""
        stream = self.stream
        if stream is None:
            return
        if self.tty:
            if keep:
                stream.write("\r" + final[:self.width].ljust(self.width) + "\n")
            elif self._shown:
                stream.write("\r" + " " * self.width + "\r")
            self._shown = False
        elif elapsed >= self.quiet_below and final:
            stream.write(f"{final} ({elapsed:.1f}s)\n")
        else:
            return
        stream.flush()

    def loading(self) -> Progress:
        """A callback for ``load_paths``: a loading stage with bytes read and the current file."""
        started = False

        def progress(done: int, total: int, source: str) -> None:
            nonlocal started
            pct = 100.0 * done / total if total else 100.0
            text = (f"pptrace: loading {pct:5.1f}%  {_mb(done)} of {_mb(total)}  "
                    f"{os.path.basename(source)}")
            if not started:
                started = True
                self.stage(text)
            elif done >= total:
                self.update(f"pptrace: loaded {_mb(total)}", force=True)
            else:
                self.update(text)

        return progress
