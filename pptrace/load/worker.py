"""A second loader process: it reads some of the files while this process reads the others.

Reading pptrace's own files is pure CPython work (cutting numbers out of about 3 KB of OTLP/JSON
per event), so one process reads about 100k events a second on this kind of machine. With two cores
and several files, ``pptrace.load.loader`` starts one worker (``python -m pptrace.load.worker``)
for the later files and reads the earlier ones itself. The worker does not build events: each event
whose span shape it has seen before (``pptrace.load.fast``) becomes a row of five integers
``(shape, seq, start, mono, duration)``, sent as raw int64s; every
shape and every other event travel as compact JSON (each shared part once, in a table:
``pptrace.load.worker_json``), and
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
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import IO, Any

from pptrace.load import fingerprints
from pptrace.load.builder import ProcessKey, TraceBuilder, process_key
from pptrace.load.compressed import COMPRESSED_SUFFIXES, expansion
from pptrace.load.fast_messages import rebuild_rows
from pptrace.load.files import error_detail, open_regular, read_files
from pptrace.load.layout import parts_of
from pptrace.load.messages import from_json, to_json
from pptrace.load.messages import pack as pack_messages
from pptrace.load.messages import unpack as unpack_messages
from pptrace.load.worker_json import FIELD_TABLES, Packer, Unpacker, stats, stats_json
from pptrace.model.errors import SchemaVersionError, TraceInputError
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo
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


def _encode(builder: TraceBuilder, errors: Sequence[TraceInputError],
            fatal: SchemaVersionError | None) -> tuple[bytes, bytes]:
    """(the result as JSON, the rows as int64s) for what ``builder`` read."""
    fast = builder.fast
    packed = fast.rows if fast.rows is not None else array("q")
    msg = fast.messages
    pack = Packer()
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
        "stats": [stats_json(s) for s in builder.stats.values()],
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
    unpack = Unpacker(builder, result["tables"])
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
    rebuild_rows(templates, msg_rows, result.get("message_prints", ()), buckets,
                 builder.fast.shared)
    del packed[at:]
    rows_by_process = _event_rows(shapes, packed, result.get("prints", ()), builder.fast.shared)
    taken_stats = [stats(values) for values in result["stats"]]
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
    for key, evs in rows_by_process.items():
        builder.events.setdefault(key, []).extend(evs)
    for s in taken_stats:
        builder.add_stats(s)
    for key, rank in ranks:
        builder.merge_rank(key, rank)
    for key, found in sources:
        builder.merge_sources(key, found)
    builder.foreign.extend(foreign)
    # (their processes' ranks and files came in ``ranks`` and ``sources`` above: the file this
    # process read last is none of theirs)
    for rank, ms in messages:
        builder.add_process_messages(rank, ms)
    for rank, ms in by_rank.items():
        if ms:  # (a shape that no row names: its one span was read the ordinary way)
            builder.add_process_messages(rank, ms)
    builder.problems.extend(problems)
    return errors, fatal_error


def _event_rows(shapes: Sequence[Event | None], packed: array[int], prints: Sequence[list[Any]],
                shared: dict[Any, Any] | None) -> dict[ProcessKey, list[Event]]:
    """The events a worker's attach/extract rows stand for, per process, in row order (each
    shape's parts and process found once, not per row; ValueError or TypeError when
    malformed)."""
    parts = [None if t is None else parts_of(t) for t in shapes]
    made: list[Event] = []
    append = made.append
    it = iter(packed)
    for i, seq, begin, mono, dur in zip(it, it, it, it, it, strict=True):
        shape = parts[i]
        if shape is None:
            raise ValueError("a row names a shape that was not cached")
        direction, rank, tail = shape
        append(_new_event(Event, (direction, seq, rank, begin, mono, dur, *tail)))
    for row, fps in prints:
        ev = made[row]
        made[row] = ev._replace(tensors=fingerprints.put_back(ev.tensors, fps, shared))
    out: dict[ProcessKey, list[Event]] = {}
    lists = [None if t is None else out.setdefault(process_key(t.rank), []) for t in shapes]
    for ev, i in zip(made, packed[::_ROW], strict=True):
        lists[i].append(ev)  # type: ignore[union-attr]  # (a row of an uncached shape: above)
    return out


if __name__ == "__main__":
    sys.exit(main())
