"""The loader: every trace input pptrace reads, turned into one ``Trace``.

Inputs are paths: a file, a directory (its ``*.json``, ``*.jsonl`` and ``*.ndjson`` files, i.e.
pptrace's per-rank files) or a glob. Each file holds one of:

- JSON lines, one document a line: pptrace's own files and the OpenTelemetry Collector's file
  exporter (``TracesData`` objects), or Jaeger v3 API stream chunks (``{"result": ...}``);
- a single JSON document: an OTLP ``TracesData`` object, a Jaeger v3 API response
  (``{"result": {"resourceSpans": ...}}``), or Jaeger's JSON (``{"data": [...]}``).

JSON lines stream: one line in memory at a time; pptrace's own lines go through a fast path
(``pptrace.load.fast``) that decodes each distinct span shape once. A single document, and a
line over 16 MB, is walked span by span (``pptrace.load.stream``): about twice its size in
memory rather than the ten times a whole ``json.loads`` takes. Spans of other tools are kept
aside as ``ForeignSpan``. With two or more cores and at least 32 MB in two or more files, a
second process reads the later files meanwhile (``pptrace.load.worker``; off with
``PPTRACE_LOAD_WORKERS=0``): the result is the same, only sooner.

Bad input never raises anything but ``TraceInputError`` (one line: file, line, what). A part of
an otherwise usable input that cannot be read (a torn last line, a line that is not JSON, a span
with wrong types) is skipped and counted as an ``InputProblem``; a file with nothing usable is an
error (or, among several files, a problem when the others are usable). A span written by a newer
schema version is always an error: this pptrace cannot read it.

    trace = load_paths(["pptrace-traces/"])
"""

from __future__ import annotations

import gc
import glob
import json
import operator
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pptrace.load import worker as load_worker
from pptrace.load.fast import FastLines
from pptrace.load.jaeger import for_each_jaeger_span
from pptrace.load.otlp import BadShape, for_each_otlp_span
from pptrace.load.stream import stream_document
from pptrace.model import schema
from pptrace.model.errors import SchemaVersionError, TraceInputError, inert
from pptrace.model.progress import Progress
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import ForeignSpan, InputProblem, ProcessTrace, Trace

__all__ = ["TRACE_SUFFIXES", "expand_paths", "load_paths"]

TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson")
_LINE_SUFFIXES = (".jsonl", ".ndjson")
_MAX_PROBLEMS_PER_FILE = 20
_PROGRESS_STEP = 1 << 20
_BIG_LINE = 16 << 20  # characters: above this a line is walked span by span
_ORDER = operator.itemgetter(4, 0, 1)  # an event's (mono_ns, direction, seq)
_ATTACH = Direction.ATTACH


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Resolve files, directories and globs into a sorted, de-duplicated list of files."""
    out: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            out.append(path)

    for raw in paths:
        path = os.path.expanduser(raw)
        if os.path.isdir(path):
            found = sorted(
                os.path.join(path, name)
                for name in os.listdir(path)
                if name.endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(path, name))
            )
            if not found:
                raise TraceInputError(
                    f"no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)}) in directory",
                    path=raw,
                )
            for f in found:
                add(f)
        elif os.path.exists(path):
            add(path)
        elif glob.has_magic(path):
            matches = sorted(p for p in glob.glob(path) if os.path.isfile(p))
            if not matches:
                raise TraceInputError("no file matches this pattern", path=raw)
            for f in matches:
                add(f)
        else:
            raise TraceInputError("no such file or directory", path=raw)
    return out


def _rank_score(rank: RankInfo) -> int:
    fields = (rank.rank, rank.world_size, rank.pp_rank, rank.pp_size, rank.tp_rank, rank.tp_size)
    return sum(f is not None for f in fields)


class _Builder:
    """Collects decoded spans, interning repeated records so that large traces stay small."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, int], list[Event]] = {}
        self.stats: dict[tuple[str, int], RecorderStats] = {}
        self.ranks: dict[tuple[str, int], RankInfo] = {}
        self.proc_sources: dict[tuple[str, int], list[str]] = {}
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
        self._noted: dict[tuple[str, int], tuple[RankInfo, str]] = {}
        self.fast = FastLines(self)

    # --- problems ----------------------------------------------------------------------------

    def problem(self, message: str, line: int | None = None) -> None:
        """Record a skipped part of the current file (the first few are kept verbatim)."""
        self.file_problems += 1
        if self.file_problems <= _MAX_PROBLEMS_PER_FILE:
            self.problems.append(
                InputProblem(self.source, self.line if line is None else line, inert(message))
            )

    def start_file(self, source: str) -> None:
        self.source = source
        self.line = None
        self.accepted = 0
        self.file_problems = 0

    def end_file(self) -> None:
        extra = self.file_problems - _MAX_PROBLEMS_PER_FILE
        if extra > 0:
            self.problems.append(
                InputProblem(self.source, None, f"{extra} more problems of this kind not listed")
            )

    # --- interning ---------------------------------------------------------------------------

    def _s(self, text: str) -> str:
        return self._str_cache.setdefault(text, text)

    def _t(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._tuple_cache.setdefault(items, items)

    def _rank(self, rank: RankInfo) -> RankInfo:
        return self._rank_cache.setdefault(rank, rank)

    def _tensors(self, tensors: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
        cached = self._tuple_cache.get(tensors)
        if cached is None:
            cached = tuple(self._meta_cache.setdefault(m, m) for m in tensors)
            self._tuple_cache[cached] = cached
        return cached

    def _intern(self, ev: Event) -> Event:
        # Swap the event's parts for shared equal ones, which keeps 1M events within a few
        # hundred MB (and lets the analyzer compare shared parts by identity first).
        s, t = self._s, self._t
        return ev._replace(
            rank=self._rank(ev.rank),
            tensors=self._tensors(ev.tensors),
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

    def _check_version(self, attrs: Mapping[str, Any]) -> None:
        version = attrs.get(schema.VERSION)
        if isinstance(version, int) and not isinstance(version, bool) and (
            version > schema.SCHEMA_VERSION or version < 1
        ):
            raise SchemaVersionError(
                f"pptrace schema version {version!r:.20} is not supported (this pptrace reads "
                f"versions 1 to {schema.SCHEMA_VERSION}; upgrade pptrace)",
                path=self.source,
                line=self.line,
            )

    def _note_process(self, key: tuple[str, int], rank: RankInfo) -> None:
        best = self.ranks.get(key)
        if best is None or _rank_score(rank) >= _rank_score(best):
            self.ranks[key] = rank
        self._noted[key] = (rank, self.source)
        sources = self.proc_sources.setdefault(key, [])
        if self.source not in sources:
            sources.append(self.source)

    def decode_event(self, attrs: Mapping[str, Any], start_ns: int, end_ns: int) -> Event:
        """Decode and intern an event span (SchemaVersionError on bad attributes)."""
        self._check_version(attrs)
        return self._intern(schema.attributes_to_event(attrs, start_ns, end_ns))

    def add_stats(self, stats: RecorderStats) -> tuple[str, int]:
        """Keep a process's latest stats; return the process's key."""
        stats = _replace_rank(stats, self._rank(stats.rank))
        key = (stats.rank.host, stats.rank.pid)
        old = self.stats.get(key)
        if old is None or stats.time_ns >= old.time_ns:
            self.stats[key] = stats
        return key

    def merge_rank(self, key: tuple[str, int], rank: RankInfo) -> None:
        """Take another reader's best rank for a process (``pptrace.load.worker``)."""
        best = self.ranks.get(key)
        if best is None or _rank_score(rank) >= _rank_score(best):
            self.ranks[key] = self._rank(rank)

    def add_process_events(self, events: Iterable[Event]) -> None:
        """Add events read elsewhere, whose processes and sources are merged separately."""
        buckets = self.events
        for ev in events:
            buckets.setdefault((ev.rank.host, ev.rank.pid), []).append(ev)

    def add_events(self, events: Sequence[Event]) -> None:
        """``add_event`` for many events: a line's events share a few processes."""
        last: RankInfo | None = None
        bucket: list[Event] = []
        for ev in events:
            if ev.rank is not last:
                last = ev.rank
                key = (last.host, last.pid)
                bucket = self.events.setdefault(key, [])
                if self._noted.get(key) != (last, self.source):
                    self._note_process(key, last)
            bucket.append(ev)
        self.accepted += len(events)

    def add_event(self, ev: Event) -> None:
        """Add a decoded event to its process."""
        self.add_events((ev,))

    def span(
        self,
        name: str,
        attrs: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
        trace_id: str,
        span_id: str,
        service: str,
    ) -> None:
        if name == schema.SPAN_ATTACH or name == schema.SPAN_EXTRACT:
            try:
                ev = self.decode_event(attrs, start_ns, end_ns)
            except SchemaVersionError as exc:
                if exc.path is not None:
                    raise  # an unsupported version: never skipped
                self.problem(f"skipped a {name} span: {exc}")
                return
            self.add_event(ev)
            return
        if name == schema.SPAN_STATS:
            self._check_version(attrs)
            try:
                stats = schema.attributes_to_stats(attrs)
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
        processes: list[ProcessTrace] = []
        duplicates = 0
        for key in set(self.events) | set(self.stats):
            events = self.events.get(key, [])
            # (mono_ns, direction, seq): a str enum orders as its value, "attach" first.
            events.sort(key=_ORDER)
            unique = events
            if _has_duplicates(events):
                unique = []
                seen: set[tuple[bool, int]] = set()
                for ev in events:
                    ident = (ev[0] is _ATTACH, ev[1])  # (direction, seq), without enum lookups
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
    attach = [ev[1] for ev in events if ev[0] is _ATTACH]
    extract = [ev[1] for ev in events if ev[0] is not _ATTACH]
    return len(set(attach)) < len(attach) or len(set(extract)) < len(extract)


def _replace_rank(stats: RecorderStats, rank: RankInfo) -> RecorderStats:
    object.__setattr__(stats, "rank", rank)
    return stats


def _process_order(proc: ProcessTrace) -> tuple[Any, ...]:
    r = proc.rank
    return (
        r.rank is None,
        r.rank if r.rank is not None else 0,
        r.pp_rank if r.pp_rank is not None else -1,
        r.tp_rank if r.tp_rank is not None else -1,
        r.host,
        r.pid,
    )


# --- files ---------------------------------------------------------------------------------------


def _dispatch(doc: Any, builder: _Builder) -> None:
    """Route one parsed JSON document to the reader for its format."""
    if isinstance(doc, list):
        for item in doc:
            _dispatch(item, builder)
        return
    if not isinstance(doc, dict):
        raise BadShape(f"expected a JSON object, found {type(doc).__name__}")
    if "resourceSpans" in doc or "resource_spans" in doc:
        for_each_otlp_span(doc, builder)
    elif "result" in doc:
        result = doc["result"]
        if not isinstance(result, dict):
            raise BadShape(f"'result' should be an object, found {type(result).__name__}")
        for_each_otlp_span(result, builder)
    elif "data" in doc:
        for_each_jaeger_span(doc, builder)
    elif "error" in doc:
        raise BadShape(f"the document is an error response: {str(doc['error'])[:120]}")
    elif not doc:
        return  # "{}": an empty export
    else:
        keys = ", ".join(sorted(map(str, doc))[:5])
        raise BadShape(
            "not a trace: expected 'resourceSpans' (OTLP), 'result' (Jaeger v3 API) or "
            f"'data' (Jaeger JSON), found keys {keys}"
        )


def _not_text(chunk: bytes) -> tuple[int, str] | None:
    """(1-based line, what) of the first sign that ``chunk`` is not JSON text, else None."""
    nul = chunk.find(b"\0")
    if nul >= 0:
        return chunk.count(b"\n", 0, nul) + 1, "binary data, not a JSON trace"
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(chunk) - 4:  # not just a character cut by the chunk's end
            line = chunk.count(b"\n", 0, exc.start) + 1
            return line, "not UTF-8 text: this is not a JSON trace"
    return None


def _read_lines(
    path: str, f: Any, builder: _Builder, tick: Callable[[int], None], first_can_switch: bool
) -> bool:
    """Read JSON lines; return False when the first line shows it is one multi-line document."""
    fast = builder.fast
    lineno = 0
    for raw in f:
        lineno += 1
        tick(len(raw))
        builder.line = lineno
        if b"\0" in raw:
            raise TraceInputError("binary data, not a JSON trace", path=path, line=lineno)
        if fast.line(raw):  # before strip(): a line of pptrace's is megabytes, copied for nothing
            first_can_switch = False
            builder.accepted += 1
            continue
        text = raw.strip()
        if not text:
            continue
        try:
            line = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceInputError(
                "not UTF-8 text: this is not a JSON trace", path=path, line=lineno
            ) from None
        try:
            if len(line) > _BIG_LINE and line[:1] == "{":
                # One huge document on one line: walk it span by span, not as one tree.
                before = builder.file_problems
                stream_document(line, builder)
                first_can_switch = False
                if builder.file_problems == before:
                    builder.accepted += 1
                continue
            doc = json.loads(line)
        except BadShape as exc:
            builder.problem(f"{exc}; line skipped")
            continue
        except RecursionError:
            if first_can_switch:
                return False
            builder.problem("JSON nested too deeply; line skipped")
            continue
        except ValueError as exc:
            if first_can_switch:
                return False
            if not raw.endswith(b"\n"):
                builder.problem("truncated last line skipped (the writer stopped mid-line?)")
            else:
                msg = getattr(exc, "msg", str(exc))
                builder.problem(f"line is not JSON ({msg}); skipped")
            continue
        first_can_switch = False
        try:
            before = builder.file_problems
            _dispatch(doc, builder)
            if builder.file_problems == before:
                builder.accepted += 1
        except (BadShape, RecursionError) as exc:  # Python >= 3.12 parses deeper than it recurses
            builder.problem(f"{exc}; line skipped")
    return True


def _read_document(path: str, builder: _Builder, tick: Callable[[int], None]) -> None:
    """Read one JSON document span by span (``pptrace.load.stream``), in about twice its size."""
    with open(path, "rb") as f:
        data = f.read()
    tick(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceInputError("not UTF-8 text: this is not a JSON trace", path=path) from None
    del data
    builder.line = None
    try:
        if not stream_document(text, builder):
            _dispatch(json.loads(text), builder)
    except json.JSONDecodeError as exc:
        if not builder.accepted:
            raise TraceInputError(
                f"not valid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno
            ) from None
        # A document cut short (its writer stopped): keep the spans before the damage.
        builder.problem(f"not valid JSON from here on ({exc.msg}); the spans before it were read",
                        line=exc.lineno)
        return
    except RecursionError:
        raise TraceInputError("not a trace: JSON nested too deeply", path=path) from None
    except BadShape as exc:
        raise TraceInputError(str(exc), path=path) from None
    builder.accepted += 1


def _read_file(path: str, builder: _Builder, tick: Callable[[int], None]) -> None:
    builder.start_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            if not head.strip():
                raise TraceInputError("empty file: no trace data", path=path, line=1)
            bad = _not_text(head)
            if bad is not None:
                raise TraceInputError(bad[1], path=path, line=bad[0])
            f.seek(0)
            as_lines = path.endswith(_LINE_SUFFIXES)
            done = _read_lines(path, f, builder, tick, first_can_switch=not as_lines)
        if not done:
            _read_document(path, builder, tick)
    except OSError as exc:
        raise TraceInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    builder.end_file()
    if builder.file_problems and not builder.accepted:
        first = next(p for p in builder.problems if p.source == path)
        raise TraceInputError(first.message, path=path, line=first.line)


class _Ticker:
    """Counts bytes read in one file and reports progress every megabyte."""

    def __init__(self, progress: Progress | None, base: int, total: int, path: str) -> None:
        self.progress, self.base, self.total, self.path = progress, base, total, path
        self.pending = self.reported = 0

    def __call__(self, n: int) -> None:
        self.pending += n
        if self.progress is not None and self.pending - self.reported >= _PROGRESS_STEP:
            self.reported = self.pending
            self.progress(min(self.total, self.base + self.pending), self.total, self.path)


def load_paths(paths: Iterable[str], progress: Progress | None = None) -> Trace:
    """Load every trace file the paths name into one ``Trace``."""
    # Loading allocates millions of objects and no reference cycles: without this, the
    # collector re-scans the growing heap over and over (a third of the time at 1M events).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(paths, progress)
    finally:
        if enabled:
            gc.enable()


def _load(paths: Iterable[str], progress: Progress | None) -> Trace:
    files = expand_paths(paths)
    if not files:
        raise TraceInputError("no input files given")
    sizes = {}
    for f in files:
        try:
            sizes[f] = os.path.getsize(f)
        except OSError as exc:
            raise TraceInputError(f"cannot read: {exc.strerror or exc}", path=f) from None
    total = sum(sizes.values())
    builder = _Builder()
    split = load_worker.split_files(files, sizes)
    worker = None
    if split:
        try:
            worker = load_worker.Worker(files[split:])
        except OSError:
            worker = None
    if worker is None:
        errors = read_files(files, sizes, builder, progress)
    else:
        try:
            errors = _read_with_worker(files, split, sizes, total, builder, progress, worker)
        finally:
            worker.close()
    if errors:
        if len(errors) == len(files):
            raise errors[0]
        for err in errors:
            builder.problems.append(
                InputProblem(err.path or "", err.line, f"file skipped: {_bare(err)}")
            )
    return builder.build(files)


def _read_with_worker(files: Sequence[str], split: int, sizes: dict[str, int], total: int,
                      builder: _Builder, progress: Progress | None,
                      worker: load_worker.Worker) -> list[TraceInputError]:
    """Read ``files[:split]`` here while the worker reads the rest; then take its result."""
    mine = sum(sizes[f] for f in files[:split])
    grand = total
    report = None
    if progress is not None:
        def report(done: int, total: int, source: str) -> None:  # this process's bytes
            progress(min(grand, done + worker.poll()), grand, source)

    errors = read_files(files[:split], sizes, builder, report)
    theirs = files[split:]
    last = theirs[-1]
    got = worker.finish(lambda n: progress(min(total, mine + n), total, last)
                        if progress is not None else None)
    if got is not None:
        try:
            their_errors, fatal = load_worker.take(builder, *got)
        except (ValueError, TypeError, KeyError, IndexError, SchemaVersionError):
            pass  # a malformed result: read those files here, as without a worker
        else:
            if fatal is not None:
                raise fatal
            if progress is not None:
                progress(total, total, last)
            return errors + their_errors
    return errors + read_files(theirs, sizes, builder, progress, base=mine)


def read_files(files: Sequence[str], sizes: dict[str, int], builder: _Builder,
               progress: Progress | None, base: int = 0) -> list[TraceInputError]:
    """Read files in order into ``builder``; return the errors of files that were skipped.

    A ``SchemaVersionError`` (a span this pptrace cannot read) is raised at once.
    """
    total = base + sum(sizes[f] for f in files)
    done = base
    errors: list[TraceInputError] = []
    for path in files:
        tick = _Ticker(progress, done, total, path)
        kept_problems = len(builder.problems)
        try:
            _read_file(path, builder, tick)
        except SchemaVersionError:
            raise
        except TraceInputError as exc:
            # Roll back this file's problems: the whole file becomes one problem (or the error).
            del builder.problems[kept_problems:]
            errors.append(exc)
        done += sizes[path]
        if progress is not None:
            progress(done, total, path)
    return errors


def _bare(exc: TraceInputError) -> str:
    text = str(exc)
    if exc.path is not None:
        prefix = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text

