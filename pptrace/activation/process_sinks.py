"""A traced process's sinks as activation assembles them: the trace files and OTLP side by
side, opened at the process's first event.

    sink = DeferredSink(lambda: FilesAndOtlp(files, otlp, recorder.stats, processor))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pptrace.model.records import RankInfo, RecorderStats
from pptrace.record.sink import MessageSink, fan_out

__all__ = ["DeferredSink", "FilesAndOtlp"]


class FilesAndOtlp:
    """Trace files and OTLP side by side; one failing does not stop the other.

    At shutdown OTLP goes first (bounded by the exit timeout), so that what it lost is counted
    in a last stats span in the trace file, not only in the exit message.
    """

    def __init__(self, files: MessageSink | None, otlp: MessageSink | None,
                 stats: Callable[[], RecorderStats], processor: Any = None) -> None:
        self.files = files
        self.otlp = otlp
        self.processor = processor  # pptrace's FailOpenProcessor, when OTLP is pptrace's own
        self._stats = stats
        self._last: tuple[int, int] | None = None

    def _each(self, call: Callable[[MessageSink], None]) -> None:
        fan_out((("file", self.files), ("otlp", self.otlp)), call)  # names the one that failed

    def export(self, events: Any) -> None:
        self._each(lambda s: s.export(events))

    def export_stats(self, stats: RecorderStats) -> None:
        self._last = (stats.dropped, stats.export_errors)
        self._each(lambda s: s.export_stats(stats))

    def export_messages(self, events: Any, rank: RankInfo, run_id: str) -> None:
        self._each(lambda s: s.export_messages(events, rank, run_id))

    def shutdown(self, timeout: float) -> None:
        if self.processor is not None:
            # Within the recorder's remaining time, keeping a slice for the last stats span.
            self.processor.shutdown(max(0.05, timeout - max(0.1, 0.2 * timeout)))
        if self.otlp is not None:
            self.otlp.shutdown(timeout)
        if self.files is not None:
            stats = self._stats()
            if (stats.dropped, stats.export_errors) != self._last:
                self.files.export_stats(stats)
            self.files.shutdown(timeout)


class DeferredSink:
    """Open the real sink at the first event, so a process that records nothing writes nothing,
    unless ``keeps_idle`` says its final stats are evidence (a rank that made no call).

    Waiting also lets the rank settle (torch.distributed is usually up by the first event).
    """

    def __init__(self, factory: Callable[[], MessageSink],
                 keeps_idle: Callable[[RecorderStats], bool] | None = None) -> None:
        self._factory = factory
        self._keeps_idle = keeps_idle
        self._sink: MessageSink | None = None

    def open_sink(self) -> MessageSink:
        """Open the real sink now (the recorder does, before it times a write: the opening
        is once, and a write rate learnt from it would drop the next events)."""
        if self._sink is None:
            self._sink = self._factory()
        return self._sink

    def export(self, events: Any) -> None:
        if events:
            self.open_sink().export(events)

    def export_stats(self, stats: RecorderStats) -> None:
        if (self._sink is not None or stats.dropped or stats.internal_errors
                or (stats.final and self._keeps_idle is not None and self._keeps_idle(stats))):
            self.open_sink().export_stats(stats)

    def export_messages(self, events: Any, rank: RankInfo, run_id: str) -> None:
        if events:
            self.open_sink().export_messages(events, rank, run_id)

    def shutdown(self, timeout: float) -> None:
        if self._sink is not None:
            self._sink.shutdown(timeout)
