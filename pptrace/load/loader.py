"""The loader: every trace input pptrace reads, turned into one ``Trace``.

Inputs are paths: a file, a directory (its ``*.json``, ``*.jsonl``, ``*.ndjson``, ``*.jsonl.gz``
and ``*.jsonl.zst`` files, i.e. pptrace's per-rank files) or a glob. Each file, plain or
compressed (gzip; zstd with the ``zstandard`` package), holds one of:

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
schema version is always an error: this pptrace cannot read it. Only regular files are read, and
opening one never blocks: a FIFO, a device or a link to one is skipped and said (an error when
named directly), so a planted special file cannot hang the loader.

The numbered segments of a rotated trace (``pptrace-rank3-pid42.000007.otlp.jsonl.gz``) are one
process, read in segment order however they were named (``pptrace.load.segments``): a segment
missing between two others is a problem naming it; one rotated away meanwhile is just gone.

The parts: ``files`` (which files, each file's format), ``builder`` (spans into a ``Trace``),
``fast``, ``stream``, ``otlp``, ``jaeger`` (the readers), ``compressed`` (gzip, zstd),
``segments`` (a rotated trace's order), ``worker`` (the second process).

    trace = load_paths(["pptrace-traces/"])
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pptrace.load import worker as load_worker
from pptrace.load.builder import TraceBuilder
from pptrace.load.files import TRACE_SUFFIXES, error_detail, expand_paths, read_files
from pptrace.load.segments import is_segment, missing_segments, order_segments
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.heap import bulk
from pptrace.model.progress import Progress
from pptrace.model.trace import InputProblem, Trace

__all__ = ["TRACE_SUFFIXES", "Listed", "expand_paths", "finish", "list_files", "load_paths"]


def load_paths(paths: Iterable[str], progress: Progress | None = None, *,
               allow_empty: bool = False) -> Trace:
    """Load every trace file the paths name into one ``Trace``.

    ``allow_empty`` (``view --follow`` on a run that has not started yet): a path that does not
    exist yet, or a directory without trace files yet, gives an empty ``Trace`` (no processes,
    no sources) instead of an error.
    """
    # Loading allocates millions of objects and no reference cycles: without this, the
    # collector re-scans the growing heap over and over (a third of the time at 1M events).
    with bulk():
        return _load(paths, progress, allow_empty)


def _gone(path: str) -> bool:
    """Whether ``path`` is a rotated trace's segment that is no longer there (rotated away)."""
    return is_segment(path) and not os.path.lexists(path)


class Listed(NamedTuple):
    """The files some paths name, in reading order, with their sizes on disk."""

    files: list[str]
    sizes: dict[str, int]
    skipped: list[InputProblem]  # entries left out (not regular files, a segment named twice)
    named: bool  # whether the paths named any file at all (before sizes were read)


def list_files(paths: Iterable[str], allow_empty: bool = False) -> Listed:
    """The files the paths name, segments in order, each with its size (TraceInputError when
    a named one cannot be read)."""
    found, skipped = expand_paths(paths, allow_missing=allow_empty)
    found, twice = order_segments(found)
    skipped += twice
    files = []
    sizes = {}
    for f in found:
        try:
            sizes[f] = os.path.getsize(f)
        except OSError as exc:
            if _gone(f):
                continue  # deleted by rotation since it was listed
            raise TraceInputError(f"cannot read: {exc.strerror or exc}", path=f) from None
        files.append(f)
    return Listed(files, sizes, skipped, bool(found))


def _load(paths: Iterable[str], progress: Progress | None, allow_empty: bool) -> Trace:
    files, sizes, skipped, named = list_files(paths, allow_empty)
    if not files:
        if allow_empty or named:
            return Trace(processes=(), problems=tuple(skipped))
        raise TraceInputError("no input files given")
    total = sum(sizes.values())
    builder = TraceBuilder()
    builder.problems.extend(skipped)
    split = load_worker.split_files(files, load_worker.work_sizes(sizes))
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
    return finish(builder, files, errors)


def finish(builder: TraceBuilder, files: list[str], errors: list[TraceInputError]) -> Trace:
    """The ``Trace`` of what the files gave, each file that had to be skipped a problem (the
    error itself when every file was)."""
    gone = {err.path for err in errors if err.path is not None and _gone(err.path)}
    if gone:  # rotated away while this loader read the others: never there, as above
        errors = [err for err in errors if err.path not in gone]
        files = [f for f in files if f not in gone]
    if errors:
        if len(errors) == len(files):
            raise errors[0]
        for err in errors:
            builder.problems.append(
                InputProblem(err.path or "", err.line, f"file skipped: {error_detail(err)}")
            )
    builder.problems.extend(missing_segments(files))
    return builder.build(files)


def _read_with_worker(files: Sequence[str], split: int, sizes: dict[str, int], total: int,
                      builder: TraceBuilder, progress: Progress | None,
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
