"""What each process lost, and what that weakens: the analyzer's per-process accounting.

Per process, from its stats, its scan and its holes (``pptrace.analyze.holes``): a trace without
final stats (``stats-not-final``), events lost inside its window (``events-dropped``), records
known to be missing otherwise (``incomplete-trace``). ``lost`` names why absence findings on the
process's channels are less sure; ``holed`` why its pairs may have been matched across a hole
(payload findings there are warnings at most).

    accounts = Accounts(scans, windows, holes, add)
    accounts.check(index, proc, channel)
    accounts.lost, accounts.holed

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pptrace.analyze.holes import Holes
from pptrace.analyze.rules import rank_id, who
from pptrace.analyze.scan import Scan
from pptrace.analyze.window import Window, window_losses
from pptrace.model.findings import FindingKind
from pptrace.model.text import plural
from pptrace.model.trace import ProcessTrace

__all__ = ["Accounts"]

K = FindingKind


class Accounts:
    """Each process's losses, as findings (through ``add``) and as reasons to weaken others."""

    def __init__(self, scans: Sequence[Scan], windows: Sequence[Window], holes: Sequence[Holes],
                 add: Callable[..., int]) -> None:
        self.scans, self.windows, self.holes, self.add = scans, windows, holes, add
        self.lost: dict[int, str] = {}  # process index -> "rank 2 lost 5 events"
        self.holed: dict[int, str] = {}  # process index -> why its window lacks events

    def check(self, index: int, proc: ProcessTrace, channel: str) -> None:
        """Account for one process (``channel``: its own, for the findings)."""
        events, stats = proc.events, proc.stats
        if (events or proc.messages) and (stats is None or not stats.final):
            self.unfinished(index, proc, channel,
                            "no stats at all" if stats is None else "no final stats")
        self.incomplete(index, proc, channel)
        loss = window_losses(self.scans[index], self.windows[index], stats, events)
        if loss is None:
            return
        lost, detail = loss
        label = who(proc.rank)
        self.note_loss(index, f"{label} lost {plural(lost, 'event')}")
        if lost:
            self.holed[index] = f"{label} lost {plural(lost, 'event')}"
        self.add(
            K.EVENTS_DROPPED,
            f"{label} lost {plural(lost, 'event')} ({detail}): findings about missing events on "
            "its channels are less certain",
            ranks=[rank_id(proc.rank)],
            time_ns=events[0].start_ns if events else (stats.time_ns if stats else None),
            channel=channel,
        )

    def incomplete(self, index: int, proc: ProcessTrace, channel: str) -> None:
        """Say what a process's trace is known to lack beyond counted event losses."""
        holes = self.holes[index]
        if not holes.lossy:
            return
        label = who(proc.rank)
        if holes.damaged:  # the skipped data may have held events too
            self.note_loss(index, f"{label}'s files had damaged data")
            self.holed[index] = f"{label}'s files had damaged data"
        msgs, events = proc.messages, proc.events
        self.add(K.INCOMPLETE_TRACE, holes.message(label), ranks=[rank_id(proc.rank)],
                 channel=channel,
                 time_ns=msgs[0].wall_ns if msgs else events[0].start_ns if events else None)

    def note_loss(self, index: int, why: str) -> None:
        """Remember why absence findings on a process's channels are less sure."""
        known = self.lost.get(index)
        self.lost[index] = f"{known}; {why}" if known else why

    def unfinished(self, index: int, proc: ProcessTrace, channel: str, what: str) -> None:
        label = who(proc.rank)
        last = proc.events[-1:]  # a process may have recorded messages only
        self.note_loss(index, f"{label} wrote {what}")
        self.add(K.STATS_NOT_FINAL,
                 f"{label} wrote {what} (still running, killed, or out of time at exit): what "
                 "it recorded after its last flush is neither in the trace nor counted, so "
                 "findings about missing events on its channels are less certain",
                 ranks=[rank_id(proc.rank)],
                 time_ns=last[0].start_ns if last else proc.messages[-1].wall_ns,
                 events=[(index, e.direction, e.seq) for e in last], channel=channel)
