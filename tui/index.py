"""The viewer's index over a trace: grid rows and cells, pairs, finding locations, the timeline.

Built once per loaded trace (and again when ``--follow`` sees it grow); every widget reads it and
none of it imports Textual. It judges nothing: which attach went with which extract, and whether
their payloads agree, are the analyzer's (``analysis(trace).pairs``), painted as handed over.
Cells are addressed as (row, column): a row is one process and one direction ("pp 3 tp 0
attach"), a column is that direction's sequence number (the microbatch on the last stage). At 1M
events the per-cell state is one byte in a ``bytearray``; the time-ordered timeline is built on
demand (``timeline()``), since first paint does not need it, and so is the message screen's
index (``messages()``).

    index = TraceIndex.build(trace, findings)
    index.rows[0].label, index.state(0, 12), index.partner(0, 12)
"""

from __future__ import annotations

import enum
import threading
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_not

from pptrace.analyze.analyzer import analysis
from pptrace.analyze.pairs import Pairs
from pptrace.model.findings import Category, Finding, FindingKind, MessageId
from pptrace.model.records import Direction, Event, RankInfo
from pptrace.model.trace import EventId, Trace
from pptrace.report.groups import first_divergence

from .message_index import MessageIndex
from .pairing import pair_runs

__all__ = ["Cell", "Row", "TraceIndex", "cell_for_finding"]


class Cell(enum.IntEnum):
    """What happened in one grid cell; a higher value wins when several apply."""

    EMPTY = 0  # no event recorded at this sequence number
    ATTACH = 1  # an attach that was not paired (yet)
    EXTRACT = 2  # an extract that found nothing, or was not paired
    PAIRED = 3  # paired with the other side, both returned, and the two payloads agree
    FAILED = 4  # paired, but the other side raised: the payload never arrived as sent
    ORPHAN = 5  # an attach never extracted, or an extract with no attach
    MISMATCH = 6  # the analyzer judged the pair's payloads to differ, or a finding says the two
    # sides (or the namespace) disagree
    ERROR = 7  # the engine raised in this call


_MAX_SEQ_GAP = 1_000_000  # seq numbers this far past a row's event count are not gaps: corrupt

#: The cell state a finding of each category gives the events it names (the category comes
#: with the kind, from ``pptrace.model.findings``: the viewer keeps no list of kinds of its own).
#: A recorder loss says nothing about one event, so it colours none.
_CATEGORY_CELL: dict[Category, Cell | None] = {
    Category.ENGINE_ERROR: Cell.ERROR,
    Category.ABSENCE: Cell.ORPHAN,
    Category.PAYLOAD: Cell.MISMATCH,
    Category.NAMESPACE: Cell.MISMATCH,
    Category.RECORDER_LOSS: None,
}


def cell_for_finding(kind: FindingKind) -> Cell | None:
    """The cell state a finding of this kind gives the events it names (None: leave them).
    A category with no state of its own (the message layer's: a send and its receive
    disagree) marks a disagreement."""
    return _CATEGORY_CELL.get(kind.category, Cell.MISMATCH)


@dataclass(slots=True)
class Row:
    """One grid row: one process's events in one direction, indexed by sequence number.

    ``direction`` is None only for a process that recorded nothing on a middle stage (which
    neither attaches nor extracts): its row says that the rank was traced, and names no
    direction it never recorded."""

    process: int
    direction: Direction | None
    rank: RankInfo
    events: list[Event | None]
    cells: bytearray
    partners: array[int]  # packed (row << 32 | col) of the other side, -1 when unpaired
    counts: Counter[Cell] = field(default_factory=Counter)

    @property
    def label(self) -> str:
        """``pp 3 tp 0 attach`` (or the rank/pid when the layout is unknown)."""
        r = self.rank
        parts = []
        if r.pp_rank is not None:
            parts.append(f"pp{r.pp_rank}")
        if r.tp_rank is not None:
            parts.append(f"tp{r.tp_rank}")
        if not parts:
            parts.append(f"rank{r.rank}" if r.rank is not None else f"pid{r.pid}")
        return f"{' '.join(parts)} {self.direction.value if self.direction else 'no calls'}"

    @property
    def problems(self) -> int:
        """Cells in a bad state (error, mismatch, orphan, a pair whose other side raised)."""
        counts = self.counts
        return sum(counts[c] for c in (Cell.ERROR, Cell.MISMATCH, Cell.ORPHAN, Cell.FAILED))


def _row_order(rank: RankInfo, direction: Direction | None, process: int) -> tuple[int, ...]:
    """The processes' one order (``RankInfo.layout_order``), then attach before extract."""
    return (*rank.layout_order(), process,
            0 if direction is Direction.ATTACH else 1 if direction is Direction.EXTRACT else 2)


