"""The one trace-file encoder: events straight to OTLP/JSON lines, without SDK span objects.

Trace files are written here and nowhere else. Creating an SDK span costs about as much as
everything else on the recorder thread together, and a file needs none of what the SDK adds
(sampling, processors, limits), so ``FileSink`` writes the OTLP/JSON text itself: lowerCamelCase
names, hex ids, 64-bit integers as strings, enums by name, default values left out, compact
separators, ASCII escapes. Its lines are what the official encoding (``opentelemetry-proto``
through ``google.protobuf.json_format``) gives for the same events as SDK spans, ids aside:
``tests/test_file_sink.py`` compares them byte for byte.

Step after step the engine makes the same calls: same tensors, keys, thread, result. Given the
recorder's raw tuples (``RawEvents``), the sink encodes one span of each such shape the ordinary
way and keeps it as a template, with holes for what varies (ids, times, ``seq``, ``mono_ns``,
``duration_ns`` in version 1, ``dropped_before`` once it is not 0: a shape is a shape twice, with
and without drops); the next events of that shape are one dict lookup and one string join each,
with no ``Event`` record built. The template is cut from the ordinary encoding
(whatever order ``schema.event_to_attributes`` gives) at a shape's second event, and kept only if
it renders that event exactly as the ordinary encoding does; anything else goes the ordinary way.
Templates (``pptrace.export.span_templates``) last while the rank and run id do; what they
hold of the subject's type (its name, whether it has ``to_pp_tensors``) is read when they are
made, as each flush's records read it.

Each export call is one write (``pptrace.export.segments``): its lines, or one gzip member or zstd
frame of them, in the current segment of a rotated trace.

    sink = FileSink(path, process_resource(rank, run_id))
    sink.export(events)      # one or more lines, flushed
    sink = FileSink(TraceSegments(path, "gzip", 1_000_000, 8_000_000), resource)
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry.sdk.resources import Resource

from pptrace.export.otlp_values import VALUES as _VALUES
from pptrace.export.otlp_values import array as _array
from pptrace.export.otlp_values import attributes as _attributes
from pptrace.export.otlp_values import esc as _esc
from pptrace.export.otlp_values import no_form as _no_form
from pptrace.export.segments import TraceSegments
from pptrace.export.span_templates import (
    P_DROPPED,
    P_DUR,
    P_MONO,
    P_SEQ,
    P_SPAN,
    P_START,
    P_TRACE,
    PROBE_RE,
    PROBES,
    Render,
    renderer,
)
from pptrace.model import messages, schema
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats
from pptrace.record.convert import RawEvents

__all__ = ["FileSink", "LineOut"]

#: Spans per line: keeps lines small enough to stream and to lose little to a torn write, and
#: the line's few copies (join, encode, write) within the CPU's caches: at 64 spans (about 200 kB)
#: writing costs a quarter of what it does at 512 (benchmarks/bench_export.py).
SPANS_PER_LINE = 64
_CACHE_LIMIT = 50_000
#: Shapes remembered (a template is a few kB); past it the sink starts again with none.
_TEMPLATE_LIMIT = 1024

_MASK64 = 2**64 - 1
# A span's envelope. Whole (version 1: what goes to a collector, Jaeger's tag search included):
# the kind by name, an empty status and the flags that say the (absent) parent is not remote.
# A compact trace file (version 2) writes the kind as its number (OTLP/JSON takes an enum either
# way; both loaders' fast paths read both) and leaves out the status of a call that returned and
# the flags, which say nothing of a root span: 43 bytes a span. An error span keeps its status.
# (the kind, the end of a span that returned, the end of an error span after its status)
_WHOLE = ('"kind":"SPAN_KIND_INTERNAL"', ',"status":{},"flags":256}', ',"flags":256}')
_COMPACT = ('"kind":1', "}", "}")
_RESOURCE_CONSTANTS = frozenset(schema.RESOURCE_KEYS.values())
_ATTACH, _EXTRACT = Direction.ATTACH, Direction.EXTRACT
#: A shape's template: its render, and the pieces and holes it interleaves (what the native
#: library's renderer reads: ``pptrace/record/native_render.cpp``).
Template = tuple[Render, tuple[str, ...], bytes]


class LineOut(Protocol):
    """Where a ``FileSink`` writes its lines: a ``TraceSegments``, or OTLP's shipper
    (``pptrace.export.otlp_json``)."""

    lock: Any
    rotated: int
    rotated_segments: int

    @property
    def base(self) -> str: ...

    @property
    def encode(self) -> Callable[[Sequence[str]], bytes]: ...

    @property
    def refused(self) -> object | None: ...

    def write_lines(self, lines: Sequence[str], events: int = 0) -> None: ...

    def make_room(self, nbytes: int) -> bool: ...

    def write(self, data: bytes, events: int = 0) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Write events and recorder stats to a process's trace file as OTLP/JSON lines.

    ``out`` is a path (one plain file) or a ``TraceSegments`` (compressed, rotated). Files are
    opened as ``pptrace.export.trace_file`` says: never through a symlink, never onto someone
    else's file, in a directory nobody else can write to unless ``allow_unsafe_dir``
    (``PPTRACE_DIR_UNSAFE_OK``) accepts one.
    """

    def __init__(self, out: str | LineOut, resource: Resource, scope_version: str = "0",
                 allow_unsafe_dir: bool = False) -> None:
        self._out: LineOut = TraceSegments(out, allow_unsafe_dir=allow_unsafe_dir) if (
            isinstance(out, str)) else out
        self.path = self._out.base
        self._scope = '{"name":"pptrace","version":' + _esc(scope_version) + "}"
        if resource.schema_url:
            self._tail = ']}],"schemaUrl":' + _esc(resource.schema_url) + "}]}"
        else:
            self._tail = "]}]}]}"
        # Version 2 or 3 (a resource that says so): each line's resource carries the constants of
        # the process as its spans were recorded (a rank learnt late changes them), and the
        # spans leave out what it says. ``_res`` is what they are compacted against.
        self._base = dict(resource.attributes)
        version = self._base.get(schema.VERSION)
        self._version = version if type(version) is int else 1
        self._compact = schema.compact_against(self._base) is not None
        # The main thread (its name and id: the first event's; a message, which has no thread
        # name, gives the id first) and the main device (the first tensor's).
        self._main_name: str | None = None
        self._main_id: int | None = None
        self._device: str | None = None
        self._subject: str | None = None  # the main subject type: the first event's
        self._heads: dict[tuple[RankInfo, str], tuple[str, dict[str, Any]]] = {}
        self._head = self._head_of(self._base)
        self._res: dict[str, Any] | None = None
        self._cache: dict[tuple[str, Any], str] = {}
        # Each span is its own trace, as an SDK span is, but its ids are not random: the
        # sink's random prefix and a counter. OTLP asks ids to be unique and non-zero, nothing
        # more; random ones were a sixth of a gzip-compressed call (24 bytes that no
        # compressor can shrink), a counter's change from one span to the next a few.
        self._prefix = random.getrandbits(64) | 1
        self._count = itertools.count(1).__next__
        # Templates hold the converter's context (rank, run id, prefix): they are kept from one
        # flush to the next while it stays the same. ``_seen``: shape -> True once seen, False
        # when no template fits.
        self._templates: dict[Any, Template] = {}
        self._seen: dict[Any, bool] = {}
        self._context: object = None
        #: Templates built (for tests and benchmarks).
        self.templates_built = 0

    def _ids(self) -> tuple[int, int]:
        """A new span's trace id and span id (unique, never zero; see ``__init__``)."""
        n = self._count()
        return (self._prefix << 64) | (n & _MASK64), ((self._prefix + n) & _MASK64) or 1

    def _head_of(self, attrs: Mapping[str, Any]) -> str:
        res = _attributes(attrs).lstrip(",")
        return ('{"resourceSpans":[{"resource":{' + res + '},"scopeSpans":[{"scope":'
                + self._scope + ',"spans":[')

    def _learning(self) -> bool:
        """Whether the main thread or device is still to be learnt from an event."""
        return self._compact and (self._main_name is None or self._device is None
                                  or self._subject is None)

    def _use(self, rank: RankInfo, run_id: str, first: Event | None = None,
             message: Sequence[MessageEvent] = ()) -> None:
        """Write the next spans under the resource of ``rank`` and ``run_id`` (version 2);
        ``first``: an event of the batch, whose thread is the main one if none is known yet,
        and its first tensor's device the main device if none is known yet; ``message``: the
        message events of the batch, which give the main thread's id and the main device the
        same way where no event gave them yet."""
        if not self._compact:
            return
        if first is not None and self._learning():
            device = next((m.device for m in first.tensors if m.is_tensor), None)
            self._learn_main(first.thread_name, first.thread_id, device, first.subject_type)
        elif message and (self._main_id is None or self._device is None):
            device = next((t.device for ev in message for t in ev.tensors if t.is_tensor), None)
            self._learn_main(None, message[0].thread_id, device)
        found = self._heads.get((rank, run_id))
        if found is None:
            if len(self._heads) > 16:
                self._heads.clear()
            own = schema.resource_attributes(rank, run_id, self._version, self._main_name,
                                             self._main_id, self._device, self._subject)
            # The base's own constants give way to the events' (a rank unknown then is absent).
            attrs = {k: v for k, v in {**self._base, **own}.items()
                     if k in own or k not in _RESOURCE_CONSTANTS}
            found = self._heads[(rank, run_id)] = (self._head_of(attrs), attrs)
        self._head, self._res = found

    def _learn_main(self, thread_name: str | None, thread_id: int, device: str | None,
                    subject: str | None = None) -> None:
        """Take what is not known yet of the main thread, device and subject type (a new
        resource, and the templates made under the old one are dropped, when something was
        learnt)."""
        learnt = False
        if self._main_id is None:
            self._main_id, learnt = thread_id, True
        if self._main_name is None and thread_name is not None and thread_id == self._main_id:
            self._main_name, learnt = thread_name, True
        if self._device is None and device is not None:
            self._device, learnt = device, True
        if self._subject is None and subject is not None:
            self._subject, learnt = subject, True
        if learnt:
            self._heads.clear()
            self._templates, self._seen, self._context = {}, {}, None

    def _attributes(self, attrs: Mapping[str, Any]) -> str:
        cache, values = self._cache, _VALUES
        parts = []
        for key, value in attrs.items():
            if type(value) is list:
                ck = (key, tuple(value))
                text = cache.get(ck)
                if text is None:
                    if len(cache) > _CACHE_LIMIT:
                        cache.clear()
                    text = cache[ck] = '{"key":' + _esc(key) + ',"value":' + _array(
                        value) + "}"
                parts.append(text)
            else:
                parts.append('{"key":' + _esc(key) + ',"value":'
                             + values.get(type(value), _no_form)(value) + "}")
        return ',"attributes":[' + ",".join(parts) + "]"

    def _span(self, name: str, start: int, end: int, attrs: Mapping[str, Any],
              error: tuple[str, str] | None = None, ids: tuple[int, int] | None = None) -> str:
        trace, span = ids if ids is not None else self._ids()
        kind, ok_tail, tail = _COMPACT if self._compact else _WHOLE
        text = (f'{{"traceId":"{trace:032x}","spanId":"{span:016x}","name":"{name}",'
                f'{kind},"startTimeUnixNano":"{start}",'
                f'"endTimeUnixNano":"{end}"' + self._attributes(attrs))
        if error is None:
            return text + ok_tail
        etype, message = error
        event = (f'{{"timeUnixNano":"{end}","name":"exception","attributes":['
                 '{"key":"exception.type","value":{"stringValue":' + _esc(etype) + "}},"
                 '{"key":"exception.message","value":{"stringValue":' + _esc(message) + "}}]}")
        status = ('"status":{"message":' + _esc(message) + ',"code":"STATUS_CODE_ERROR"}'
                  if message else '"status":{"code":"STATUS_CODE_ERROR"}')
        return text + ',"events":[' + event + "]," + status + tail

    def _event_span(self, event: Event, ids: tuple[int, int] | None = None) -> str:
        error = None
        if event.error_type is not None:
            error = (event.error_type, event.error_message or "")
        return self._span(schema.span_name(event.direction), event.start_ns, event.end_ns,
                          schema.event_to_attributes(event, self._res, exact_times=True), error,
                          ids)

    def _lines(self, spans: Sequence[str]) -> list[str]:
        return [self._head + ",".join(spans[i:i + SPANS_PER_LINE]) + self._tail
                for i in range(0, len(spans), SPANS_PER_LINE)]

    def export(self, events: Sequence[Event]) -> None:
        """Write the events' spans (from the raw tuples when given ``RawEvents``), in one
        write."""
        if isinstance(events, RawEvents):
            lines, count = self._raw_lines(events)
        else:
            lines, count = self._record_lines(events), len(events)
        if lines:
            self._out.write_lines(lines, count)

    def _record_lines(self, events: Sequence[Event]) -> list[str]:
        """The lines of the events' spans, a new line where the process's constants change."""
        lines: list[str] = []
        spans: list[str] = []
        at: tuple[RankInfo, str] | None = None
        for event in events:
            if self._compact and (event.rank, event.run_id) != at:
                lines += self._lines(spans)
                spans, at = [], (event.rank, event.run_id)
                self._use(event.rank, event.run_id, event)
            spans.append(self._event_span(event))
        return lines + self._lines(spans)

    def _raw_lines(self, batch: RawEvents) -> tuple[list[str], int]:
        """The lines ``_lines`` would make of the batch's spans, each joined once from pieces
        (a template's span is never a string of its own), and how many spans they hold."""
        if self._compact:
            first = None
            if self._learning():  # the first convertible event names the main thread
                first = next((e for i in range(len(batch.raws))
                              if (e := batch.event(i)) is not None), None)
            self._use(batch.convert.rank, batch.convert.run_id, first)
        if batch.convert.context != self._context:
            self._templates, self._seen = {}, {}
            self._context = batch.convert.context
        templates = self._templates
        shape = batch.convert.shape
        new_ids = self._ids
        head, tail = self._head, self._tail
        lines: list[str] = []
        pieces = [head]
        count = spans = 0
        raws = batch.raws
        # The native library's renderer writes each run of raws it can (a shape with a
        # template of ASCII pieces, in the common forms: native_render.cpp) and stops at the
        # first it cannot, which this loop writes; the same text, spans and ids either way.
        native = batch.convert.render if type(raws) is list else None
        ctx = (self._count, self._prefix, head, tail, batch.convert.threads, _ATTACH, _EXTRACT,
               SPANS_PER_LINE)
        at, end = 0, len(raws)
        while at < end:
            if native is not None and templates:
                at, count, moved = native(raws, at, templates, ctx, pieces, lines, count)
                spans += moved
                if at == end:
                    break
            i, raw = at, raws[at]
            at += 1
            found = shape(raw)
            render = None
            if found is not None:
                key = (found[0], found[5] != 0)  # a shape with drops is written with its count
                try:
                    template = templates.get(key)
                except Exception:  # a value whose hash or == fails: convert it on its own
                    found = None
                else:
                    render = None if template is None else template[0]
            if render is None or found is None:
                event = batch.event(i)
                if event is None:  # the recorder counted it
                    continue
                ids = new_ids()
                text = self._event_span(event, ids)
                if found is not None:
                    try:
                        self._learn(key, event, text, ids)
                    except Exception:  # a key that fails to compare in _seen: no template
                        pass
            if count == SPANS_PER_LINE:
                pieces.append(tail)
                lines.append("".join(pieces))
                spans += count
                pieces, count = [head], 0
            elif count:
                pieces.append(",")
            count += 1
            if render is None or found is None:
                pieces.append(text)
            else:
                _, seq, start, mono, duration, dropped = found
                trace, span = new_ids()
                render(pieces, f"{trace:032x}", f"{span:016x}", start, start + duration, seq,
                       mono, duration, dropped)
        if count:
            pieces.append(tail)
            lines.append("".join(pieces))
        return lines, spans + count

    def _learn(self, key: Any, event: Event, text: str, ids: tuple[int, int]) -> None:
        """Make the template of ``event``'s shape at its second sighting (one-off shapes cost
        no template), if it renders ``event`` as ``text``."""
        seen = self._seen
        state = seen.get(key)
        if state is False:
            return
        if state is None:
            if len(seen) >= _TEMPLATE_LIMIT:
                self._templates.clear()
                seen.clear()
            seen[key] = True
            return
        made = self._verified(event, text, ids)
        if made is None:
            seen[key] = False
            return
        self._templates[key] = made
        self.templates_built += 1

    def _verified(self, event: Event, text: str, ids: tuple[int, int]) -> Template | None:
        """The template of ``event``'s shape if it renders ``event`` (with ``ids``) as ``text``."""
        made = self._template(event)
        if made is not None:
            out: list[str] = []
            made[0](out, f"{ids[0]:032x}", f"{ids[1]:016x}", event.start_ns, event.end_ns,
                    event.seq, event.mono_ns, event.duration_ns, event.dropped_before)
            if "".join(out) != text:
                return None
        return made

    def template_of(self, event: Event) -> Render | None:
        """A template of ``event``'s shape that renders it exactly as ``export`` would (None
        when none does), for a caller that knows the shape of what it renders next."""
        ids = self._ids()
        made = self._verified(event, self._event_span(event, ids), ids)
        return None if made is None else made[0]

    def span_ids(self) -> tuple[str, str]:
        """A new span's trace id and span id, in hex, as ``export`` draws them."""
        trace, span = self._ids()
        return f"{trace:032x}", f"{span:016x}"

    def lines_of(self, spans: Sequence[str]) -> list[str]:
        """The lines ``export`` writes for these span texts (``SPANS_PER_LINE`` a line)."""
        return self._lines(spans)

    def _template(self, event: Event) -> Template | None:
        probe = event._replace(seq=P_SEQ, start_ns=P_START, mono_ns=P_MONO, duration_ns=P_DUR,
                               dropped_before=P_DROPPED if event.dropped_before else 0)
        text = self._event_span(probe, (P_TRACE, P_SPAN))
        order = [PROBES[m] for m in PROBE_RE.findall(text)]
        parts = PROBE_RE.split(text)
        render = renderer(parts, order)
        return None if render is None else (render, tuple(parts), bytes(order))

    def export_messages(self, events: Sequence[MessageEvent], rank: RankInfo,
                        run_id: str) -> None:
        """Write the message layer's events (``pptrace.model.messages``) of the process
        ``rank``, in one write; they are not attach/extract events (rotation counts none).
        In a version 2 file a receive whose begin and end are both here is one span
        (``messages.fold_begins``)."""
        if not events:
            return
        self._use(rank, run_id, message=events)
        own = schema.stats_to_attributes(RecorderStats(rank=rank, time_ns=0, run_id=run_id),
                                         self._res)
        constants = {k: v for k, v in own.items() if not k.startswith("pptrace.stats.")}
        spans = [self._span(messages.span_name(ev), *messages.span_times(ev),
                            {**messages.to_attributes(ev, self._res, both), **constants})
                 for ev, both in (messages.fold_begins(events) if self._compact
                                  else ((ev, False) for ev in events))]
        self._out.write_lines(self._lines(spans), 0)

    def export_stats(self, stats: RecorderStats) -> None:
        """Write one stats span, with what rotation has deleted so far, this write's own
        deletions included (none once the file was refused: the refusal was reported, with
        the events it cost, when it happened)."""
        out = self._out
        if out.refused is not None:
            return
        self._use(stats.rank, stats.run_id)
        with out.lock:
            while True:
                counted = dataclasses.replace(stats, rotated=out.rotated,
                                              rotated_segments=out.rotated_segments)
                data = out.encode(self._lines([self._span(
                    schema.SPAN_STATS, stats.time_ns, stats.time_ns,
                    schema.stats_to_attributes(counted, self._res))]))
                if not out.make_room(len(data)):
                    break
            out.write(data)

    def shutdown(self, timeout: float) -> None:
        """Close the file."""
        self._out.close()
