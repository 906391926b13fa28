"""The progress callback the loader takes: bytes read so far, in all, and the current file.

The loader only calls it; drawing progress (a terminal line, a log line) is the command line's
job (``pptrace.cli.progress.Status.loading`` makes one).

    trace = load_paths(paths, progress=lambda done, total, source: ...)
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Progress"]


class Progress(Protocol):
    """Called by the loader as it reads: bytes done and total across all inputs, current file."""

    def __call__(self, done: int, total: int, source: str) -> None: ...
