"""The trace on one clock: each host's offset estimated from causal pairs, and applied.

The analyzer pairs sends with receives by order (and attaches with extracts), never by time;
each pair is a causal constraint (``pptrace.analyze.clocks``), found before the analysis
(``pptrace.analyze.first_clocks``). From them ``clocks_from`` estimates one offset per host
(processes that name one host share its clock), or per process when the host's processes
disagree (containers that report one hostname on different machines), and ``shifted`` writes
the trace as the reference process's clock would have: every wall-clock field (an event's
start, a message's start, a stats span's time) minus its process's offset; the monotonic clock,
which orders a process's own records, is left alone.

The analyzer judges that aligned trace, once, and hands it on (``Analysis.trace``) with the
``Clocks`` it applied, so the report, the viewer and the Perfetto export show what the findings
were judged on. Each estimate is applied, also where its bounds hold 0 (as NTP applies its own): the
middle of the bounds moves with the clock, so the aligned times, and every decision made on them,
are the same whatever the skew. A clock no pair bounds keeps its own times. Pure: no I/O.

    clocks = clocks_from(trace, constraints, "message pair")
    if any(clocks.offsets):
        trace = shifted(trace, clocks)
    clocks.aligned(process, ns)      # process's time ns on the reference clock
    clocks.shared(a, b)              # a and b stamp one clock (times tell their order)
    clocks.uncertainty_ns(a, b)      # how far a's and b's aligned times may be off each other
    order(dt_ns, clocks.uncertainty_ns(a, b), "the wait began")   # "0.062 s before ..."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pptrace.analyze.clocks import Before, ClockOffsets, Offset, estimate
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["UNALIGNED", "Clocks", "Unit", "clocks_from", "order", "shifted"]

_INF = float("inf")
#: What a time on another process says where no bound holds the two clocks' offset.
UNALIGNED = "on clocks the pairs do not align both ways"

#: How the offsets were estimated: one per host, or one per process.
BY_HOST, BY_PROCESS = "host", "process"


@dataclass(frozen=True, slots=True)
class Unit:
    """One clock: a host's (the processes that name it) or one process's, with its offset."""

    name: str  # the host name, or the process's rank label
    processes: tuple[int, ...]
    offset: Offset  # against the reference unit's clock (offset_ns is subtracted)


@dataclass(frozen=True, slots=True)
class Clocks:
    """What alignment found for one trace and what it applied.

    ``offsets[i]`` is subtracted from every wall-clock time of process ``i`` (all 0 when nothing
    was applied); ``applied``: the estimates were applied (several clocks, consistent pairs);
    ``units`` are the clocks estimated (``by`` host or process), the first being
    the reference; ``source`` names the kind of pair used (``message pair``), ``pairs`` counts
    them; ``consistent`` is False when the pairs contradict each other even process by process
    (a clock stepped or drifted within the trace), and then nothing is applied."""

    offsets: tuple[int, ...]
    applied: bool = False
    units: tuple[Unit, ...] = ()
    by: str = BY_HOST
    source: str = ""
    pairs: int = 0
    consistent: bool = True

    def aligned(self, process: int, ns: int) -> int:
        """Process ``process``'s wall-clock time ``ns`` on the reference clock."""
        return ns - self.offsets[process]

    def shared(self, a: int, b: int) -> bool:
        """Processes ``a`` and ``b`` are known to stamp one clock: one host's, whose pairs
        agree with one clock (so their times may be compared to tell order)."""
        return self.by == BY_HOST and self.consistent and any(
            a in u.processes and b in u.processes for u in self.units)

    def uncertainty_ns(self, a: int, b: int) -> float:
        """How far the distance between an aligned time of process ``a`` and one of ``b`` may
        be from the true one: 0 on one clock; across clocks, what each offset's bounds leave
        (the reference's is exact); inf where a clock was not aligned both ways."""
        unit_a = next((u for u in self.units if a in u.processes), None)
        unit_b = next((u for u in self.units if b in u.processes), None)
        if a == b or unit_a is unit_b:  # one clock (no units: one process, or not estimated)
            return 0.0
        if not self.applied or unit_a is None or unit_b is None:
            return _INF
        return sum(0.0 if u is self.units[0] else
                   max(u.offset.offset_ns - u.offset.low_ns, u.offset.high_ns - u.offset.offset_ns)
                   for u in (unit_a, unit_b))


