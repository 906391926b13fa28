"""A trace file's line as the spans OTLP gets: schema version 1, every attribute on every span.

The trace file is compact (schema version 2: a process's constants on the resource, defaults
left out); a Jaeger search by tag looks at a span's own tags and its process's, so what goes to
a collector is version 1, as the in-process ``http/json`` path has always sent it. The line is
decoded by the loader's own decoders (``schema.attributes_to_event``, ``attributes_to_stats``,
``pptrace.load.messages.decode_span``) and encoded by the one encoder (``FileSink``) with a
version 1 resource built from the line's own (its service name and the user's
``OTEL_RESOURCE_ATTRIBUTES`` kept, the version 2 constants moved onto the spans): exactly the
text ``JsonOtlpSink`` posts for the same events, ids aside.

Decoding and encoding a span the long way costs about 85 µs; the shipper would take a sixth of a
core at 2,000 events a second. Step after step the engine makes the same calls, so a file's
spans repeat but for their ids, times, ``seq``, ``mono_ns``, ``duration_ns`` and
``dropped_before`` (what the writer's own templates leave as holes: ``pptrace.export.
span_templates``). A line of attach/extract spans is cut at those values (``cut_span``); what is
left of each span (and the line's resource) is the key of a version 1 template, made at the
key's first sighting from the event the long way decoded, and kept only when the values cut
out are the event's own and the template renders the event exactly as the long way does. A
line whose every span has a template is written from them, its values read as text, with no
JSON decoded and no record built; any other line goes the long way (and teaches the keys of its
spans). A span of a key already seen is matched against the key's text in one pass
(``span_templates.cut_pattern``), first the key that followed the previous span's key last
time.

A shipper that posts protobuf (``http/protobuf``, ``grpc``) gets such a line as a protobuf
request's bytes instead, written from the values as numbers (``pptrace.export.proto_templates.
SpanTemplate``: no version 1 text made, cut and parsed again), the same bytes the version 1
line's protobuf encoding (``encode_request``) gives: a key's protobuf template is made from its
version 1 template's probe and kept only if every span it writes is cut alike and it writes the
key's first span as the long way does; any other line is the version 1 text, as before.

    out = Reencoder().line(text)     # Reencoded(lines=[...], events=64, messages=0, ...)
    out = Reencoder(protobuf=True).line(text)   # lines: [b"...", ...] where written from templates
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource

from pptrace.export import proto_templates
from pptrace.export.file_sink import SPANS_PER_LINE, FileSink
from pptrace.export.span_templates import (
    P_DROPPED,
    P_DUR,
    P_MONO,
    P_SEQ,
    P_SPAN,
    P_START,
    P_TRACE,
    Cut,
    Render,
    cut_pattern,
    cut_span,
    line_spans,
)
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

#: Keys remembered (a template is a few kB); past it the reencoder starts again with none.
_KEY_LIMIT = 1024
#: Keys of a resource tried in turn on a span before it is cut (the most recent first).
_RECENT = 8
#: A key's protobuf template not made yet.
_UNTRIED: Any = object()


@dataclass(slots=True)
class Reencoded:
    """One trace-file line, ready to post: its version 1 lines and what they hold."""

    lines: list[str | bytes] = field(default_factory=list)  # bytes: a protobuf request's
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


class _Template:
    """A key's version 1 template, the encoder it renders for, and what reading its spans takes:
    the key's texts as a pattern whose groups are the values, and where each value is."""

    __slots__ = ("after", "holes", "pattern", "proto", "render", "sink", "where")

    def __init__(self, sink: FileSink, render: Render, cut: Cut) -> None:
        self.sink, self.render, self.holes = sink, render, cut.holes
        self.pattern = cut_pattern(cut.texts)  # the key's spans, cut in one pass
        at = {hole: i for i, hole in enumerate(cut.holes)}
        self.where = tuple(at.get(hole, -1) for hole in range(2, 8))
        self.after: _Template | None = None  # the key of the span after the last one, a guess
        self.proto: Any = _UNTRIED  # its protobuf template (None where none writes it)

    def probe(self) -> str:
        """A span of this key with the ``PROBES`` values (less its opening and closing)."""
        pieces: list[str] = []
        self.render(pieces, f"{P_TRACE:032x}", f"{P_SPAN:016x}", P_START, P_START + P_DUR,
                    P_SEQ, P_MONO, P_DUR, P_DROPPED if self.where[5] >= 0 else 0)
        return _inner("".join(pieces))


