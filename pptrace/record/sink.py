"""What the recorder hands its events to, and how it reports what goes wrong there.

A ``Sink`` is built by whoever starts the recorder (``pptrace.activation`` builds the trace file
and OTLP ones in ``pptrace.export``): recording itself imports no exporter. A sink that hands
each batch to several (the trace file and OTLP) does it with ``fan_out``, which raises
``SinkFailed`` naming the sinks that failed when the others took the batch: the recorder then
counts the loss as theirs (``pptrace.stats.sink.<name>.dropped``), not as ``dropped`` (what no
sink received). ``WarnOnce`` logs the first occurrence of each cause of loss and counts them all,
so that a failing sink costs one log line, not one per event.

    fan_out([("file", files), ("otlp", otlp)], lambda sink: sink.export(events))
    warn = WarnOnce()
    warn("export failed (OSError)", "disk full")    # logged once, counted every time
    warn.counts["export failed (OSError)"]
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = ["MessageSink", "Sink", "SinkFailed", "WarnOnce", "fan_out"]

log = logging.getLogger("pptrace")


class Sink(Protocol):
    """Where finished events go (spans to files, OTLP, an engine's tracer provider...).

    The recorder hands ``export`` a ``RawEvents``: a sequence that converts its raw tuples as
    it is read, so that a sink able to encode the raws itself skips the records.
    """

    def export(self, events: Sequence[Event]) -> None: ...

    def export_stats(self, stats: RecorderStats) -> None: ...

    def shutdown(self, timeout: float) -> None: ...


class MessageSink(Sink, Protocol):
    """A sink that also takes the message layer's events (``pptrace.record.messages``), as
    pptrace's own trace-file and OTLP sinks do; another sink may be a plain ``Sink``."""

    def export_messages(self, events: Sequence[MessageEvent], rank: RankInfo,
                        run_id: str) -> None: ...


S = TypeVar("S", bound=Sink)


class SinkFailed(Exception):
    """Some of a fan-out's sinks failed and the others took the batch: ``failed`` names them
    with their errors, in the fan-out's order."""

    def __init__(self, failed: Sequence[tuple[str, Exception]]) -> None:
        self.failed = tuple(failed)
        super().__init__("; ".join(f"{name} sink: {type(exc).__name__}: {exc}"
                                   for name, exc in self.failed))

    @property
    def names(self) -> tuple[str, ...]:
        """The failed sinks' names."""
        return tuple(name for name, _ in self.failed)


def fan_out(sinks: Iterable[tuple[str, S | None]], call: Callable[[S], None]) -> None:
    """``call`` each named sink (None: left out); one failing does not stop the others. When
    every sink failed, the first error is raised (nothing took the batch); when only some
    did, ``SinkFailed`` naming them."""
    failed: list[tuple[str, Exception]] = []
    called = 0
    for name, sink in sinks:
        if sink is None:
            continue
        called += 1
        try:
            call(sink)
        except Exception as exc:
            failed.append((name, exc))
    if failed:
        if len(failed) == called:
            raise failed[0][1]
        raise SinkFailed(failed)


class WarnOnce:
    """Log one warning per cause, and count every occurrence."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, cause: str, detail: str) -> None:
        self.counts[cause] += 1
        if self.counts[cause] == 1:
            log.warning("pptrace: %s: %s (further occurrences are counted, not logged)",
                        cause, detail)
