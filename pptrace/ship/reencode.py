"""A trace file's line as the spans OTLP gets: schema version 1, every attribute on every span.

The trace file is compact (schema version 2: a process's constants on the resource, defaults
left out); a Jaeger search by tag looks at a span's own tags and its process's, so what goes to
a collector is version 1, as the in-process ``http/json`` path has always sent it. The line is
decoded by the loader's own decoders (``schema.attributes_to_event``, ``attributes_to_stats``,
``pptrace.load.messages.decode_span``) and encoded by the one encoder (``FileSink``) with a
version 1 resource built from the line's own (its service name and the user's
``OTEL_RESOURCE_ATTRIBUTES`` kept, the version 2 constants moved onto the spans): exactly the
text ``JsonOtlpSink`` posts for the same events, ids aside.

    out = Reencoder().line(text)     # Reencoded(lines=[...], events=64, messages=0, ...)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource

from pptrace.export.file_sink import FileSink
from pptrace.export.spans import scope_version
from pptrace.load.messages import decode_span
from pptrace.load.otlp import for_each_otlp_span
from pptrace.model import schema
from pptrace.model.messages import SPAN_NAMES as MESSAGE_SPANS
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = ["Reencoded", "Reencoder"]

#: What a version 2 resource says for its spans (a version 1 span says it itself).
_V2_ONLY = frozenset({*schema.RESOURCE_KEYS.values(), schema.R_MAIN_DEVICE,
                      schema.R_THREAD_MAIN_NAME, schema.R_THREAD_MAIN_ID, schema.R_MAIN_SUBJECT})
_EVENT_SPANS = (schema.SPAN_ATTACH, schema.SPAN_EXTRACT)


@dataclass(slots=True)
class Reencoded:
    """One trace-file line, ready to post: its version 1 lines and what they hold."""

    lines: list[str] = field(default_factory=list)
    events: int = 0  # attach/extract spans
    messages: int = 0  # message-layer spans
    stats: int = 0  # recorder stats spans
    skipped: int = 0  # spans that could not be decoded (not posted)
    final: bool = False  # a final stats span: the process's last word

    @property
    def spans(self) -> int:
        """Spans the lines hold."""
        return self.events + self.messages + self.stats


class _Lines:
    """What ``FileSink`` writes to (``pptrace.export.file_sink.LineOut``): a list."""

    refused = None
    rotated = 0
    rotated_segments = 0
    base = "otlp"

    def __init__(self) -> None:
        self.lock = _NoLock()
        self.lines: list[str] = []

    def write_lines(self, lines: Sequence[str], events: int = 0) -> None:
        self.lines.extend(lines)

    def encode(self, lines: Sequence[str]) -> bytes:
        return "\n".join(lines).encode("ascii")

    def make_room(self, nbytes: int) -> bool:
        return False

    def write(self, data: bytes, events: int = 0) -> None:
        self.lines.extend(ln for ln in data.decode("ascii").split("\n") if ln)

    def close(self) -> None:
        return None


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Collect:
    """The loader's ``SpanSink``: each span decoded, grouped by its process and resource."""

    def __init__(self) -> None:
        self.groups: dict[tuple[RankInfo, str, tuple[tuple[str, Any], ...]], _Group] = {}
        self.skipped = 0
        self.final = False

    def _group(self, rank: RankInfo, run_id: str, resource: Mapping[str, Any]) -> _Group:
        kept = tuple(sorted((k, v if not isinstance(v, list) else tuple(v))
                            for k, v in resource.items() if k not in _V2_ONLY))
        key = (rank, run_id, kept)
        found = self.groups.get(key)
        if found is None:
            found = self.groups[key] = _Group()
        return found

    def span(self, name: str, attrs: Mapping[str, Any], start_ns: int, end_ns: int,
             trace_id: str, span_id: str, service: str, resource: Mapping[str, Any]) -> None:
        try:
            if name in _EVENT_SPANS:
                event = schema.attributes_to_event(attrs, start_ns, end_ns, resource=resource,
                                                   name=name)
                self._group(event.rank, event.run_id, resource).events.append(event)
            elif name in MESSAGE_SPANS:
                # A span that stands for a receive's begin too gives both: OTLP gets the begin
                # span the file left out, as the in-process OTLP path sends it.
                rank, run_id, messages = decode_span(name, attrs, resource, start_ns, end_ns)
                self._group(rank, run_id, resource).messages.extend(messages)
            elif name == schema.SPAN_STATS:
                stats = schema.attributes_to_stats(attrs, resource=resource)
                self._group(stats.rank, stats.run_id, resource).stats.append(stats)
                self.final = self.final or stats.final
            else:
                self.skipped += 1
        except (ValueError, TypeError, KeyError):  # SchemaVersionError, BadMessageSpan
            self.skipped += 1


@dataclass(slots=True)
class _Group:
    events: list[Event] = field(default_factory=list)
    messages: list[MessageEvent] = field(default_factory=list)
    stats: list[RecorderStats] = field(default_factory=list)


class Reencoder:
    """Re-encode trace-file lines as version 1 OTLP/JSON lines (one encoder per resource)."""

    def __init__(self) -> None:
        self._sinks: dict[Any, tuple[FileSink, _Lines]] = {}
        self._scope = scope_version()

    def _sink(self, rank: RankInfo, run_id: str,
              kept: tuple[tuple[str, Any], ...]) -> tuple[FileSink, _Lines]:
        key = (rank, run_id, kept)
        found = self._sinks.get(key)
        if found is None:
            if len(self._sinks) > 256:
                self._sinks.clear()
            attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in kept}
            attrs.update(schema.resource_attributes(rank, run_id, 1))
            out = _Lines()
            found = self._sinks[key] = (FileSink(out, Resource(attrs), self._scope), out)
        return found

    def line(self, text: str) -> Reencoded:
        """The version 1 lines of one trace-file line (``ValueError`` if it is no JSON)."""
        collect = _Collect()
        for_each_otlp_span(json.loads(text), collect)
        result = Reencoded(skipped=collect.skipped, final=collect.final)
        for (rank, run_id, kept), group in collect.groups.items():
            sink, out = self._sink(rank, run_id, kept)
            out.lines = []
            if group.events:
                sink.export(group.events)
            if group.messages:
                sink.export_messages(group.messages, rank, run_id)
            for stats in group.stats:
                # The encoder writes its own output's rotation counts: here, the file's.
                out.rotated, out.rotated_segments = stats.rotated, stats.rotated_segments
                sink.export_stats(stats)
            result.lines += out.lines
            result.events += len(group.events)
            result.messages += len(group.messages)
            result.stats += len(group.stats)
        return result
