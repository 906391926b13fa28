"""The start of a large trace, read first so that the viewer paints while the rest loads.

A trace of a long run is gigabytes; reading all of it takes seconds before anything can be
drawn. ``load_head`` reads about ``budget`` bytes of its lines, each file's share in proportion
to its size (a compressed file's by its estimated uncompressed size), a whole line at a time,
then cuts every process at one moment before which nothing of any process can be unread.

Why that moment is known: pptrace's recorder writes a process's records flush by flush, and
ends each flush with a stats span (``pptrace.recorder``, its time taken after the flush took
its records). Every record made before a flush took its records is written before that
flush's stats span. So once a file's latest stats span is read, every record of its process
made before the *previous* stats span's time is read too. Each file is read past its share
until it holds two stats spans (at most ``OVER`` times its share, or ``OVER_MIN``, more); the
moment is the earliest of the cut processes' second-latest stats times, and every process (cut
or read whole) keeps only what it recorded up to then, with the last stats it had written by
then (whose counts are then all in the trace). What is left is what a trace would hold had
every rank stopped at that moment: a ``Trace`` like a still-running engine's (the stats of a
process that lost records to the cut are not final), which the analyzer judges without
error-level findings for what is merely not there yet. A file in which two stats spans cannot
be found that way (another writer's spans, a damaged file) gives no head: the trace is read
whole.

Only files of JSON lines take part (``*.jsonl``, ``*.ndjson``, plain or compressed): a single
JSON document has no start to read. A trace under ``min_total`` bytes gives None as well.

    head = load_head(["pptrace-traces/"])      # Head | None
    head.trace, head.read, head.total          # bytes of lines read, of the whole trace's
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from pptrace.load.builder import ProcessKey, TraceBuilder, process_key
from pptrace.load.compressed import strip_compression
from pptrace.load.files import Head as FileHead
from pptrace.load.files import read_files
from pptrace.load.loader import finish, list_files
from pptrace.load.worker import work_sizes
from pptrace.model.heap import bulk
from pptrace.model.records import RecorderStats
from pptrace.model.trace import Trace

__all__ = ["BUDGET", "MIN_TOTAL", "Head", "load_head"]

#: Bytes of lines read first: about 6,000 attach/extract events of pptrace's own files.
BUDGET = 8 << 20
#: A trace smaller than this is read whole at once (its whole load takes under a second).
MIN_TOTAL = 96 << 20
#: How far past its share a file is read to find its two stats spans: this many times the
#: share, and at least ``OVER_MIN`` bytes (a busy rank writes megabytes a flush).
OVER = 4
OVER_MIN = 8 << 20
_LINE_FILES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class Head:
    """The first part of a trace, every process cut at one moment."""

    trace: Trace
    #: Bytes of lines read (uncompressed), and the whole trace's in the same measure (a
    #: compressed file's estimated).
    read: int
    total: int
    #: Bytes on disk of the whole trace's files.
    on_disk: int
    #: The moment every process was cut at (wall clock, ns), None when no file was cut.
    horizon_ns: int | None

    @property
    def fraction(self) -> float:
        """About how much of the trace this is (0 to 1)."""
        return min(1.0, self.read / self.total) if self.total else 1.0


class _Builder(TraceBuilder):
    """A builder that also keeps every stats span of each process, and the times of those
    each file held."""

    def __init__(self) -> None:
        super().__init__()
        self.all_stats: dict[ProcessKey, list[RecorderStats]] = {}
        self.file_stats: dict[tuple[str, ProcessKey], list[int]] = {}

    def add_stats(self, stats: RecorderStats) -> ProcessKey:
        key = super().add_stats(stats)
        self.all_stats.setdefault(key, []).append(stats)
        self.file_stats.setdefault((self.source, key), []).append(stats.time_ns)
        return key

    def _keys_in(self, source: str) -> list[ProcessKey]:
        """The processes this file held records or stats of (so far)."""
        return [k for k, found in self.proc_sources.items() if source in found]

    def ready(self, source: str) -> bool:
        """Whether this file held two stats spans of every process it held anything of."""
        keys = self._keys_in(source)
        return bool(keys) and all(len(self.file_stats.get((source, k), ())) >= 2 for k in keys)

    def moment(self, source: str) -> int:
        """The latest moment before which everything of this file's processes that this file
        holds was read: the earliest of its processes' second-latest stats times in it."""
        return min(sorted(self.file_stats[(source, k)])[-2] for k in self._keys_in(source))

    def stats_at(self, key: ProcessKey, moment: int) -> RecorderStats | None:
        """The process's last stats span taken at or before ``moment``."""
        taken = [s for s in self.all_stats.get(key, ()) if s.time_ns <= moment]
        return max(taken, key=lambda s: s.time_ns) if taken else None


def load_head(paths: Iterable[str], budget: int = BUDGET, min_total: int = MIN_TOTAL, *,
              allow_empty: bool = False) -> Head | None:
    """About the first ``budget`` bytes (at most an eighth) of the trace the paths name, every
    process cut at one moment; None when it is under ``min_total`` bytes, not all JSON lines,
    or has no such moment (TraceInputError as ``load_paths``; ``allow_empty`` as there)."""
    files, sizes, skipped, _ = list_files(paths, allow_empty)
    if not files or sum(sizes.values()) < min_total:
        return None
    if not all(strip_compression(f).endswith(_LINE_FILES) for f in files):
        return None
    work = work_sizes(sizes)
    total = sum(work.values())
    budget = min(budget, total // 8)  # a start, never most of the trace
    with bulk():
        builder = _Builder()
        builder.problems.extend(skipped)
        heads = {}
        for f in files:
            share = max(1, budget * work[f] // total)
            heads[f] = FileHead(share, over=max(OVER * share, OVER_MIN),
                                ready=lambda f=f: builder.ready(f))  # type: ignore[misc]
        errors = read_files(files, sizes, builder, None, heads=heads)
        cut = {f for f, h in heads.items() if h.cut}
        if not cut:
            return None  # every file was read whole: that is the trace, not a head of it
        if not all(builder.ready(f) for f in cut):
            return None  # a cut file without two stats spans: no moment is safe
        # (per file: a rotated trace's earlier segment, cut, holds an earlier moment than the
        # process's later segments)
        horizon = min(builder.moment(f) for f in cut)
        trace = _cut_at(finish(builder, files, errors), horizon, builder)
    read = sum(h.read if h.cut else work[f] for f, h in heads.items())
    return Head(trace, read=read, total=total, on_disk=sum(sizes.values()), horizon_ns=horizon)


def _cut_at(trace: Trace, horizon: int, builder: _Builder) -> Trace:
    """Every process as it stood at ``horizon``: its records made by then, and the stats it
    had written by then (whose counts are then all in the trace)."""
    procs = []
    for p in trace.processes:
        events = tuple(e for e in p.events if e.start_ns <= horizon)
        messages = tuple(m for m in p.messages if m.wall_ns <= horizon)
        if len(events) != len(p.events) or len(messages) != len(p.messages) \
                or (p.stats is not None and p.stats.time_ns > horizon):
            # Stopped here, as a running engine's rank is: no last word from its recorder.
            stats = builder.stats_at(process_key(p.rank), horizon)
            if stats is not None:
                stats = replace(stats, rank=p.rank, final=False)
            p = replace(p, events=events, messages=messages, stats=stats)
        procs.append(p)
    return Trace(processes=tuple(procs), foreign=trace.foreign, problems=trace.problems,
                 sources=trace.sources)
