"""What the recorder hands its events to, and how it reports what goes wrong there.

A ``Sink`` is built by whoever starts the recorder (``pptrace.activation`` builds the trace file
and OTLP ones in ``pptrace.export``): recording itself imports no exporter. ``WarnOnce`` logs the
first occurrence of each cause of loss and counts them all, so that a failing sink costs one log
line, not one per event.

    warn = WarnOnce()
    warn("export failed (OSError)", "disk full")    # logged once, counted every time
    warn.counts["export failed (OSError)"]
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from typing import Protocol

from pptrace.model.records import Event, RecorderStats

__all__ = ["Sink", "WarnOnce"]

log = logging.getLogger("pptrace")


class Sink(Protocol):
    """Where finished events go (spans to files, OTLP, an engine's tracer provider...).

    The recorder hands ``export`` a ``RawEvents``: a sequence that converts its raw tuples as
    it is read, so that a sink able to encode the raws itself skips the records.
    """

    def export(self, events: Sequence[Event]) -> None: ...

    def export_stats(self, stats: RecorderStats) -> None: ...

    def shutdown(self, timeout: float) -> None: ...


class WarnOnce:
    """Log one warning per cause, and count every occurrence."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, cause: str, detail: str) -> None:
        self.counts[cause] += 1
        if self.counts[cause] == 1:
            log.warning("pptrace: %s: %s (further occurrences are counted, not logged)",
                        cause, detail)