def order(dt_ns: int, uncertainty_ns: float, event: str) -> str:
    """A time ``dt_ns`` after ``event`` (on another process: ``uncertainty_ns`` from
    ``Clocks.uncertainty_ns``) in words: ``0.062 s before the wait began``; ``within the clocks'
    uncertainty (±15.000 ms) of when the wait began`` where the clocks cannot tell which came
    first; ``0.062 s after the wait began, on clocks the pairs do not align both ways``."""
    said = f"{abs(dt_ns) / 1e9:.3f} s {'before' if dt_ns <= 0 else 'after'} {event}"
    if uncertainty_ns == _INF:
        return f"{said}, {UNALIGNED}"
    if uncertainty_ns and abs(dt_ns) <= uncertainty_ns:
        return f"within the clocks' uncertainty (±{uncertainty_ns / 1e6:.3f} ms) of when {event}"
    return said


def _units(trace: Trace, by: str) -> list[tuple[str, list[int]]]:
    """The clocks to estimate: per host name (a process naming none is its own), or per
    process; the first holds process 0."""
    units: dict[str, list[int]] = {}
    for i, p in enumerate(trace.processes):
        key = p.rank.host if by == BY_HOST and p.rank.host else f"\0{i}"
        units.setdefault(key, []).append(i)
    return [(f"host {key}" if not key.startswith("\0") else
             trace.processes[members[0]].rank.label(), members)
            for key, members in units.items()]


def _tightest(constraints: Sequence[Before]) -> list[Before]:
    """The tightest constraint between each two processes (the only one the bounds keep)."""
    best: dict[tuple[int, int], int] = {}
    for c in constraints:
        key, weight = (c.a, c.b), c.b_ns - c.a_ns
        if weight < best.get(key, weight + 1):
            best[key] = weight
    return [Before(a, 0, b, weight) for (a, b), weight in best.items()]


def _estimate(trace: Trace, constraints: Sequence[Before],
              by: str) -> tuple[list[tuple[str, list[int]]], ClockOffsets]:
    units = _units(trace, by)
    unit_of = [0] * len(trace.processes)
    for u, (_, members) in enumerate(units):
        for i in members:
            unit_of[i] = u
    mapped = [Before(unit_of[c.a], c.a_ns, unit_of[c.b], c.b_ns) for c in constraints]
    return units, estimate(mapped, len(units))


def clocks_from(trace: Trace, constraints: Sequence[Before], source: str,
                pairs: int | None = None) -> Clocks:
    """Each process's offset from the causal pairs' constraints (``source`` names the pairs,
    ``pairs`` counts them where fewer constraints stand for them): one per host, or one per
    process where a host's pairs contradict one clock."""
    n = len(trace.processes)
    if n < 2:
        return Clocks((0,) * n)
    count = len(constraints) if pairs is None else pairs
    constraints = _tightest(constraints)
    units, found = _estimate(trace, constraints, BY_HOST)
    by = BY_HOST
    if not found.consistent and len(units) < n:  # one host name, several clocks
        units, found = _estimate(trace, constraints, BY_PROCESS)
        by = BY_PROCESS
    named = tuple(Unit(name, tuple(members), found.offsets[u])
                  for u, (name, members) in enumerate(units))
    offsets = [0] * n
    applied = found.consistent and len(named) > 1 and bool(constraints)
    if applied:
        for u in named:
            for i in u.processes:
                offsets[i] = u.offset.offset_ns
    return Clocks(tuple(offsets), applied, named, by, source if constraints else "", count,
                  found.consistent)


# Where the wall-clock field sits in each record (a trace holds millions: ``_replace`` costs
# twice what building the tuple does).
_START = Event._fields.index("start_ns")
_WALL = MessageEvent._fields.index("wall_ns")


def _moved(records: tuple[Any, ...], at: int, d: int, unset: bool) -> tuple[Any, ...]:
    """The records (NamedTuples of one type) with field ``at`` ``d`` less (``unset``: but for
    those where it is 0, which recorded no time)."""
    if not records:
        return records
    # ``tuple.__new__`` on the fields: ``_replace`` costs more, and so does rebuilding column
    # by column (measured).
    new, kind = tuple.__new__, type(records[0])
    return tuple([new(kind, (*r[:at], r[at] - d, *r[at + 1:])) if r[at] or not unset else r
                  for r in records])


def _shift(proc: ProcessTrace, d: int) -> ProcessTrace:
    """What ``proc`` would have recorded with its wall clock ``d`` ns behind."""
    stats = proc.stats
    return replace(
        proc, events=_moved(proc.events, _START, d, False),
        messages=_moved(proc.messages, _WALL, d, True),
        stats=replace(stats, time_ns=stats.time_ns - d) if stats is not None else None)


def shifted(trace: Trace, clocks: Clocks) -> Trace:
    """The trace with every process's wall-clock times on the reference clock."""
    if not any(clocks.offsets):
        return trace
    procs = tuple(_shift(p, d) if d else p for p, d in zip(trace.processes, clocks.offsets,
                                                            strict=True))
    return Trace(processes=procs, foreign=trace.foreign, problems=trace.problems,
                 sources=trace.sources)
