"""A process's trace on disk within a budget: numbered segments, the oldest deleted, counted.

``TraceSegments`` is what ``FileSink`` writes through. Without rotation it is one file (the name
``trace_file.trace_file_name`` gives, as before). With a segment size (``PPTRACE_ROTATE_MB``)
the process writes ``pptrace-rank3-pid42.000001.otlp.jsonl[.gz]``, ``.000002.``, ...: when the
next write would take the current segment past the size, the segment is closed and the next
one opened. When the next write would take the process's segments together past the budget
(``PPTRACE_MAX_MB``), its oldest segments are deleted first (never the one being written), and
what they held is counted: ``rotated`` (events) and ``rotated_segments``, which the stats span
carries (``FileSink.export_stats``), so that a reader knows the early history is gone and why.

Every write is whole lines (or one whole compressed member of them), so every segment starts
and ends with whole lines; one write larger than a segment gets a segment of its own. On disk a
process never holds more than the budget plus one write. Each segment is opened as
``trace_file`` opens a trace file (never through a symlink, never onto another user's file).
Segments an earlier activation of this process left are found at the first write, counted in
the budget, and deleted first.

    out = TraceSegments("traces/pptrace-rank3-pid42.otlp.jsonl", "gzip", 1_000_000, 8_000_000)
    out.write(out.encode(lines), events=64)
    out.rotated, out.rotated_segments          # what the budget has cost so far
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.export.trace_file import SUFFIXES, TraceFile, TraceFileRefused, encoder

__all__ = ["TraceSegments", "segment_name"]

_EXT = ".otlp.jsonl"
#: What an event span looks like in a line, to count the events of a segment this process did
#: not write in this activation (``"name":"pptrace.attach"`` or ``...extract``).
_EVENT_NAMES = (b'"name":"pptrace.attach"', b'"name":"pptrace.extract"')


def segment_name(path: str, index: int, compress: str = "none") -> str:
    """The name of segment ``index`` of the trace at ``path``: ``stem.000007.otlp.jsonl.gz``."""
    stem = path[:-len(_EXT)] if path.endswith(_EXT) else path
    ext = _EXT if path.endswith(_EXT) else ""
    return f"{stem}.{index:06d}{ext}{SUFFIXES[compress]}"


@dataclass(slots=True)
class _Segment:
    index: int
    path: str
    events: int  # event spans written into it


#: Decompressed bytes read at most to count one earlier segment's events: a segment holds at most
#: a few MB of lines, so a larger stream is not one this process wrote (a bomb), and counting
#: stops there with what it found (a lower bound), in bounded memory and time.
COUNT_LIMIT = 256 << 20
_CHUNK = 1 << 20


def _events_in(path: str, limit: int = COUNT_LIMIT) -> int:
    """The event spans a segment holds (of an earlier activation: read once, to count them),
    a chunk at a time; a torn or damaged compressed tail ends the count where it starts."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    counter = _NameCounter(limit)
    try:
        with os.fdopen(os.open(path, flags), "rb") as f:
            if path.endswith(".gz"):
                _count_gzip(f, counter)
            elif path.endswith(".zst"):
                import zstandard

                with zstandard.ZstdDecompressor().stream_reader(
                        f, read_across_frames=True) as reader:
                    while counter.room() and (chunk := reader.read(min(_CHUNK,
                                                                        counter.room()))):
                        counter.feed(chunk)
                    counter.commit()
            else:
                while counter.room() and (chunk := f.read(min(_CHUNK, counter.room()))):
                    counter.feed(chunk)
                counter.commit()
    except Exception:  # unreadable or damaged from here on: what was counted stands
        pass
    return counter.total


class _NameCounter:
    """Count ``_EVENT_NAMES`` in a stream of chunks, across chunk boundaries; ``commit`` makes
    the pending count final (a gzip member's only once it ended whole)."""

    _KEEP = max(len(n) for n in _EVENT_NAMES) - 1

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.total = 0
        self.pending = 0
        self.tail = b""

    def room(self) -> int:
        return max(self.left, 0)

    def feed(self, chunk: bytes) -> None:
        self.left -= len(chunk)
        buf = self.tail + chunk  # the tail is shorter than a name: every match ends in chunk
        self.pending += sum(buf.count(name) for name in _EVENT_NAMES)
        self.tail = buf[-self._KEEP:]

    def commit(self) -> None:
        self.total += self.pending
        self.pending = 0

    def drop(self) -> None:
        self.pending = 0
        self.tail = b""


def _count_gzip(f: object, counter: _NameCounter) -> None:
    """Count the whole gzip members of ``f`` (a torn last one left out), member by member."""
    read = f.read  # type: ignore[attr-defined]
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = b""
    while counter.room():
        if not data:
            data = read(_CHUNK)
            if not data:
                break
        try:
            out = d.decompress(data, min(_CHUNK, counter.room()))
        except zlib.error:
            break
        data = d.unconsumed_tail
        counter.feed(out)
        if d.eof:
            counter.commit()
            data = d.unused_data  # what follows the member (unconsumed_tail may repeat it)
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    counter.drop()