_SEQ = attrgetter("seq")
_DIRECTION = attrgetter("direction")
_ERROR_TYPE = attrgetter("error_type")
#: Byte tables for ``bytes.translate``: 1 -> a row's plain state (0 stays EMPTY); each state
#: -> at least PAIRED, or at least MISMATCH (a pair whose payloads the analyzer found to differ).
_PLAIN = {c: bytes([0, c]) + bytes(254) for c in (Cell.ATTACH, Cell.EXTRACT)}
_AT_LEAST = {c: bytes(max(i, c) for i in range(256)) for c in (Cell.PAIRED, Cell.MISMATCH)}
_STATES = tuple(c for c in Cell if c is not Cell.EMPTY)


class TraceIndex:
    """Rows, cell states, pairs, finding locations and (lazily) the time order of a trace."""

    def __init__(self, trace: Trace, findings: Sequence[Finding],
                 pairs: Pairs | None = None,
                 message_pairs: Mapping[MessageId, MessageId] | None = None,
                 broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]] | None = None
                 ) -> None:
        if pairs is None:  # findings made by hand: the analyzer's pairs, on its aligned clocks
            judged = analysis(trace)
            trace, pairs = judged.trace, judged.pairs
        self.trace = trace
        self.findings: tuple[Finding, ...] = tuple(findings)
        #: the analyzer's send -> receive pairs (``analysis(trace).message_pairs``); None: not
        #: handed in (the message screen then asks the analyzer)
        self.message_pairs = message_pairs
        #: each broadcast's send -> each member's receive (``analysis(trace).broadcast_pairs``)
        self.broadcast_pairs = broadcast_pairs
        #: the analyzer's attach/extract pairs (``analysis(trace).pairs``), which the grid draws
        self.pairs: Pairs = pairs
        self.rows: list[Row] = []
        self.row_of: dict[tuple[int, Direction | None], int] = {}
        self.width = 0
        #: events whose sequence number is impossible (negative, or far past the row's others):
        #: they get no cell, and the screen says how many.
        self.unplaced = 0
        #: (row, col) of each finding's first event, or None when it names no event.
        self.finding_cells: list[tuple[int, int] | None] = []
        #: finding indices per cell, for cells some finding names.
        self.cell_findings: dict[tuple[int, int], list[int]] = {}
        #: the finding the report names first (``pptrace.report.groups``), and its cell.
        self.first_divergence: int | None = None
        self.first_divergence_cell: tuple[int, int] | None = None
        self._timeline: array[int] | None = None
        self._positions: list[array[int]] = []
        self._lock = threading.Lock()
        self._messages: MessageIndex | None = None
        self._messages_lock = threading.Lock()

    @classmethod
    def build(cls, trace: Trace, findings: Sequence[Finding], *,
              pairs: Pairs | None = None,
              message_pairs: Mapping[MessageId, MessageId] | None = None,
              broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]] | None = None
              ) -> TraceIndex:
        """Index a trace, its findings and the attach/extract pairs the analyzer judged them
        on, with its verdict on each (``analysis(trace).pairs``; None: asked of the analyzer
        here, for findings made by hand)."""
        index = cls(trace, findings, pairs, message_pairs, broadcast_pairs)
        index._build_rows()
        index._build_pairs()
        index._build_findings()
        index._count()
        return index

    def _count(self) -> None:
        for row in self.rows:
            cells = row.cells
            row.counts = Counter({c: n for c in _STATES if (n := cells.count(c))})

    # --- building ------------------------------------------------------------------------
    def _build_rows(self) -> None:
        # At 1M events every per-event step is a C-driven map, not a Python loop per event.
        keys: list[tuple[tuple[int, ...], int, Direction | None]] = []
        by_key: dict[tuple[int, Direction | None], list[Event]] = {}
        for p, proc in enumerate(self.trace.processes):
            directions: set[Direction | None] = set(map(_DIRECTION, proc.events))
            if not directions:
                # A silent rank still gets a row (its silence is information), named by what its
                # stage would record: the last stage attaches, stage 0 extracts, others neither.
                rank = proc.rank
                directions = {Direction.ATTACH if rank.is_last_stage
                              else Direction.EXTRACT if rank.pp_rank == 0 else None}
            for d in directions:
                by_key[(p, d)] = []
                keys.append((_row_order(proc.rank, d, p), p, d))
            if len(directions) == 1:
                by_key[(p, next(iter(directions)))] = list(proc.events)
            else:
                for ev in proc.events:
                    by_key[(p, ev.direction)].append(ev)
        keys.sort(key=lambda k: k[0])
        for _, p, d in keys:
            events = by_key[(p, d)]
            seqs = list(map(_SEQ, events))
            size = max(seqs, default=-1) + 1
            plain = Cell.ATTACH if d is Direction.ATTACH else Cell.EXTRACT
            slots: list[Event | None]
            placed: Sequence[Event | None]  # the events in the slots, in column order
            at: Sequence[int]  # their columns
            if size == len(events) and seqs == list(range(size)):
                slots = list(events)
                cells = bytearray([plain]) * size
                placed, at = events, range(size)
            else:  # gaps (dropped events) or out-of-order seqs: place each at its seq
                limit = len(events) + _MAX_SEQ_GAP
                if size > limit or (seqs and min(seqs) < 0):
                    # A corrupt or hostile seq (negative, or far beyond the others) gets no
                    # slot: one slot for every number below it would exhaust memory.
                    kept = [ev for ev in events if 0 <= ev.seq < limit]
                    self.unplaced += len(events) - len(kept)
                    events = kept
                    size = max((ev.seq for ev in events), default=-1) + 1
                slots = [None] * size
                for ev in events:
                    slots[ev.seq] = ev  # a repeated seq: the last one holds the slot
                present = bytes(map(is_not, slots, repeat(None)))
                cells = bytearray(present.translate(_PLAIN[plain]))
                at = list(compress(count(), present))
                placed = [slots[col] for col in at]
            for col in compress(at, map(is_not, map(_ERROR_TYPE, placed), repeat(None))):
                cells[col] = Cell.ERROR
            self.row_of[(p, d)] = len(self.rows)
            partners = array("q", [-1]) * size
            self.rows.append(Row(p, d, self.trace.processes[p].rank, slots, cells, partners))
            self.width = max(self.width, size)

    def _build_pairs(self) -> None:
        pairing = pair_runs(self.pairs, self.findings)
        for run in pairing.runs:
            ra = self.row_of.get((run.attach_process, Direction.ATTACH))
            re_ = self.row_of.get((run.extract_process, Direction.EXTRACT))
            if ra is None or re_ is None:
                continue
            a_row, e_row = self.rows[ra], self.rows[re_]
            a0, e0 = run.attach_seq, run.extract_seq
            n = min(run.length, len(a_row.cells) - a0, len(e_row.cells) - e0)
            if n <= 0 or a0 < 0 or e0 < 0:
                continue
            # Whole runs at once: slices and C-driven maps, not a Python loop per pair.
            if not run.broadcast:  # a broadcast attach keeps its own TP rank's extract
                a_row.partners[a0 : a0 + n] = array(
                    "q", range((re_ << 32) | e0, (re_ << 32) | e0 + n))
            e_row.partners[e0 : e0 + n] = array("q", range((ra << 32) | a0, (ra << 32) | a0 + n))
            # Each cell: at least PAIRED, or MISMATCH where the analyzer found the payloads to
            # differ (it compared every pair: a cascade of equal findings counts them in one).
            floor = _AT_LEAST[Cell.MISMATCH if run.differs else Cell.PAIRED]
            for row, start in ((a_row, a0), (e_row, e0)):
                row.cells[start : start + n] = row.cells[start : start + n].translate(floor)
        self._mark_failed_pairs()
        # What the walk left unpaired is an orphan (or an unmatched extract) whether or not a
        # finding names it: the analyzer counts the later ones into the first's cascade.
        for process, direction, seq in pairing.unpaired:
            r = self.row_of.get((process, direction))
            if r is not None and 0 <= seq < len(self.rows[r].cells):
                cells = self.rows[r].cells
                if self.rows[r].partners[seq] < 0 and cells[seq] < Cell.ORPHAN:
                    cells[seq] = Cell.ORPHAN

    def _mark_failed_pairs(self) -> None:
        """A pair whose one side raised is never "paired, equal": its other side shows FAILED.
        Only the cells of calls that raised are visited (``find`` runs in C)."""
        error = bytes([Cell.ERROR])
        for row in self.rows:
            cells, partners = row.cells, row.partners
            at = cells.find(error)
            while at >= 0:
                packed = partners[at]
                if packed >= 0:
                    other = self.rows[packed >> 32].cells
                    col = packed & 0xFFFFFFFF
                    if other[col] < Cell.FAILED:
                        other[col] = Cell.FAILED
                at = cells.find(error, at + 1)

    def _build_findings(self) -> None:
        for i, f in enumerate(self.findings):
            state = cell_for_finding(f.kind)
            first: tuple[int, int] | None = None
            # Every occurrence the finding counts, not only its first: a cell the report
            # counts is never drawn as equal.
            for ref in chain(f.events, f.more_events):
                cell = self.cell_of(ref)
                if cell is None:
                    continue
                first = first or cell
                self.cell_findings.setdefault(cell, []).append(i)
                row = self.rows[cell[0]]
                here, event = state, row.events[cell[1]]
                if here is Cell.ERROR and event is not None and event.error_type is None:
                    here = Cell.FAILED  # named by an engine error it did not raise: its partner did
                if here is not None and row.cells[cell[1]] < here:
                    row.cells[cell[1]] = here
            self.finding_cells.append(first)
        # The report's first divergence (the earliest error that is no consequence of another).
        self.first_divergence = first_divergence(self.findings)
        if self.first_divergence is not None:
            self.first_divergence_cell = self.finding_cells[self.first_divergence]

    # --- lookups -------------------------------------------------------------------------
    def cell_of(self, ref: EventId) -> tuple[int, int] | None:
        """The (row, col) of an event id, or None when the trace has no such event."""
        row = self.row_of.get((ref.process, ref.direction))
        if row is None or not 0 <= ref.seq < len(self.rows[row].events):
            return None
        return (row, ref.seq) if self.rows[row].events[ref.seq] is not None else None

    def event_at(self, row: int, col: int) -> Event | None:
        """The event in a cell, or None for an empty cell."""
        if 0 <= row < len(self.rows):
            events = self.rows[row].events
            if 0 <= col < len(events):
                return events[col]
        return None

    def event_id(self, row: int, col: int) -> EventId:
        """The stable id of a cell's event."""
        r = self.rows[row]
        if r.direction is None:  # a silent middle stage's row has no events, hence no ids
            raise IndexError(f"row {row} ({r.label}) has no events")
        return EventId(r.process, r.direction, col)

    def state(self, row: int, col: int) -> Cell:
        """The state of a cell (EMPTY past the end of a row)."""
        cells = self.rows[row].cells
        return Cell(cells[col]) if 0 <= col < len(cells) else Cell.EMPTY

    def partner(self, row: int, col: int) -> tuple[int, int] | None:
        """The cell of the other side of this cell's pair, if paired."""
        partners = self.rows[row].partners
        if not 0 <= col < len(partners) or partners[col] < 0:
            return None
        packed = partners[col]
        return packed >> 32, packed & 0xFFFFFFFF

    def findings_at(self, row: int, col: int) -> list[Finding]:
        """The findings that name this cell's event (or its partner's)."""
        ids = list(self.cell_findings.get((row, col), ()))
        other = self.partner(row, col)
        if other is not None:
            ids += [i for i in self.cell_findings.get(other, ()) if i not in ids]
        return [self.findings[i] for i in sorted(ids)]

    # --- time order ----------------------------------------------------------------------
    @property
    def timeline_ready(self) -> bool:
        """True once ``timeline()`` has been built."""
        return self._timeline is not None

    def timeline(self) -> array[int]:
        """Every cell in recorded wall-clock order, packed as ``row << 32 | col`` (built once)."""
        with self._lock:
            if self._timeline is None:
                self._build_timeline()
            assert self._timeline is not None
            return self._timeline

    def position(self, row: int, col: int) -> int:
        """The timeline position of a cell's event (-1 for an empty cell)."""
        self.timeline()
        if not 0 <= row < len(self._positions):
            return -1
        positions = self._positions[row]
        return positions[col] if 0 <= col < len(positions) else -1

    def _build_timeline(self) -> None:
        # Sorting plain ints is several times faster than sorting tuples at 1M events;
        # ties in wall-clock time keep row then sequence order.
        keys: list[int] = []
        for r, row in enumerate(self.rows):
            base = r << 32
            keys.extend(
                (ev.start_ns << 48) | base | c for c, ev in enumerate(row.events) if ev is not None
            )
        keys.sort()
        mask = (1 << 48) - 1
        timeline = array("q", [k & mask for k in keys])
        positions = [array("q", [-1]) * len(row.events) for row in self.rows]
        for i, packed in enumerate(timeline):
            positions[packed >> 32][packed & 0xFFFFFFFF] = i
        self._positions = positions
        self._timeline = timeline

    # --- the message layer -------------------------------------------------------------------
    @property
    def messages_ready(self) -> bool:
        """True once ``messages()`` has been built."""
        return self._messages is not None

    def messages(self) -> MessageIndex:
        """The message screen's index of this trace and its findings (built once; a second
        caller waits for the first one's build)."""
        with self._messages_lock:
            if self._messages is None:
                pairs, broadcasts = self.message_pairs, self.broadcast_pairs
                if pairs is None or broadcasts is None:  # findings made by hand: the
                    judged = analysis(self.trace)        # analyzer's pairing, never the viewer's
                    pairs, broadcasts = judged.message_pairs, judged.broadcast_pairs
                self._messages = MessageIndex.build(self.trace, self.findings, pairs, broadcasts)
            return self._messages
