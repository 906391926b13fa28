"""Events as real OpenTelemetry SDK spans, for OTLP export and for an engine's own provider.

- ``SdkSpanSink`` is a recorder sink that builds one SDK span per event through any
  ``TracerProvider`` (pptrace's own, or the engine's when it configured one), with the event's
  original timestamps; the provider's processors (pptrace's fail-open OTLP processor, or the
  engine's) take them on. Trace files never go this way: ``FileSink`` encodes them itself.
  Its spans are compact (schema version 2) under a provider whose resource says version 2
  (pptrace's own: the constants are there); under any other (the engine's) they are version 1
  spans, complete in themselves. The main thread's name is never on such a resource (it is
  fixed before the first event), so these spans always carry their thread's name, and they keep
  ``pptrace.duration_ns`` (Jaeger, where OTLP often ends, keeps times in microseconds).
  The message layer's events (``export_messages``) become message spans the same way.
- ``process_resource`` is the OpenTelemetry resource that names this process (service, host,
  pid, run id, ranks, in version 2 every per-process constant); trace files and OTLP carry the
  same one.
- ``pptrace_provider`` is pptrace's own tracer provider for a process, when the engine has none.

    sink = SdkSpanSink(pptrace_provider(process_resource(rank, run_id)), owns_provider=True)
    sink.export(events)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.trace import Status, StatusCode

from pptrace.model import messages, schema
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = [
    "SCOPE", "SPAN_LIMITS", "SdkSpanSink", "pptrace_provider", "process_resource", "scope_version",
]

#: The instrumentation scope of every pptrace span.
SCOPE = "pptrace"
#: Nothing of an event is cut: its attributes number about 30, and a tensor name has no limit.
SPAN_LIMITS = SpanLimits(max_span_attributes=256, max_attribute_length=None)


def scope_version() -> str:
    """pptrace's version, as the instrumentation scope of every span names it."""
    try:
        from importlib.metadata import version

        return version("pptrace")
    except Exception:
        return "0"


def process_resource(rank: RankInfo, run_id: str = "",
                     version: int = schema.SCHEMA_VERSION) -> Resource:
    """The resource naming this process: service, host, pid, run id and its ranks, in version 2
    every per-process constant of its spans (merged with ``OTEL_RESOURCE_ATTRIBUTES``)."""
    attrs: dict[str, Any] = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "pptrace"}
    attrs.update(schema.resource_attributes(rank, run_id, version))
    # Not Resource.create: it runs its detectors on a thread pool, which refuses work once the
    # interpreter is exiting, and a short process's first flush is its exit flush. The detector
    # reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, as Resource.create would.
    return OTELResourceDetector().detect().merge(Resource(attrs))


def pptrace_provider(resource: Resource) -> TracerProvider:
    """A tracer provider of pptrace's own (never set globally), with no processor yet."""
    return TracerProvider(resource=resource, span_limits=SPAN_LIMITS)


class SdkSpanSink:
    """A recorder sink that turns events into SDK spans through a tracer provider."""

    def __init__(self, provider: trace_api.TracerProvider, owns_provider: bool = False,
                 exact_times: bool = False) -> None:
        self.provider = provider
        #: Whether every reader of these spans keeps their times to the nanosecond (as a trace
        #: file's do): then version 2 leaves ``pptrace.duration_ns`` to them.
        self.exact_times = exact_times
        self.tracer = provider.get_tracer(SCOPE, scope_version())
        self._owns = owns_provider
        resource = getattr(provider, "resource", None)
        #: What the spans are compacted against (None: version 1 spans).
        self.resource = dict(resource.attributes) if isinstance(resource, Resource) else None

    def _span(self, name: str, start: int, end: int, attrs: dict[str, Any]) -> trace_api.Span:
        # Every event is a root span: ranks are separate processes with no shared parent.
        return self.tracer.start_span(
            name, context=trace_api.set_span_in_context(trace_api.INVALID_SPAN),
            attributes=attrs, start_time=start,
        )

    def export(self, events: Sequence[Event]) -> None:
        for event in events:
            span = self._span(schema.span_name(event.direction), event.start_ns, event.end_ns,
                              schema.event_to_attributes(event, self.resource,
                                                         self.exact_times))
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
                          schema.stats_to_attributes(stats, self.resource))
        span.end(end_time=stats.time_ns)

    def export_messages(self, events: Sequence[MessageEvent], rank: RankInfo,
                        run_id: str) -> None:
        """The message layer's events (``pptrace.model.messages``) as SDK spans, with the
        process's constants a stats span of this provider would carry (as the trace file)."""
        if not events:
            return
        own = schema.stats_to_attributes(RecorderStats(rank=rank, time_ns=0, run_id=run_id),
                                         self.resource)
        constants = {k: v for k, v in own.items() if not k.startswith("pptrace.stats.")}
        for ev in events:
            start, end = messages.span_times(ev)
            span = self._span(messages.span_name(ev), start, end,
                              {**messages.to_attributes(ev), **constants})
            if ev.error_type is not None:
                span.set_status(Status(StatusCode.ERROR, ev.error_message or ""))
            span.end(end_time=end)

    def shutdown(self, timeout: float) -> None:
        if self._owns and isinstance(self.provider, TracerProvider):
            self.provider.shutdown()
        else:
            flush = getattr(self.provider, "force_flush", None)
            if flush is not None:
                flush(int(timeout * 1000))
