"""The sink a config asks for: the trace file, OTLP through pptrace's own provider, or both.

``build_sink(config, rank)`` returns a recorder ``Sink``: a ``FileSink`` for ``file`` (events
encoded straight to the trace file, no SDK span built; compressed and rotated as the config says);
for ``otlp`` beside ``file`` over ``http/json`` (the default) or ``http/protobuf`` nothing more in
this process: the trace directory's shipper process (``pptrace.ship``, started here when none runs)
posts the file's spans; with ``PPTRACE_OTLP_SHIP=inline``, or without ``file``, a ``JsonOtlpSink``
(the same encoder, its lines posted as OTLP/JSON by a ``JsonShipper``) over ``http/json``, the
default, or an ``SdkSpanSink`` on pptrace's own provider with the fail-open OTLP processor over
``grpc`` and ``http/protobuf``; and a ``FanOut`` of the two when both are named (OTLP shut down
first, so that the file's last stats span counts OTLP's losses). Activation builds its sinks itself,
to use the engine's provider when it has one.

    sink = build_sink(config, rank, on_drop=recorder.exporter_dropped)
    sink.export(events)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pptrace.export.file_sink import FileSink
from pptrace.export.segments import TraceSegments
from pptrace.export.spans import SdkSpanSink, pptrace_provider, process_resource, scope_version
from pptrace.export.trace_file import trace_file_name
from pptrace.model.config import Config
from pptrace.model.records import Event, RankInfo, RecorderStats
from pptrace.record.sink import MessageSink, fan_out

__all__ = ["FanOut", "Unavailable", "build_sink"]


class FanOut:
    """Hand every batch to each sink; one failing does not stop the others (raised after: as
    ``SinkFailed`` naming it when others took the batch, see ``pptrace.record.sink.fan_out``).
    ``names``: the sinks' names in the trace's per-sink counts (default ``sink0``, ...)."""

    def __init__(self, sinks: Sequence[Any], names: Sequence[str] = (),
                 stats: Callable[[], RecorderStats] | None = None) -> None:
        self.sinks = list(sinks)
        self.names = [*names, *(f"sink{i}" for i in range(len(names), len(self.sinks)))]
        #: The recorder's counts: after OTLP's shutdown, what it lost goes in a last stats
        #: span of the trace file (the final one was written before the sinks shut down).
        self._stats = stats
        self._last: RecorderStats | None = None

    def _each(self, method: str, *args: Any) -> None:
        fan_out(zip(self.names, self.sinks, strict=False),
                lambda sink: getattr(sink, method)(*args))

    def export(self, events: Sequence[Event]) -> None:
        self._each("export", events)

    def export_stats(self, stats: RecorderStats) -> None:
        self._last = stats
        self._each("export_stats", stats)

    def shutdown(self, timeout: float) -> None:
        """OTLP first (bounded), so that the trace file's last stats span counts its losses."""
        pairs = list(zip(self.names, self.sinks, strict=False))
        files = [(n, s) for n, s in pairs if isinstance(s, FileSink)]
        others = [(n, s) for n, s in pairs if not isinstance(s, FileSink)]
        budget = max(0.05, timeout - max(0.1, 0.2 * timeout)) if files else timeout
        fan_out(others, lambda sink: sink.shutdown(budget))
        if self._stats is not None and self._last is not None and files:
            stats = self._stats()
            if stats.sink_dropped != self._last.sink_dropped:
                fan_out(files, lambda sink: sink.export_stats(stats))
        fan_out(files, lambda sink: sink.shutdown(timeout))

    def export_messages(self, events: Sequence[Any], rank: RankInfo, run_id: str) -> None:
        """The message layer's events, to the sinks that write them (the trace file)."""
        fan_out(((n, s) for n, s in zip(self.names, self.sinks, strict=False)
                 if hasattr(s, "export_messages")),
                lambda sink: sink.export_messages(events, rank, run_id))


