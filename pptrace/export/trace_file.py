"""The trace file on disk: its name, and the writer that appends whole lines to it.

One file per process, named from the rank and the pid only (never from trace content). Each line
is one OTLP/JSON ``TracesData`` document, written whole and flushed to the OS.

    path = os.path.join(trace_dir, trace_file_name(rank))   # pptrace-rank3-pid42.otlp.jsonl
    out = TraceFile(path)
    out.write_line(text)
    out.close()
"""

from __future__ import annotations

import logging
import os
import threading
from typing import IO

from pptrace.model.records import RankInfo

__all__ = ["TraceFile", "trace_file_name"]


def trace_file_name(rank: RankInfo) -> str:
    """The file name of a process's trace: ``pptrace-rank3-pid42.otlp.jsonl`` (``rankX``
    while the global rank is unknown)."""
    who = f"rank{rank.rank}" if rank.rank is not None else "rankX"
    return f"pptrace-{who}-pid{rank.pid}.otlp.jsonl"


class TraceFile:
    """Append whole lines to one trace file; opened at the first line, so that a process that
    records nothing writes nothing."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def _open(self) -> IO[str]:
        if self._file is not None and not os.path.exists(self.path):
            # Deleted under us (file or directory): writing on would put every further line
            # into an unlinked file, lost silently; start the file again where it was.
            self._file.close()
            self._file = None
            logging.getLogger("pptrace").warning(
                "pptrace: trace file %s was deleted; starting it again", self.path)
        if self._file is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._file = open(self.path, "a", encoding="ascii")  # noqa: SIM115
        return self._file

    def write_line(self, line: str) -> None:
        """Append one line (its newline added here) and flush it to the OS."""
        with self._lock:
            f = self._open()
            f.write(line + "\n")
            f.flush()

    def close(self) -> None:
        """Close the file (a later line opens it again)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
