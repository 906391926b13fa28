"""Sinks: turn events into real OpenTelemetry SDK spans, and write them as OTLP JSON lines.

- ``SpanSink`` builds one SDK span per event through any ``TracerProvider`` (pptrace's own, or
  the engine's when it already configured one), with the event's original timestamps.
- ``OtlpJsonFileExporter`` is a ``SpanExporter`` writing one OTLP ``TracesData`` JSON object per
  line, encoded from the official protobuf definitions (``opentelemetry-proto``) with the OTLP/JSON
  conventions (hex trace and span ids, lowerCamelCase), which collectors and pptrace read back.
- ``build_provider`` assembles pptrace's own provider with the exporters a config names.

    provider = build_provider(config, rank)
    sink = SpanSink(provider)
    sink.export(events)
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from google.protobuf import json_format
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from pptrace.export import otlp_json
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = [
    "OtlpJsonFileExporter",
    "SpanSink",
    "build_provider",
    "encode_json_line",
    "rank_resource",
    "trace_file_name",
]

SCOPE = "pptrace"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pptrace")
    except Exception:
        return "0"


def trace_file_name(rank: RankInfo) -> str:
    """A per-process trace file name, from rank and pid only (never from trace content)."""
    who = f"rank{rank.rank}" if rank.rank is not None else "rankX"
    return f"pptrace-{who}-pid{rank.pid}.otlp.jsonl"


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


def _hex_ids(node: Any) -> None:
    """Rewrite protobuf-JSON base64 ids as the hex strings OTLP/JSON requires, in place."""
    if isinstance(node, dict):
        for key in ("traceId", "spanId", "parentSpanId"):
            value = node.get(key)
            if isinstance(value, str) and value:
                node[key] = base64.b64decode(value).hex()
        for value in node.values():
            if isinstance(value, (dict, list)):
                _hex_ids(value)
    elif isinstance(node, list):
        for value in node:
            _hex_ids(value)


def encode_json_line(spans: Sequence[ReadableSpan]) -> str:
    """Encode spans as one OTLP/JSON ``TracesData`` line (no trailing newline)."""
    line = otlp_json.encode_json_line(spans)  # the same JSON without protobuf, when it can
    if line is not None:
        return line
    request = encode_spans(spans)
    data = json_format.MessageToDict(request, preserving_proto_field_name=False)
    _hex_ids(data)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True)


class OtlpJsonFileExporter(SpanExporter):
    """Append spans to a file as OTLP/JSON lines; each export is one line, flushed."""

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

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        self.write_line(encode_json_line(spans))
        return SpanExportResult.SUCCESS

    def write_line(self, line: str) -> None:
        """Append one encoded OTLP/JSON line and flush it to the OS."""
        with self._lock:
            f = self._open()
            f.write(line + "\n")
            f.flush()

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True


class _BatchToExporter(SpanProcessor):
    """Collect the spans of one flush and export them in one call (runs on the flush thread).

    The SDK's BatchSpanProcessor would add a second queue that drops silently when full; pptrace
    already batches off the engine's path, so it exports directly and counts failures itself.
    """

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._pending: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._pending.append(span)

    def flush_pending(self) -> None:
        with self._lock:
            spans, self._pending = self._pending, []
        if spans:
            result = self.exporter.export(spans)
            if result is not SpanExportResult.SUCCESS:
                raise OSError(f"{type(self.exporter).__name__} failed to export {len(spans)} spans")

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush_pending()
        return True


class SpanSink:
    """A recorder sink that turns events into SDK spans through a tracer provider."""

    def __init__(
        self,
        provider: trace_api.TracerProvider,
        direct: Sequence[_BatchToExporter] = (),
        owns_provider: bool = False,
    ) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, _version())
        self._direct = list(direct)
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
        self._flush()

    def export_stats(self, stats: RecorderStats) -> None:
        span = self._span(schema.SPAN_STATS, stats.time_ns, stats.time_ns,
                          schema.stats_to_attributes(stats))
        span.end(end_time=stats.time_ns)
        self._flush()

    def _flush(self) -> None:
        errors = []
        for processor in self._direct:
            try:
                processor.flush_pending()
            except Exception as exc:  # keep the other exporters going; report after
                errors.append(exc)
        if errors:
            raise errors[0]

    def shutdown(self, timeout: float) -> None:
        self._flush()
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
    from pptrace.export.file_sink import FileSink

    resource = rank_resource(rank, config.run_id)
    sinks: list[Any] = []
    if "file" in config.exporters:
        path = os.path.join(config.trace_dir, trace_file_name(rank))
        sinks.append(FileSink(path, resource, _version()))
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