def build_sink(
    config: Config, rank: RankInfo, on_drop: Callable[[int, str], None] | None = None,
    stats: Callable[[], RecorderStats] | None = None,
) -> MessageSink:
    """The recorder sink for the exporters ``config`` names.

    ``on_drop(events, cause)`` hears of spans the OTLP exporter lost; ``stats``, the recorder's
    counts, lets the trace file end with a stats span that counts them. With neither ``file``
    nor ``otlp`` named, spans are built on pptrace's provider and go nowhere.
    """
    resource = process_resource(rank, config.run_id, config.schema_version)
    sinks: list[Any] = []
    if "file" in config.exporters:
        path = os.path.join(config.trace_dir, trace_file_name(rank))
        out = TraceSegments(path, config.compress, config.segment_bytes, config.max_bytes,
                            config.dir_unsafe_ok)
        sinks.append(FileSink(out, resource, scope_version(), config.dir_unsafe_ok))
    if _from_files(config):
        # OTLP from the trace file, by the directory's shipper process: this process
        # writes its file only (no OTLP sink: no OTLP counts of its own to claim).
        from pptrace.export.ship_launch import ensure_shipper

        try:
            ensure_shipper(config.trace_dir)
        except Exception as exc:  # the file goes on; the user hears why OTLP does not
            import logging

            logging.getLogger("pptrace").warning("pptrace: cannot start the OTLP shipper: %s",
                                                 exc)
    elif "otlp" in config.exporters and _json_protocol():
        try:
            from pptrace.export.otlp_json import JsonOtlpSink, JsonShipper

            sinks.append(JsonOtlpSink(JsonShipper.from_env(config, on_drop=on_drop), rank,
                                      config.run_id, owns_shipper=True))
        except Exception as exc:  # a bad endpoint or header: OTLP alone is lost
            if not sinks:
                raise
            sinks.append(Unavailable(f"{type(exc).__name__}: {exc}"))
    elif "otlp" in config.exporters or not sinks:
        # A collector gets at most version 2, as it always did: version 3's joined arrays and
        # left-out peer ranks are the trace file's (the shipper re-encodes them as version 1).
        provider = pptrace_provider(process_resource(rank, config.run_id,
                                                     min(config.schema_version, 2)))
        sink: Any = SdkSpanSink(provider, owns_provider=True)
        if "otlp" in config.exporters:
            try:
                from pptrace.export.otlp import otlp_processor

                provider.add_span_processor(otlp_processor(config, on_drop=on_drop))
            except Exception as exc:  # no exporter package, a bad endpoint: OTLP alone is lost
                if not sinks:
                    raise
                sink = Unavailable(f"{type(exc).__name__}: {exc}")
        sinks.append(sink)
    return sinks[0] if len(sinks) == 1 else FanOut(sinks, ("file", "otlp"), stats)


def _from_files(config: Config) -> bool:
    """Whether OTLP is shipped from the trace files (``pptrace.export.ship_launch``)."""
    from pptrace.export.otlp import protocol
    from pptrace.export.ship_launch import ships_from_files
    from pptrace.model.errors import ConfigError

    try:
        wire = protocol()
    except ConfigError:  # a bad protocol: the SDK path, whose exporter set-up reports it
        return False
    return ships_from_files(config.exporters, config.otlp_ship, wire)


def _json_protocol() -> bool:
    """Whether OTLP goes as JSON (``http/json``, the default); a bad protocol: the SDK path,
    whose exporter set-up reports it."""
    from pptrace.export.otlp import protocol
    from pptrace.model.errors import ConfigError

    try:
        return protocol() == "http/json"
    except ConfigError:
        return False


class Unavailable:
    """A sink that could not be opened beside one that could: every batch it is handed fails,
    so the recorder counts it as that sink's loss (``pptrace.stats.sink.otlp.dropped``) while
    the trace file goes on."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def export(self, events: Sequence[Event]) -> None:
        raise RuntimeError(f"sink unavailable: {self.reason}")

    def export_stats(self, stats: RecorderStats) -> None:
        raise RuntimeError(f"sink unavailable: {self.reason}")

    def export_messages(self, events: Sequence[Any], rank: RankInfo, run_id: str) -> None:
        raise RuntimeError(f"sink unavailable: {self.reason}")

    def shutdown(self, timeout: float) -> None:
        return None
