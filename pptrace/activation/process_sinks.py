"""A traced process's sinks as activation assembles them: the trace files and OTLP side by
side, opened at the process's first event.

    sink = DeferredSink(lambda: make_sink(state, finish))   # FilesAndOtlp(files, otlp, ...)
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from pptrace.model.config import Config
from pptrace.model.records import RankInfo, RecorderStats
from pptrace.record.recorder import Recorder
from pptrace.record.sink import MessageSink, fan_out

__all__ = ["Activation", "DeferredSink", "FilesAndOtlp", "make_sink", "ships_from_files"]


class Activation(Protocol):
    """What building the sinks reads of a process's activation (``startup._Active``)."""

    config: Config
    recorder: Recorder
    tracer_provider: Any
    processor: Any

    def on_drop(self, events: int, cause: str) -> None: ...


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


# --- building them -----------------------------------------------------------------------------


def _engine_provider() -> Any:
    """The SDK tracer provider the engine configured in this process, or None."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, TracerProvider) else None


def make_sink(state: Activation, finish: Callable[[], None]) -> MessageSink:
    """The process's sinks: its trace file, and OTLP as the configuration asks for it (shipped
    from the file by the directory's shipper, posted as OTLP/JSON, or SDK spans through the
    engine's provider or pptrace's own); ``finish`` flushes the activation at exit."""
    from pptrace.export.otlp_json import JsonOtlpSink, JsonShipper
    from pptrace.export.sinks import build_sink
    from pptrace.export.spans import SdkSpanSink

    config = state.config
    rank = state.recorder.rank()
    exporters = set(config.exporters)
    files = build_sink(replace(config, exporters=("file",)), rank) if (
        "file" in exporters) else None
    otlp: MessageSink | None = None
    processor = None
    if "otlp" in exporters:
        provider = state.tracer_provider or _engine_provider()
        if provider is None and ships_from_files(config):
            # OTLP from the trace file, by the directory's shipper process: this process
            # writes its file and nothing else (no OTLP sink, so no OTLP counts of its own).
            _start_shipper(state)
        elif provider is None and isinstance(state.processor, JsonShipper):
            processor = state.processor  # OTLP/JSON: the file encoder's lines, no SDK span
            otlp = JsonOtlpSink(processor, rank, config.run_id)
        elif provider is None:
            provider, processor = _otlp_provider(config, rank, state)
        else:
            # The engine already exports spans: pptrace's go through its pipeline, not a second.
            if state.processor is not None:
                state.processor.shutdown(0.0)  # built in advance, not needed after all
            # Exit handlers run last-registered first: flush before the engine's provider's own
            # atexit shutdown (registered when it was built, after pptrace's first one).
            atexit.register(finish)
        if otlp is None and provider is not None:
            otlp = SdkSpanSink(provider, owns_provider=processor is not None)
    return FilesAndOtlp(files, otlp, state.recorder.stats, processor)


def ships_from_files(config: Config) -> bool:
    """Whether this process's OTLP is shipped from its trace file by a shipper process."""
    from pptrace.export import ship_launch
    from pptrace.model.errors import ConfigError

    try:
        from pptrace.export.otlp import protocol

        wire = protocol()
    except (ConfigError, ImportError):
        return False
    return ship_launch.ships_from_files(config.exporters, config.otlp_ship, wire)


def _start_shipper(state: Activation) -> None:
    """Start the trace directory's shipper unless one runs (said, never raised, on failure)."""
    from pptrace.export.ship_launch import ensure_shipper

    try:
        ensure_shipper(state.config.trace_dir)
    except Exception as exc:
        state.recorder.warn("cannot start the OTLP shipper", f"{type(exc).__name__}: {exc}")


def _otlp_provider(config: Config, rank: RankInfo, state: Activation) -> Any:
    """pptrace's own provider with the fail-open OTLP processor (kept, to bound its exit)."""
    from pptrace.export.otlp import otlp_processor
    from pptrace.export.spans import pptrace_provider, process_resource

    provider = pptrace_provider(process_resource(rank, config.run_id))
    processor = state.processor or otlp_processor(config, on_drop=state.on_drop)
    provider.add_span_processor(processor)
    return provider, processor
