"""The default sink: events straight to OTLP/JSON trace lines, without building SDK span objects.

Creating an SDK span costs about as much as everything else on the recorder thread together, and
a file needs none of what the SDK adds (sampling, processors, limits). ``FileSink`` writes what
``SpanSink`` + ``OtlpJsonFileExporter`` would write for the same events, line for line apart from
the random ids (``tests/test_file_sink.py`` proves it), and caches the encoding of the array
attributes that repeat from one microbatch to the next (names, keys, shapes, dtypes...).

    sink = FileSink(path, rank_resource(rank, run_id))
    sink.export(events)      # one or more lines, flushed
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _esc  # as otlp_json and json.dumps
from typing import Any

from opentelemetry.sdk.resources import Resource

from pptrace import otlp_json, schema
from pptrace.record import Event, RecorderStats

__all__ = ["FileSink"]

#: Spans per line: keeps lines small enough to stream and to lose little to a torn write.
SPANS_PER_LINE = 512
_CACHE_LIMIT = 50_000

_VALUES = otlp_json._VALUES


class FileSink:
    """Write events and recorder stats to one trace file as OTLP/JSON lines."""

    def __init__(self, path: str, resource: Resource, scope_version: str = "0") -> None:
        from pptrace.export import OtlpJsonFileExporter

        self.path = path
        self._out = OtlpJsonFileExporter(path)
        res = otlp_json._attributes(resource.attributes).lstrip(",")
        scope = '{"name":"pptrace","version":' + _esc(scope_version) + "}"
        head = '{"resourceSpans":[{"resource":{' + res + '},"scopeSpans":[{"scope":' + scope
        if resource.schema_url:
            self._tail = ']}],"schemaUrl":' + _esc(resource.schema_url) + "}]}"
        else:
            self._tail = "]}]}]}"
        self._head = head + ',"spans":['
        self._cache: dict[tuple[str, Any], str] = {}
        self._bits = random.getrandbits

    def _attributes(self, attrs: Mapping[str, Any]) -> str:
        cache = self._cache
        parts = []
        for key, value in attrs.items():
            if type(value) is list:
                ck = (key, tuple(value))
                text = cache.get(ck)
                if text is None:
                    if len(cache) > _CACHE_LIMIT:
                        cache.clear()
                    text = cache[ck] = '{"key":' + _esc(key) + ',"value":' + _VALUES[list](
                        value) + "}"
                parts.append(text)
            else:
                parts.append('{"key":' + _esc(key) + ',"value":' + _VALUES[type(value)](value)
                             + "}")
        return ',"attributes":[' + ",".join(parts) + "]"

    def _span(self, name: str, start: int, end: int, attrs: Mapping[str, Any],
              error: tuple[str, str] | None = None) -> str:
        bits = self._bits
        text = (f'{{"traceId":"{bits(128):032x}","spanId":"{bits(64):016x}","name":"{name}",'
                f'"kind":"SPAN_KIND_INTERNAL","startTimeUnixNano":"{start}",'
                f'"endTimeUnixNano":"{end}"' + self._attributes(attrs))
        if error is None:
            return text + ',"status":{},"flags":256}'
        etype, message = error
        event = (f'{{"timeUnixNano":"{end}","name":"exception","attributes":['
                 '{"key":"exception.type","value":{"stringValue":' + _esc(etype) + "}},"
                 '{"key":"exception.message","value":{"stringValue":' + _esc(message) + "}}]}")
        status = ('"status":{"message":' + _esc(message) + ',"code":"STATUS_CODE_ERROR"}'
                  if message else '"status":{"code":"STATUS_CODE_ERROR"}')
        return text + ',"events":[' + event + "]," + status + ',"flags":256}'

    def _write(self, spans: Sequence[str]) -> None:
        for i in range(0, len(spans), SPANS_PER_LINE):
            self._out.write_line(self._head + ",".join(spans[i:i + SPANS_PER_LINE]) + self._tail)

    def export(self, events: Sequence[Event]) -> None:
        """Write the events' spans."""
        spans = []
        for event in events:
            error = None
            if event.error_type is not None:
                error = (event.error_type, event.error_message or "")
            spans.append(self._span(schema.span_name(event.direction), event.start_ns,
                                    event.end_ns, schema.event_to_attributes(event), error))
        self._write(spans)

    def export_stats(self, stats: RecorderStats) -> None:
        """Write one stats span."""
        self._write([self._span(schema.SPAN_STATS, stats.time_ns, stats.time_ns,
                                schema.stats_to_attributes(stats))])

    def shutdown(self, timeout: float) -> None:
        """Close the file."""
        self._out.shutdown()
