"""Progress while loading large traces: a callback the loader calls with bytes read so far.

    progress = TerminalProgress(sys.stderr)      # only when stderr is a terminal
    trace = load_paths(paths, progress=progress)
    progress.close()
"""

from __future__ import annotations

import os
import time
from typing import IO, Protocol

__all__ = ["Progress", "TerminalProgress"]


class Progress(Protocol):
    """Called by the loader as it reads: bytes done and total across all inputs, current file."""

    def __call__(self, done: int, total: int, source: str) -> None: ...


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class TerminalProgress:
    """One self-rewriting status line on a terminal, at most ``hz`` times a second."""

    def __init__(self, stream: IO[str], hz: float = 8.0) -> None:
        self.stream = stream
        self.interval = 1.0 / hz
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int, source: str) -> None:
        now = time.monotonic()
        if now - self._last < self.interval and done < total:
            return
        self._last = now
        pct = 100.0 * done / total if total else 100.0
        name = os.path.basename(source)
        line = f"pptrace: loading {pct:5.1f}%  {_mb(done)} of {_mb(total)}  {name}"
        self.stream.write("\r" + line[:100].ljust(100))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """Erase the status line (if one was shown)."""
        if self._shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
            self._shown = False
