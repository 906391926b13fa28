"""The bounds every trace reader keeps, whatever its input: one line, one file, one expansion.

A trace file is input from anywhere, and a few kilobytes of gzip or zstd can stand for
gigabytes. Every reader (plain lines, gzip, zstd, the whole-document fallback, the work-size
sampler) holds at most ``line_bytes`` of one line or document, reads at most ``lines`` lines
of one file, and decompresses at most ``floor + expansion * compressed bytes read`` of one
compressed file. What crosses a bound is said in one line naming the file and line; the
lines before it are kept.

    limits = ReadLimits.from_env()     # PPTRACE_READ_MAX_LINE_MB, _MAX_LINES, _MAX_EXPANSION
    limits.decompressed_cap(n)         # the most output n compressed bytes may give

Stdlib and ``pptrace.model`` only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pptrace.model.errors import ConfigError

__all__ = ["LINE_ENV", "LINES_ENV", "RATIO_ENV", "ReadLimits"]

LINE_ENV = "PPTRACE_READ_MAX_LINE_MB"
LINES_ENV = "PPTRACE_READ_MAX_LINES"
RATIO_ENV = "PPTRACE_READ_MAX_EXPANSION"


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How much one trace file may make a reader hold and do."""

    #: The longest line, or whole-file JSON document, held in memory (reading it costs about
    #: three times this). pptrace's own lines are a flush each: a few MB.
    line_bytes: int = 256 << 20
    #: The most non-blank lines read from one file (a run of blank lines costs nothing).
    lines: int = 1_000_000
    #: Decompressed bytes per compressed byte, beyond ``floor`` (pptrace's own files expand
    #: 20 to 50 times; gzip cannot pass about 1,030, zstd can pass 30,000).
    expansion: int = 500
    floor: int = 64 << 20

    def decompressed_cap(self, compressed: int) -> int:
        """The most decompressed bytes that ``compressed`` bytes of a file may give."""
        return self.floor + self.expansion * compressed

    @classmethod
    def from_env(cls) -> ReadLimits:
        """The defaults, or what the ``PPTRACE_READ_*`` variables set (ConfigError if bad)."""
        base = cls()
        return cls(
            line_bytes=int(_positive(LINE_ENV, base.line_bytes / (1 << 20)) * (1 << 20)),
            lines=int(_positive(LINES_ENV, base.lines)),
            expansion=int(_positive(RATIO_ENV, base.expansion)),
            floor=base.floor,
        )


def _positive(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value >= 1:
        raise ConfigError(f"{name}={raw!r}: expected a number of at least 1")
    return value