class TraceSegments:
    """Write a process's trace as one file or as numbered segments within a budget."""

    def __init__(self, path: str, compress: str = "none", segment_bytes: int = 0,
                 max_bytes: int = 0, allow_unsafe_dir: bool = False) -> None:
        self.base = path
        self.compress = compress
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes if segment_bytes else 0
        self.allow_unsafe_dir = allow_unsafe_dir
        self.encode = encoder(compress)
        #: Events and segments deleted to keep the budget.
        self.rotated = 0
        self.rotated_segments = 0
        #: Held across ``make_room`` and ``write`` by a caller whose data depends on the counts.
        self.lock = threading.RLock()
        self._kept: deque[_Segment] = deque()  # oldest first; the last one is being written
        self._sizes: dict[int, int] = {}  # index -> bytes, of the segments not being written
        self._out: TraceFile | None = None
        self._refused: TraceFileRefused | None = None
        self._warned = False
        self._skip = 0  # the highest index found under this trace's name at the first write
        if not segment_bytes:
            self._out = TraceFile(path + SUFFIXES[compress], allow_unsafe_dir)

    @property
    def path(self) -> str:
        """The file being written (the next segment's name before the first write)."""
        if self._out is not None:
            return self._out.path
        return segment_name(self.base, self._next_index(), self.compress)

    @property
    def refused(self) -> TraceFileRefused | None:
        """Why the trace was refused, once it was (final for this process)."""
        if self._out is not None and self._out.refused is not None:
            return self._out.refused
        return self._refused

    def paths(self) -> list[str]:
        """The files this trace holds now, oldest first."""
        if not self.segment_bytes:
            return [self._out.path] if self._out is not None else []
        return [s.path for s in self._kept]

    def on_disk(self) -> int:
        """Bytes this trace holds now (the segments kept, the one being written included)."""
        current = self._out.size if self._out is not None else 0
        return sum(self._sizes.values()) + current

    def _next_index(self) -> int:
        return max(self._kept[-1].index if self._kept else 0, self._skip) + 1

    def _earlier(self) -> None:
        """Adopt the segments an earlier activation of this process left (at the first write):
        regular files of this user with one link only; anything else under a segment's name is
        skipped, never read, followed nor deleted."""
        directory, name = os.path.split(self.base)
        ext = _EXT if name.endswith(_EXT) else ""
        stem = name[:len(name) - len(ext)]
        pattern = re.compile(re.escape(stem) + r"\.(\d{6})" + re.escape(ext) + r"(\.gz|\.zst)?")
        try:
            names = os.listdir(directory or ".")
        except OSError:
            return
        euid = os.geteuid() if hasattr(os, "geteuid") else None
        for index, found in sorted((int(m.group(1)), n) for n in names
                                   if (m := pattern.fullmatch(n))):
            path = os.path.join(directory, found)
            self._skip = max(self._skip, index)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (stat.S_ISREG(st.st_mode) and st.st_nlink == 1
                    and euid in (None, st.st_uid)):
                self._kept.append(_Segment(index, path, _events_in(path)))
                self._sizes[index] = st.st_size

    def _open_next(self) -> None:
        if self._out is not None:
            self._out.close()
            current = self._kept[-1]
            self._sizes[current.index] = self._out.size
        index = self._next_index()
        path = segment_name(self.base, index, self.compress)
        self._kept.append(_Segment(index, path, 0))
        self._out = TraceFile(path, self.allow_unsafe_dir)

    def make_room(self, nbytes: int) -> bool:
        """Rotate and delete as writing ``nbytes`` next requires; True if the counts changed."""
        if not self.segment_bytes:
            return False
        with self.lock:
            if self._refused is not None:
                raise TraceFileRefused(str(self._refused))
            if self._out is None:
                self._earlier()
                self._open_next()
            assert self._out is not None
            if self._out.size and self._out.size + nbytes > self.segment_bytes:
                self._open_next()
            before = self.rotated_segments
            while (len(self._kept) > 1
                   and sum(self._sizes.values()) + self._out.size + nbytes > self.max_bytes):
                self._delete(self._kept.popleft())
            return self.rotated_segments != before

    def _delete(self, segment: _Segment) -> None:
        self._sizes.pop(segment.index, None)
        try:
            os.unlink(segment.path)
        except FileNotFoundError:  # deleted by someone else: gone all the same, and counted
            pass
        except OSError as exc:
            logging.getLogger("pptrace").warning(
                "pptrace: cannot delete the old trace segment %s (%s); its events are "
                "counted as rotated", segment.path, exc.strerror)
        self.rotated += segment.events
        self.rotated_segments += 1
        if not self._warned:
            self._warned = True
            logging.getLogger("pptrace").info(
                "pptrace: trace budget of %d bytes reached: deleting the oldest segments of %s "
                "(counted in the stats span as pptrace.stats.rotated)", self.max_bytes,
                self.base)

    def write(self, data: bytes, events: int = 0) -> None:
        """Append ``data`` (from ``encode``), holding ``events`` event spans."""
        with self.lock:
            self.make_room(len(data))
            assert self._out is not None
            try:
                self._out.write(data)
            except TraceFileRefused as exc:
                self._refused = exc
                raise
            if self._kept:
                self._kept[-1].events += events

    def write_lines(self, lines: Sequence[str], events: int = 0) -> None:
        """Encode and append ``lines``, holding ``events`` event spans."""
        self.write(self.encode(lines), events)

    def close(self) -> None:
        """Close the file being written (a later write opens it again)."""
        with self.lock:
            if self._out is not None:
                self._out.close()
