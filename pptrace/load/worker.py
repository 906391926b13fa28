"""A second loader process: it reads some of the files while this process reads the others.

Reading pptrace's own files is pure CPython work (cutting numbers out of about 3 KB of OTLP/JSON
per event), so one process reads about 100k events a second on this kind of machine. With two cores
and several files, ``pptrace.load.loader`` starts one worker (``python -m pptrace.load.worker``)
for the later files and reads the earlier ones itself. The worker does not build events: each event
whose span shape it has seen before (``pptrace.load.fast``) becomes a row of five integers
``(shape, seq, start, mono, duration)``, sent as raw int64s; every
shape and every other event travel as compact JSON (each shared part once, in a table), and
everything else the worker found (stats, foreign spans, problems, per-file errors) as plain
JSON. No pickle: nothing the worker sends can run code here.

Frames on the worker's stdout, each ``type (1 byte) + length (8 bytes, little-endian) + data``:
``P`` bytes read so far, ``R`` the result as JSON, ``A`` the rows. The files to read come as
JSON on its stdin. A worker that fails in any way (cannot start, dies, sends something
malformed) only costs time: this process then reads those files itself.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from typing import IO, Any

from pptrace.load import fingerprints
from pptrace.load.builder import TraceBuilder
from pptrace.load.compressed import COMPRESSED_SUFFIXES, expansion
from pptrace.load.fast_messages import rebuild_rows
from pptrace.load.files import error_detail, open_regular, read_files
from pptrace.load.layout import with_numbers
from pptrace.load.messages import from_json, to_json
from pptrace.load.messages import pack as pack_messages
from pptrace.load.messages import unpack as unpack_messages
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.trace import ForeignSpan, InputProblem

__all__ = ["COMPRESSED_WORK", "FIELD_TABLES", "MIN_PARALLEL_BYTES", "Worker", "main",
           "split_files", "take", "work_sizes"]

_HEADER = struct.Struct("<cQ")
_ROW = 5  # shape, seq, start, mono, duration
#: Below this many bytes in all, a second process costs more than it saves (start-up ~0.2 s).
MIN_PARALLEL_BYTES = 32 << 20
_new_event = tuple.__new__
_MODULE = os.path.realpath(os.path.abspath(__file__))  # which pptrace is reading


#: About how many times its size a compressed trace file is to read (gzip shrinks pptrace's
#: files 20 to 40 times), where its first bytes are not sampled.
COMPRESSED_WORK = 10
_SAMPLED = 256  # files whose first 64 KiB are decompressed to judge their work; the rest: names
_SAMPLE = 1 << 16


def work_sizes(sizes: dict[str, int]) -> dict[str, int]:
    """Each file's size as work to read: a compressed file's is about its uncompressed size,
    judged from its first 64 KiB (of up to 256 files; the others by name, ``COMPRESSED_WORK``).

    A split by bytes on disk would give the worker too little or nothing, and by a fixed ratio
    one file too many or too few: files of one run compress differently (stage 0's extracts
    less well than the last stage's attaches), and eight files leave no room for error.
    """
    out = {}
    sample = len(sizes) <= _SAMPLED
    for f, n in sizes.items():
        ratio = None
        if sample:
            try:
                with open_regular(f) as fh:
                    ratio = expansion(fh.read(_SAMPLE) or b"")
            except (OSError, TraceInputError):
                pass
        elif f.endswith(COMPRESSED_SUFFIXES):
            ratio = COMPRESSED_WORK
        out[f] = int(n * ratio) if ratio is not None else n
    return out


def split_files(files: Sequence[str], sizes: dict[str, int]) -> int:
    """Index where the worker's share starts (files before it are read here); 0: no worker.

    The split is by size, the later files to the worker, so that problems and errors keep the
    order in which the files are named. This process also builds the worker's events, so it
    takes a little less than half.
    """
    total = sum(sizes[f] for f in files)
    if len(files) < 2 or total < MIN_PARALLEL_BYTES or _cpus() < 2:
        return 0
    if os.environ.get("PPTRACE_LOAD_WORKERS", "").strip() == "0":
        return 0
    done = 0
    for i, f in enumerate(files):
        if done + sizes[f] / 2 >= 0.46 * total:
            return max(1, i)
        done += sizes[f]
    return len(files) - 1


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- the worker's side ---------------------------------------------------------------------------


def _frame(out: IO[bytes], kind: bytes, data: bytes) -> None:
    out.write(_HEADER.pack(kind, len(data)))
    out.write(data)
    out.flush()


# How each of ``Event``'s fields travels, by name: "plain" as itself, "strings"/"tuples" as an
# index into a shared table, "ranks"/"tensors" likewise, "direction" as its value. A field added
# to ``Event`` without an entry here stops this module at import (and its test names it).
FIELD_TABLES: dict[str, str] = {
    "direction": "direction", "seq": "plain", "rank": "ranks", "start_ns": "plain",
    "mono_ns": "plain", "duration_ns": "plain", "thread_id": "plain", "thread_name": "strings",
    "subject_type": "strings", "subject_pp_capable": "plain", "tensors": "tensors",
    "keys_before": "tuples", "keys_after": "tuples", "returned_none": "plain",
    "error_type": "plain", "error_message": "plain", "inserted_before_error": "tuples",
    "dropped_before": "plain", "run_id": "strings", "extra": "tuples",
}
if set(FIELD_TABLES) != set(Event._fields):
    raise ImportError(
        "pptrace.load.worker: Event's fields and FIELD_TABLES differ: "
        f"{sorted(set(FIELD_TABLES) ^ set(Event._fields))}")
_PLAN = tuple(FIELD_TABLES[name] for name in Event._fields)


def _rank_json(rank: RankInfo) -> list[Any]:
    return list(asdict(rank).values())


def _tensors_json(tensors: tuple[TensorMeta, ...]) -> list[list[Any]]:
    return [list(m) for m in tensors]


def _tuple_json(items: tuple[Any, ...]) -> list[Any]:
    return [list(x) if isinstance(x, tuple) else x for x in items]


def _same(value: Any) -> Any:
    return value


_AS_JSON: dict[str, Callable[[Any], Any]] = {
    "ranks": _rank_json, "tensors": _tensors_json, "tuples": _tuple_json, "strings": _same}


class _Packer:
    """Events as compact JSON: each shared part (rank, tensors, tuples of keys, strings) once,
    in a table, and each event as a list of numbers and table indices. Decoding one costs the
    receiving process about as much as building the event, far less than a schema decode."""

    def __init__(self) -> None:
        self.tables: dict[str, list[Any]] = {"ranks": [], "tensors": [], "tuples": [],
                                             "strings": []}
        self._index: dict[tuple[str, Any], int] = {}

    def _put(self, table: str, obj: Any) -> int:
        key = (table, obj)
        i = self._index.get(key)
        if i is None:
            rows = self.tables[table]
            i = self._index[key] = len(rows)
            rows.append(_AS_JSON[table](obj))
        return i

    def event(self, ev: Event) -> list[Any]:
        """One event as a list, field by field in ``Event``'s order."""
        out: list[Any] = []
        values: tuple[Any, ...] = ev
        for kind, value in zip(_PLAN, values, strict=True):
            if kind == "plain":
                out.append(value)
            elif kind == "direction":
                out.append(value.value)
            else:
                out.append(self._put(kind, value))
        return out


class _Unpacker:
    """The receiving side of ``_Packer``; shared parts go through the builder's interning."""

    def __init__(self, builder: TraceBuilder, tables: dict[str, list[Any]]) -> None:
        self.tables: dict[str, list[Any]] = {
            "ranks": [builder.intern_rank(RankInfo(*r)) for r in tables["ranks"]],
            "tensors": [builder.intern_tensors(tuple(map(_meta, ts))) for ts in tables["tensors"]],
            "tuples": [
                builder.intern_tuple(tuple(tuple(x) if isinstance(x, list) else x for x in t))
                for t in tables["tuples"]
            ],
            "strings": [builder.intern_str(t) for t in tables["strings"]],
        }

    def event(self, packed: list[Any]) -> Event:
        """The event a ``_Packer.event`` list stands for (ValueError when it is malformed)."""
        values: list[Any] = []
        tables = self.tables
        for kind, value in zip(_PLAN, packed, strict=True):
            if kind == "plain":
                values.append(value)
            elif kind == "direction":
                values.append(_DIRECTIONS[value])
            else:
                values.append(tables[kind][value])
        event: Event = _new_event(Event, values)
        return event


_DIRECTIONS = {d.value: d for d in Direction}
_META_FIELDS = TensorMeta._fields


def _meta(values: list[Any]) -> TensorMeta:
    """A ``TensorMeta`` from its fields' values in order (as ``_tensors_json`` gave them)."""
    if len(values) != len(_META_FIELDS):
        raise ValueError("a tensor's fields do not match TensorMeta's")
    named = dict(zip(_META_FIELDS, values, strict=True))
    named["shape"] = tuple(named["shape"])
    return TensorMeta(**named)


def _stats_json(stats: RecorderStats) -> dict[str, Any]:
    """Recorder stats field by field (not as span attributes: the schema's encoding may leave
    out what a resource carries)."""
    out = {f.name: getattr(stats, f.name) for f in fields(RecorderStats)}
    out["rank"] = asdict(stats.rank)
    out["sink_dropped"] = [list(item) for item in stats.sink_dropped]
    return out


def _stats(values: dict[str, Any]) -> RecorderStats:
    """The ``RecorderStats`` a ``_stats_json`` dict stands for (TypeError when malformed)."""
    named = dict(values)
    named["rank"] = RankInfo(**named["rank"])
    named["sink_dropped"] = tuple((str(k), int(n)) for k, n in named["sink_dropped"])
    return RecorderStats(**named)


def _encode(builder: TraceBuilder, errors: Sequence[TraceInputError],
            fatal: SchemaVersionError | None) -> tuple[bytes, bytes]:
    """(the result as JSON, the rows as int64s) for what ``builder`` read."""
    fast = builder.fast
    packed = fast.rows if fast.rows is not None else array("q")
    msg = fast.messages
    pack = _Packer()
    result = {
        "module": _MODULE,
        "shapes": [None if t is None else pack.event(t) for t in fast.shapes],
        "prints": fast.prints,
        # Message rows follow the event rows in the same int64 frame, from this row on.
        "message_rows_at": len(packed) // _ROW,
        "message_shapes": [None if s is None else [asdict(s[0]), to_json(s[1]), s[3]]
                           for s in msg.templates],
        "message_prints": msg.prints,
        "events": [pack.event(ev) for evs in builder.events.values() for ev in evs],
        "tables": pack.tables,
        "stats": [_stats_json(s) for s in builder.stats.values()],
        "ranks": [[*k, asdict(r)] for k, r in builder.ranks.items()],
        "sources": [[*k, v] for k, v in builder.proc_sources.items()],
        "foreign": [list(asdict(s).values()) for s in builder.foreign],
        "messages": [[*k, asdict(builder.ranks[k]), pack_messages(ms)]
                     for k, ms in builder.messages.items()],
        "problems": [[p.source, p.line, p.message] for p in builder.problems],
        "errors": [_error_json(e) for e in errors],
        "fatal": None if fatal is None else _error_json(fatal),
    }
    return json.dumps(result).encode(), packed.tobytes() + (
        msg.rows.tobytes() if msg.rows is not None else b"")


def _error_json(exc: TraceInputError) -> list[Any]:
    return [error_detail(exc), exc.path, exc.line]


def main() -> int:
    """Read the files named on stdin (JSON) and write frames to stdout."""
    out = sys.stdout.buffer
    files = json.loads(sys.stdin.buffer.read())
    builder = TraceBuilder()
    builder.fast.rows = array("q")
    builder.fast.messages.rows = array("q")
    sizes = {f: os.path.getsize(f) if os.path.isfile(f) else 0 for f in files}
    fatal: SchemaVersionError | None = None

    def progress(done: int, total: int, source: str) -> None:
        _frame(out, b"P", struct.pack("<Q", done))

    try:
        errors = read_files(files, sizes, builder, progress)
    except SchemaVersionError as exc:
        errors, fatal = [], exc
    data, rows = _encode(builder, errors, fatal)
    _frame(out, b"R", data)
    _frame(out, b"A", rows)
    return 0


# --- this process's side -------------------------------------------------------------------------


class Worker:
    """A running worker: ``poll`` for its progress, ``finish`` to take its result into a builder."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = list(files)
        self.done = 0  # bytes the worker has read
        self._buf = bytearray()
        self._frames: dict[bytes, bytes] = {}
        env = dict(os.environ, PPTRACE_ENABLED="0")  # never trace the loader itself
        here = os.path.dirname(os.path.dirname(_MODULE))
        if os.path.basename(here) not in ("site-packages", "dist-packages"):
            # A source checkout: let the worker find this very pptrace (an installed one is
            # found as here; a site directory is never put ahead of the standard library).
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pptrace.load.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(self.files).encode())
            self.proc.stdin.close()
            self._fd = self.proc.stdout.fileno()
            os.set_blocking(self._fd, False)
        except OSError:  # it died at once: reap it, and this process reads the files
            self.close()
            raise

    def _read(self, timeout: float) -> bool:
        """Read what is there (waiting up to ``timeout``); False at the end of the stream."""
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return True
        while True:
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self._parse()
                return False
            self._buf += chunk
        self._parse()
        return True

    def _parse(self) -> None:
        buf, n = self._buf, _HEADER.size
        pos = 0
        while len(buf) - pos >= n:
            kind, length = _HEADER.unpack_from(buf, pos)
            if len(buf) - pos - n < length:
                break
            data = bytes(buf[pos + n : pos + n + length])
            pos += n + length
            if kind == b"P" and length == 8:
                self.done = struct.unpack("<Q", data)[0]
            else:
                self._frames[kind] = data
        del buf[:pos]

    def poll(self) -> int:
        """Take in the worker's progress without waiting; return its bytes read."""
        try:
            self._read(0)
        except (OSError, ValueError):  # ``finish`` meets the same failure and falls back
            pass
        return self.done

    def finish(self, tick: Callable[[int], None]) -> tuple[dict[str, Any], bytes] | None:
        """Wait for the result, calling ``tick(bytes read)`` meanwhile; None if it failed."""
        try:
            while self._read(0.1):
                tick(self.done)
            self.proc.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.close()
            return None
        data, rows = self._frames.get(b"R"), self._frames.get(b"A")
        if self.proc.returncode != 0 or data is None or rows is None or len(rows) % (8 * _ROW):
            return None
        try:
            result = json.loads(data)
        except ValueError:
            return None
        if not isinstance(result, dict) or result.get("module") != _MODULE:
            return None  # another pptrace answered: its reading could differ from this one's
        return result, rows

    def close(self) -> None:
        """Stop the worker (when this process gave up first) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def take(builder: TraceBuilder, result: dict[str, Any], rows: bytes
         ) -> tuple[list[TraceInputError], SchemaVersionError | None]:
    """Add a worker's result to ``builder``; return its per-file errors and fatal error.

    Everything is decoded before anything is added, so that a malformed result (ValueError,
    TypeError, KeyError, IndexError) leaves the builder as it was.
    """
    unpack = _Unpacker(builder, result["tables"])
    shapes = [None if s is None else unpack.event(s) for s in result["shapes"]]
    events = [unpack.event(s) for s in result["events"]]
    packed = array("q")
    packed.frombytes(rows)
    at = result.get("message_rows_at", len(packed) // _ROW) * _ROW
    templates = [None if s is None else (from_json(s[1]), bool(s[2]))
                 for s in result.get("message_shapes", ())]
    # Each shape's process and its list, found once per shape (not hashed once per row).
    by_rank: dict[RankInfo, list[MessageEvent]] = {}
    buckets = [None if s is None else by_rank.setdefault(RankInfo(**s[0]), [])
               for s in result.get("message_shapes", ())]
    msg_rows = packed[at:]
    made_rows = rebuild_rows(templates, msg_rows, result.get("message_prints", ()),
                             builder.fast.shared)
    shape_of = msg_rows[::_ROW]
    for shape, made in zip(shape_of, made_rows, strict=True):
        bucket = buckets[shape]
        if bucket is None:  # (rebuild_rows raises first)
            raise ValueError("a row names a message shape that was not cached")
        bucket.extend(made)
    spans = {id(bucket): 0 for bucket in by_rank.values()}
    for shape, n in Counter(shape_of).items():
        spans[id(buckets[shape])] += n
    del packed[at:]
    it = iter(packed)
    first = len(events)
    for i, seq, begin, mono, dur in zip(it, it, it, it, it, strict=True):
        t = shapes[i]
        if t is None:
            raise ValueError("a row names a shape that was not cached")
        events.append(with_numbers(t, seq, begin, mono, dur))
    for row, fps in result.get("prints", ()):
        ev = events[first + row]
        events[first + row] = ev._replace(
            tensors=fingerprints.put_back(ev.tensors, fps, builder.fast.shared))
    stats = [_stats(values) for values in result["stats"]]
    ranks = [((host, pid, inst), RankInfo(**fields))
             for host, pid, inst, fields in result["ranks"]]
    sources = [((host, pid, inst), list(map(str, found)))
               for host, pid, inst, found in result["sources"]]
    foreign = [ForeignSpan(*f) for f in result["foreign"]]
    messages = [(RankInfo(**fields), unpack_messages(ms))
                for _, _, _, fields, ms in result.get("messages", ())]
    problems = [InputProblem(*p) for p in result["problems"]]
    errors = [TraceInputError(m, path=p, line=n) for m, p, n in result["errors"]]
    fatal = result["fatal"]
    fatal_error = None if fatal is None else SchemaVersionError(fatal[0], path=fatal[1],
                                                                line=fatal[2])
    builder.add_process_events(events)
    for s in stats:
        builder.add_stats(s)
    for key, rank in ranks:
        builder.merge_rank(key, rank)
    for key, found in sources:
        builder.merge_sources(key, found)
    builder.foreign.extend(foreign)
    for rank, ms in messages:
        for m in ms:
            builder.add_message(rank, m)
    for rank, ms in by_rank.items():
        if ms:  # (a shape that no row names: its one span was read the ordinary way)
            builder.add_messages(rank, ms, spans[id(ms)])
    builder.problems.extend(problems)
    return errors, fatal_error


if __name__ == "__main__":
    sys.exit(main())
