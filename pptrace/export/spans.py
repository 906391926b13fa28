"""Events as real OpenTelemetry SDK spans, for OTLP export and for an engine's own provider.

- ``SpanSink`` builds one SDK span per event through any ``TracerProvider`` (pptrace's own, or
  the engine's when it already configured one), with the event's original timestamps; the
  provider's processors (pptrace's fail-open OTLP processor, or the engine's) take them on.
- ``rank_resource`` is the OpenTelemetry resource that names this process (service, host, pid,
  run id, ranks); the trace file carries the same resource.
- ``build_provider`` assembles the sink a config names: the trace file (``FileSink``, which
  encodes events itself and builds no SDK span) and/or OTLP through pptrace's own provider.

    sink = build_provider(config, rank)
    sink.export(events)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.trace import Status, StatusCode

from pptrace.export.file_sink import FileSink
from pptrace.export.trace_file import trace_file_name
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = ["SpanSink", "build_provider", "rank_resource", "scope_version", "trace_file_name"]

SCOPE = "pptrace"


def scope_version() -> str:
    """pptrace's version, as the instrumentation scope of every span names it."""
    try:
        from importlib.metadata import version

        return version("pptrace")
    except Exception:
        return "0"


def rank_resource(rank: RankInfo, run_id: str = "") -> Resource:
    """Resource attributes identifying this process (merged with OTEL_RESOURCE_ATTRIBUTES)."""
    attrs: dict[str, Any] = {
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or "pptrace",
        "host.name": rank.host,
        "process.pid": rank.pid,
        schema.RUN_ID: run_id,
    }
    for key, value in ((schema.RANK, rank.rank), (schema.PP_RANK, rank.pp_rank),
                       (schema.TP_RANK, rank.tp_rank)):
        if value is not None:
            attrs[key] = value
    # Not Resource.create: it runs its detectors on a thread pool, which refuses work once the
    # interpreter is exiting, and a short process's first flush is its exit flush. The detector
    # reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, as Resource.create would.
    return OTELResourceDetector().detect().merge(Resource(attrs))


class SpanSink:
    """A recorder sink that turns events into SDK spans through a tracer provider."""

    def __init__(self, provider: trace_api.TracerProvider, owns_provider: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, scope_version())
        self._owns = owns_provider

    def _span(self, name: str, start: int, end: int, attrs: dict[str, Any]) -> trace_api.Span:
        # Every event is a root span: ranks are separate processes with no shared parent.
        return self.tracer.start_span(
            name, context=trace_api.set_span_in_context(trace_api.INVALID_SPAN),
            attributes=attrs, start_time=start,
        )

    def export(self, events: Sequence[Event]) -> None:
        for event in events:
            span = self._span(schema.span_name(event.direction), event.start_ns, event.end_ns,
                              schema.event_to_attributes(event))
            if event.error_type is not None:
                span.add_event(
                    "exception",
                    {"exception.type": event.error_type,
                     "exception.message": event.error_message or ""},
                    timestamp=event.end_ns,
                )
                span.set_status(Status(StatusCode.ERROR, event.error_message or ""))
            span.end(end_time=event.end_ns)

    def export_stats(self, stats: RecorderStats) -> None:
        span = self._span(schema.SPAN_STATS, stats.time_ns, stats.time_ns,
                          schema.stats_to_attributes(stats))
        span.end(end_time=stats.time_ns)

    def shutdown(self, timeout: float) -> None:
        if self._owns and isinstance(self.provider, TracerProvider):
            self.provider.shutdown()
        else:
            flush = getattr(self.provider, "force_flush", None)
            if flush is not None:
                flush(int(timeout * 1000))


class _Tee:
    """Hand every batch to each sink; one failing does not stop the others (raised after)."""

    def __init__(self, sinks: Sequence[Any]) -> None:
        self.sinks = list(sinks)

    def _each(self, method: str, *args: Any) -> None:
        errors = []
        for sink in self.sinks:
            try:
                getattr(sink, method)(*args)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def export(self, events: Sequence[Event]) -> None:
        self._each("export", events)

    def export_stats(self, stats: RecorderStats) -> None:
        self._each("export_stats", stats)

    def shutdown(self, timeout: float) -> None:
        self._each("shutdown", timeout)


def build_provider(
    config: Config, rank: RankInfo, on_drop: Callable[[int, str], None] | None = None
) -> Any:
    """Build pptrace's own sink for the exporters a config names (a recorder ``Sink``).

    Files are written by ``FileSink`` straight from events; OTLP goes through real SDK spans on
    pptrace's own provider. ``on_drop(events, cause)`` hears of spans the OTLP exporter lost.
    """
    resource = rank_resource(rank, config.run_id)
    sinks: list[Any] = []
    if "file" in config.exporters:
        path = os.path.join(config.trace_dir, trace_file_name(rank))
        sinks.append(FileSink(path, resource, scope_version()))
    if "otlp" in config.exporters or not sinks:
        provider = TracerProvider(
            resource=resource,
            span_limits=SpanLimits(max_span_attributes=256, max_attribute_length=None),
        )
        if "otlp" in config.exporters:
            from pptrace.export.otlp import otlp_processor

            provider.add_span_processor(otlp_processor(config, on_drop=on_drop))
        sinks.append(SpanSink(provider, owns_provider=True))
    return sinks[0] if len(sinks) == 1 else _Tee(sinks)
