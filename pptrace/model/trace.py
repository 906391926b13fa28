"""The loaded-trace model: per-process ordered events, recorder stats, and what was set aside.

The loader (``pptrace.load.loader``) returns a ``Trace``; the analyzer, the reports and the viewer
read it.
No torch, no OpenTelemetry, no I/O here.

    trace = load_paths(["pptrace-traces/"])
    for proc in trace.processes:
        print(proc.rank.label(), len(proc.events))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pptrace.model.messages import MessageEvent
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats

__all__ = ["EventId", "ForeignSpan", "InputProblem", "ProcessTrace", "Trace"]


@dataclass(frozen=True, slots=True)
class EventId:
    """A stable reference to one event: its process (index in ``Trace.processes``), direction
    and per-direction sequence number."""

    process: int
    direction: Direction
    seq: int


@dataclass(frozen=True, slots=True)
class ForeignSpan:
    """A span from another tool found in the same input: kept aside, never an error."""

    name: str
    service: str
    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    source: str


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A part of the input that was skipped and counted (a torn last line, a bad record...)."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class ProcessTrace:
    """Everything one process (one rank) recorded, events in call order."""

    rank: RankInfo
    events: tuple[Event, ...]  # sorted by (mono_ns, direction, seq)
    stats: RecorderStats | None = None  # the last stats span this process wrote
    sources: tuple[str, ...] = ()
    # The PP message layer (pptrace.model.messages): sends and receives, in call order.
    messages: tuple[MessageEvent, ...] = ()

    @property
    def key(self) -> tuple[str, int, str]:
        """(host, pid, instance id): what identifies a process across files."""
        return (self.rank.host, self.rank.pid, self.rank.instance)


@dataclass(frozen=True)
class Trace:
    """A whole run: every process's events, plus what the loader set aside."""

    processes: tuple[ProcessTrace, ...]
    foreign: tuple[ForeignSpan, ...] = ()
    problems: tuple[InputProblem, ...] = ()
    sources: tuple[str, ...] = ()
    _index: dict[EventId, Event] = field(default_factory=dict, repr=False, compare=False)

    @property
    def event_count(self) -> int:
        """Number of pptrace events across all processes."""
        return sum(len(p.events) for p in self.processes)

    def event(self, ref: EventId) -> Event:
        """Look an event up by its id."""
        if not self._index:
            for i, proc in enumerate(self.processes):
                for ev in proc.events:
                    self._index[EventId(i, ev.direction, ev.seq)] = ev
        return self._index[ref]

    def timeline(self) -> list[tuple[EventId, Event]]:
        """All events across processes in recorded wall-clock order."""
        out = [
            (EventId(i, ev.direction, ev.seq), ev)
            for i, proc in enumerate(self.processes)
            for ev in proc.events
        ]
        out.sort(key=lambda pair: (pair[1].start_ns, pair[0].process, pair[1].mono_ns))
        return out
