"""The trace builder: collects decoded spans from every reader into one ``Trace``.

Every reader (OTLP/JSON, Jaeger, the fast path, a second loader process's result) hands what it
decodes to one ``TraceBuilder``: events per process, the latest recorder stats, the best-known
rank of each process, spans of other tools, and the input problems of the file being read.
Repeated parts of events (ranks, tensor metadata, tuples of keys, strings) are interned, so a
million events share a few thousand objects. ``build`` sorts each process's events into call
order, drops events read twice, and returns the ``Trace``.

    builder = TraceBuilder()
    builder.start_file("rank0.jsonl")
    for_each_otlp_span(document, builder)          # builder.span(...) for every span
    builder.end_file()
    trace = builder.build(["rank0.jsonl"])
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pptrace.load import messages as load_messages
from pptrace.load.fast import FastLines
from pptrace.load.layout import DIRECTION, MONO_NS, SEQ
from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError, inert
from pptrace.model.messages import SPAN_NAMES as MESSAGE_SPANS
from pptrace.model.messages import BadMessageSpan, MessageEvent
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import ForeignSpan, InputProblem, ProcessTrace, Trace

__all__ = ["MAX_PROBLEMS_PER_FILE", "ProcessKey", "TraceBuilder", "process_key"]

#: Problems of one file kept verbatim; the rest are counted in one line.
MAX_PROBLEMS_PER_FILE = 20
#: (host, pid, instance): a restarted container or another PID namespace reuses host and pid
#: but draws its own instance id; a trace written before instance ids has "" there.
ProcessKey = tuple[str, int, str]
_ORDER = operator.itemgetter(MONO_NS, DIRECTION, SEQ)  # call order; "attach" sorts first
_ATTACH = Direction.ATTACH


def process_key(rank: RankInfo) -> ProcessKey:
    """The key of the process that ``rank`` names."""
    return (rank.host, rank.pid, rank.instance)


def _rank_score(rank: RankInfo) -> int:
    fields = (rank.rank, rank.world_size, rank.pp_rank, rank.pp_size, rank.tp_rank, rank.tp_size)
    return sum(f is not None for f in fields)


class TraceBuilder:
    """Collects decoded spans, interning repeated records so that large traces stay small."""

    def __init__(self) -> None:
        self.events: dict[ProcessKey, list[Event]] = {}
        self.stats: dict[ProcessKey, RecorderStats] = {}
        self.messages: dict[ProcessKey, list[MessageEvent]] = {}  # the message layer's spans
        self.ranks: dict[ProcessKey, RankInfo] = {}
        self.proc_sources: dict[ProcessKey, list[str]] = {}
        self.foreign: list[ForeignSpan] = []
        self.problems: list[InputProblem] = []
        self.source = ""
        self.line: int | None = None
        self.accepted = 0  # spans decoded in the current file
        self.file_problems = 0
        self._rank_cache: dict[RankInfo, RankInfo] = {}
        self._meta_cache: dict[TensorMeta, TensorMeta] = {}
        self._tuple_cache: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._str_cache: dict[str, str] = {}
        self._noted: dict[ProcessKey, tuple[RankInfo, str]] = {}
        # (the rank last given to add_message, its process's message list, the file then)
        self._last_message: tuple[RankInfo | None, list[MessageEvent], str | None] = (
            None, [], None)
        self.fast = FastLines(self, self._tuple_cache)

    # --- problems ----------------------------------------------------------------------------

    def problem(self, message: str, line: int | None = None) -> None:
        """Record a skipped part of the current file (the first few are kept verbatim)."""
        self.file_problems += 1
        if self.file_problems <= MAX_PROBLEMS_PER_FILE:
            self.problems.append(
                InputProblem(self.source, self.line if line is None else line, inert(message))
            )

    def start_file(self, source: str) -> None:
        """Begin a file: its problems and accepted spans count from zero."""
        self.source = source
        self.line = None
        self.accepted = 0
        self.file_problems = 0

    def end_file(self) -> None:
        """End a file: the problems beyond the first few become one counted line."""
        extra = self.file_problems - MAX_PROBLEMS_PER_FILE
        if extra > 0:
            self.problems.append(
                InputProblem(self.source, None, f"{extra} more problems of this kind not listed")
            )

    # --- interning ---------------------------------------------------------------------------

    def intern_str(self, text: str) -> str:
        """The shared copy of ``text``."""
        return self._str_cache.setdefault(text, text)

    def intern_tuple(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        """The shared copy of a tuple of plain values."""
        return self._tuple_cache.setdefault(items, items)

    def intern_rank(self, rank: RankInfo) -> RankInfo:
        """The shared copy of ``rank``."""
        return self._rank_cache.setdefault(rank, rank)

    def intern_tensors(self, tensors: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
        """The shared copy of a tuple of tensor metadata (each one shared too)."""
        cached = self._tuple_cache.get(tensors)
        if cached is None:
            cached = tuple(self._meta_cache.setdefault(m, m) for m in tensors)
            self._tuple_cache[cached] = cached
        return cached

    def intern_event(self, ev: Event) -> Event:
        """``ev`` with its parts swapped for shared equal ones."""
        # Swap the event's parts for shared equal ones, which keeps 1M events within a few
        # hundred MB (and lets the analyzer compare shared parts by identity first).
        s, t = self.intern_str, self.intern_tuple
        return ev._replace(
            rank=self.intern_rank(ev.rank),
            tensors=self.intern_tensors(ev.tensors),
            keys_before=t(ev.keys_before),
            keys_after=t(ev.keys_after),
            subject_type=s(ev.subject_type),
            thread_name=s(ev.thread_name),
            run_id=s(ev.run_id),
            inserted_before_error=t(ev.inserted_before_error),
            extra=t(ev.extra),
            error_message=None if ev.error_message is None else s(ev.error_message),
        )

    # --- spans -------------------------------------------------------------------------------

    def _where(self) -> str:
        return f"{self.source}:{self.line}: " if self.line is not None else f"{self.source}: "

    def _check_version(self, attrs: Mapping[str, Any], resource: Mapping[str, Any]) -> None:
        version = attrs.get(schema.VERSION)
        if version is None:  # schema version 2: on the resource
            version = resource.get(schema.VERSION)
        if isinstance(version, int) and not isinstance(version, bool) and (
            version > schema.READ_VERSION or version < 1
        ):
            raise SchemaVersionError(
                f"pptrace schema version {version!r:.20} is not supported (this pptrace reads "
                f"versions 1 to {schema.READ_VERSION}; upgrade pptrace)",
                path=self.source,
                line=self.line,
            )

    def _note_process(self, key: ProcessKey, rank: RankInfo) -> None:
        best = self.ranks.get(key)
        if best is None or _rank_score(rank) >= _rank_score(best):
            self.ranks[key] = rank
        self._noted[key] = (rank, self.source)
        sources = self.proc_sources.setdefault(key, [])
        if self.source not in sources:
            sources.append(self.source)

    def decode_event(self, attrs: Mapping[str, Any], start_ns: int, end_ns: int,
                     resource: Mapping[str, Any], name: str = "") -> Event:
        """Decode and intern an event span (named ``name``) of a resource
        (SchemaVersionError on bad attributes)."""
        self._check_version(attrs, resource)
        return self.intern_event(
            schema.attributes_to_event(attrs, start_ns, end_ns, resource=resource, name=name))

    def add_stats(self, stats: RecorderStats) -> ProcessKey:
        """Keep a process's latest stats; return the process's key."""
        stats = dataclasses.replace(stats, rank=self.intern_rank(stats.rank))
        key = process_key(stats.rank)
        old = self.stats.get(key)
        if old is None or stats.time_ns >= old.time_ns:
            self.stats[key] = stats
        return key

    def merge_rank(self, key: ProcessKey, rank: RankInfo) -> None:
        """Take another reader's best rank for a process (``pptrace.load.worker``)."""
        best = self.ranks.get(key)
        if best is None or _rank_score(rank) >= _rank_score(best):
            self.ranks[key] = self.intern_rank(rank)

    def merge_sources(self, key: ProcessKey, sources: Iterable[str]) -> None:
        """Add the files another reader found a process in (``pptrace.load.worker``)."""
        have = self.proc_sources.setdefault(key, [])
        have.extend(s for s in sources if s not in have)

    def add_process_events(self, events: Iterable[Event]) -> None:
        """Add events read elsewhere, whose processes and sources are merged separately."""
        buckets = self.events
        for ev in events:
            buckets.setdefault(process_key(ev.rank), []).append(ev)

    def add_process_messages(self, rank: RankInfo, messages: Iterable[MessageEvent]) -> None:
        """Add message events read elsewhere, whose processes and sources are merged
        separately (not noted as the current file's, as ``add_message`` notes them)."""
        self.messages.setdefault(process_key(self.intern_rank(rank)), []).extend(messages)

    def add_events(self, events: Sequence[Event]) -> None:
        """``add_event`` for many events: a line's events share a few processes."""
        last: RankInfo | None = None
        bucket: list[Event] = []
        for ev in events:
            if ev.rank is not last:
                last = ev.rank
                key = process_key(last)
                bucket = self.events.setdefault(key, [])
                if self._noted.get(key) != (last, self.source):
                    self._note_process(key, last)
            bucket.append(ev)
        self.accepted += len(events)

    def add_message(self, rank: RankInfo, *messages: MessageEvent) -> None:
        """Add the message-layer events decoded from one span to their process."""
        last = self._last_message
        if last[0] is rank and last[2] is self.source:
            # The fast path hands one rank object per shape: a million spans of a file need
            # not hash and compare it each (two thirds of this method's time).
            last[1].extend(messages)
            self.accepted += 1
            return
        given = rank
        rank = self.intern_rank(rank)
        key = process_key(rank)
        bucket = self.messages.setdefault(key, [])
        bucket.extend(messages)
        if self._noted.get(key) != (rank, self.source):
            self._note_process(key, rank)
        self.accepted += 1
        self._last_message = (given, bucket, self.source)

    def add_messages(self, rank: RankInfo, messages: Sequence[MessageEvent], spans: int) -> None:
        """``add_message`` for the events of ``spans`` spans of one process at once."""
        self.add_message(rank, *messages)
        self.accepted += spans - 1

    def add_event(self, ev: Event) -> None:
        """Add a decoded event to its process."""
        self.add_events((ev,))

    def span(  # the readers' ``SpanSink`` protocol
        self,
        name: str,
        attrs: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
        trace_id: str,
        span_id: str,
        service: str,
        resource: Mapping[str, Any],
    ) -> None:
        if name == schema.SPAN_ATTACH or name == schema.SPAN_EXTRACT:
            try:
                ev = self.decode_event(attrs, start_ns, end_ns, resource, name)
            except SchemaVersionError as exc:
                if exc.path is not None:
                    raise  # an unsupported version: never skipped
                self.problem(f"skipped a {name} span: {exc}")
                return
            self.add_event(ev)
            return
        if name in MESSAGE_SPANS:
            self._check_version(attrs, resource)
            try:
                rank, _, messages = load_messages.decode_span(name, attrs, resource, start_ns,
                                                              end_ns)
            except BadMessageSpan as exc:
                self.problem(f"skipped a {name} span: {exc}")
                return
            self.add_message(rank, *messages)
            return
        if name == schema.SPAN_STATS:
            self._check_version(attrs, resource)
            try:
                stats = schema.attributes_to_stats(attrs, resource=resource)
            except SchemaVersionError as exc:
                self.problem(f"skipped a {name} span: {exc}")
                return
            self._note_process(self.add_stats(stats), stats.rank)
        else:
            self.foreign.append(
                ForeignSpan(name, service, trace_id, span_id, start_ns, end_ns, self.source)
            )
        self.accepted += 1

    # --- result ------------------------------------------------------------------------------

    def build(self, sources: Sequence[str]) -> Trace:
        """The ``Trace`` of everything added (each process's events leave the builder)."""
        self._last_message = (None, [], None)  # (its list leaves the builder below)
        processes: list[ProcessTrace] = []
        duplicates = 0
        for key in set(self.events) | set(self.stats) | set(self.messages):
            events = self.events.get(key, [])
            # (mono_ns, direction, seq): a str enum orders as its value, "attach" first.
            events.sort(key=_ORDER)
            unique = events
            if _has_duplicates(events):
                unique = []
                seen: set[tuple[bool, int]] = set()
                for ev in events:
                    ident = (ev.direction is _ATTACH, ev.seq)
                    if ident in seen:
                        duplicates += 1
                        continue
                    seen.add(ident)
                    unique.append(ev)
            processes.append(
                ProcessTrace(
                    rank=self.ranks[key],
                    events=tuple(unique),
                    stats=self.stats.get(key),
                    sources=tuple(self.proc_sources.get(key, ())),
                    messages=load_messages.in_call_order(self.messages.pop(key, ())),
                )
            )
            self.events.pop(key, None)
        if duplicates:
            self.problems.append(
                InputProblem(
                    "", None, f"{duplicates} duplicate events ignored (the same input read twice?)"
                )
            )
        processes.sort(key=_process_order)
        return Trace(
            processes=tuple(processes),
            foreign=tuple(self.foreign),
            problems=tuple(self.problems),
            sources=tuple(sources),
        )


def _has_duplicates(events: Sequence[Event]) -> bool:
    """Whether two events share a direction and a sequence number (C-speed sets of ints)."""
    attach = [ev[SEQ] for ev in events if ev[DIRECTION] is _ATTACH]
    extract = [ev[SEQ] for ev in events if ev[DIRECTION] is not _ATTACH]
    return len(set(attach)) < len(attach) or len(set(extract)) < len(extract)


def _process_order(proc: ProcessTrace) -> tuple[Any, ...]:
    r = proc.rank
    return (
        r.rank is None,
        r.rank if r.rank is not None else 0,
        r.pp_rank if r.pp_rank is not None else -1,
        r.tp_rank if r.tp_rank is not None else -1,
        r.host,
        r.pid,
        r.instance,
    )