def _inner(span: str) -> str:
    """A span's text as ``line_spans`` gives it, less its opening and closing."""
    return span[len(_OPEN):-1] if span.startswith(_OPEN) and span.endswith("}") else ""


_OPEN = '{"traceId":"'


class Reencoder:
    """Re-encode trace-file lines as version 1 OTLP/JSON lines (one encoder per resource)."""

    def __init__(self, templates: bool = True, protobuf: bool = False) -> None:
        self._sinks: dict[Any, tuple[FileSink, _Lines]] = {}
        self._scope = scope_version()
        #: (the line's resource text, a span's text less its values) -> its template, or None
        #: where none renders it; ``templates=False``: every line the long way (for tests).
        self._templates: dict[tuple[str, tuple[str, ...]], _Template | None] | None = (
            {} if templates else None)
        #: A line's resource text -> its keys' templates, the most recently used first.
        self._recent: dict[str, list[_Template]] = {}
        #: ``protobuf``: lines written from templates are protobuf requests' bytes; an encoder's
        #: request around them (None where none wraps them as the long way does).
        self._protobuf = protobuf
        self._envelopes: dict[FileSink, proto_templates.Envelope | None] = {}
        #: Lines written from templates, and of them as protobuf (for tests and benchmarks).
        self.fast_lines = 0
        self.proto_lines = 0

    def _sink(self, rank: RankInfo, run_id: str,
              kept: tuple[tuple[str, Any], ...]) -> tuple[FileSink, _Lines]:
        key = (rank, run_id, kept)
        found = self._sinks.get(key)
        if found is None:
            if len(self._sinks) > 256:
                self._sinks.clear()
                self._envelopes.clear()
                if self._templates is not None:  # they hold the encoders cleared
                    self._templates.clear()
                    self._recent.clear()
            attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in kept}
            attrs.update(schema.resource_attributes(rank, run_id, 1))
            out = _Lines()
            found = self._sinks[key] = (FileSink(out, Resource(attrs), self._scope), out)
        return found

    def line(self, text: str) -> Reencoded:
        """The version 1 lines of one trace-file line (``ValueError`` if it is no JSON)."""
        found = line_spans(text) if self._templates is not None else None
        if found is not None:
            fast = self._fast(*found)
            if fast is not None:
                self.fast_lines += 1
                return fast
        collect = _Collect()
        for_each_otlp_span(json.loads(text), collect)
        if found is not None and len(collect.groups) == 1 and not collect.skipped:
            (rank, run_id, kept), group = next(iter(collect.groups.items()))
            if not group.messages and not group.stats and len(group.events) == len(found[1]):
                cuts = [cut_span(span) for span in found[1]]
                self._learn(found[0], cuts, group.events, self._sink(rank, run_id, kept)[0])
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

    def _fast(self, head: str, spans: list[str]) -> Reencoded | None:
        """The line written from its spans' templates; None unless every span has one (and
        the same encoder)."""
        recent = self._recent.get(head)
        if recent is None:
            return None  # no key of this resource known
        sink: FileSink | None = None
        rows: list[tuple[Any, ...]] = []
        last: _Template | None = None
        for span in spans:
            got = self._match(head, span, recent, last.after if last is not None else None)
            if got is None:
                return None
            found, values = got
            if last is not None:
                last.after = found
            last = found
            if sink is not None and found.sink is not sink:
                return None
            sink = found.sink
            i2, i3, i4, i5, i6, i7 = found.where
            try:
                start, end = int(values[i2]), int(values[i3])
                seq, mono = int(values[i4]), int(values[i5])
                duration = int(values[i6]) if i6 >= 0 else max(0, end - start)
                dropped = int(values[i7]) if i7 >= 0 else 0
            except ValueError:  # the long way says what is wrong with it
                return None
            if i7 >= 0 and not dropped:  # a template with drops is made from drops
                return None
            rows.append((found, *sink.span_ids(), start, end, seq, mono, duration, dropped))
        if sink is None:
            return None
        if self._protobuf:
            written = self._proto_lines(sink, rows)
            if written is not None:
                self.proto_lines += 1
                return Reencoded(lines=written, events=len(rows))
        out = []
        for template, *row in rows:
            pieces: list[str] = []
            template.render(pieces, *row)
            out.append("".join(pieces))
        lines: list[str | bytes] = list(sink.lines_of(out))
        if self._protobuf:
            self._learn_proto(sink, rows, out, lines)
        return Reencoded(lines=lines, events=len(rows))

    def _match(self, head: str, span: str, recent: list[_Template],
               guess: _Template | None) -> tuple[_Template, Sequence[str]] | None:
        """The span's template and values: ``guess``'s or a recent key's where the span is cut
        as theirs, else its key's (found by cutting it); None where it has none."""
        for known in (recent if guess is None else (guess, *recent)):
            match = known.pattern.fullmatch(span)
            if match is not None:
                return known, match.groups()
        cut = cut_span(span)
        assert self._templates is not None
        found = None if cut is None else self._templates.get((head, cut.texts))
        if cut is None or found is None:
            return None
        if found not in recent:  # (a span whose values the pattern does not take: found again)
            recent.insert(0, found)
            del recent[_RECENT:]
        return found, cut.values

    def _proto_lines(self, sink: FileSink, rows: list[tuple[Any, ...]]) -> list[str | bytes] | None:
        """The rows' spans as protobuf requests' bytes, a line's worth each; None unless
        every row's key has a protobuf template and each value can be encoded."""
        envelope = self._envelopes.get(sink)
        if envelope is None:
            return None
        out: list[str | bytes] = []
        fromhex = bytes.fromhex
        try:
            for i in range(0, len(rows), SPANS_PER_LINE):
                spans = []
                for template, trace, span, *values in rows[i:i + SPANS_PER_LINE]:
                    proto = template.proto
                    if proto is None or proto is _UNTRIED:
                        return None
                    spans.append(proto.write((fromhex(trace), fromhex(span), *values)))
                out.append(envelope.wrap(spans))
        except (ValueError, struct.error):  # the version 1 text's encoding says what it is
            return None
        return out

    def _learn_proto(self, sink: FileSink, rows: list[tuple[Any, ...]], spans: list[str],
                     lines: list[str | bytes]) -> None:
        """Make the protobuf templates these rows' keys and their encoder lack (see the module
        docstring), from the version 1 spans and lines written for them."""
        if sink not in self._envelopes and lines and isinstance(lines[0], str):
            self._envelopes[sink] = proto_templates.envelope(lines[0])
        for (template, trace, span, *values), text in zip(rows, spans, strict=True):
            if template.proto is _UNTRIED:
                sample = _inner(text)
                template.proto = proto_templates.span_template(
                    template.probe(), sample, (bytes.fromhex(trace), bytes.fromhex(span),
                                               *values)) if sample else None

    def _learn(self, head: str, spans: list[Cut | None], events: list[Event],
               sink: FileSink) -> None:
        """Make the templates of these spans' keys not known yet, from their events (see the
        module docstring)."""
        templates = self._templates
        assert templates is not None
        for cut, event in zip(spans, events, strict=True):
            if cut is None or (head, cut.texts) in templates:
                continue
            if len(templates) >= _KEY_LIMIT:
                templates.clear()
                self._recent.clear()
            templates[(head, cut.texts)] = None
            if sorted(cut.holes)[:6] != list(range(6)):
                continue  # ids, times, seq and mono_ns at least, each once
            got = dict(zip(cut.holes, cut.values, strict=True))
            want = {2: event.start_ns, 3: event.end_ns, 4: event.seq, 5: event.mono_ns,
                    6: event.duration_ns, 7: event.dropped_before}
            if any(str(want[hole]) != value for hole, value in got.items() if hole >= 2):
                continue  # a value cut out is not the event's
            if 6 not in got and event.duration_ns != max(0, event.end_ns - event.start_ns):
                continue
            if (7 in got) != (event.dropped_before != 0):
                continue
            render = sink.template_of(event)
            if render is not None:
                templates[(head, cut.texts)] = _Template(sink, render, cut)
                self._recent.setdefault(head, [])
