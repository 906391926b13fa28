"""The message view's data: every send and receive of the PP message layer on one time axis.

One row per process that recorded messages (PP stage, then TP rank, then global rank); one
column per message, in wall-clock order across all rows, so time runs right and a 4 s wait
takes no more room than a 1 ms hop. A send sits at the time it was called, a receive at the
time it returned (so a message's send is left of its receive), and a receive that began and
never returned, or failed at its timeout, sits where it began and waits (``⧗``) to the end of
the trace, or to its failure. Columns are arrays, not objects: 1M messages index in seconds.

The verdicts are the analyzer's: a message is marked when a finding names it
(``Finding.messages``), and its counterpart is the other message a finding names with it, or
the pair handed in (``pairs``; a broadcast's send has one per member, ``counterparts``) where the
analyzer exposes them. Nothing here pairs by itself.
No Textual.

    index = MessageIndex.build(trace, findings)
    col = index.first_selection()
    index.message(col), index.counterpart(col), index.findings_at(col)
"""

from __future__ import annotations

import enum
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

from pptrace import engines
from pptrace.model.findings import Finding, MessageId
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import RankInfo
from pptrace.model.trace import Trace
from pptrace.report.groups import first_divergence

__all__ = ["Glyph", "MessageIndex", "MessageRow", "Selected", "place"]

#: A message's state byte: its glyph (bits 0-1), its kind (bits 2-3), a finding (bit 4).
_GLYPH_MASK, _KIND_SHIFT, _KIND_MASK, FINDING = 0b11, 2, 0b1100, 0b10000
#: The kinds drawn in their own colour (the engine adapters' message kinds, at most the three
#: that two bits hold; the rest share one).
KINDS = engines.message_kinds()[:3]


class Glyph(enum.IntEnum):
    """What a message's column shows."""

    SEND = 0
    RECV = 1
    WAIT = 2  # a receive that began and never returned (or failed at its timeout)


def place(rank: RankInfo) -> str:
    """``pp1/tp0`` (``pp1`` without TP; the rank or pid when the layout is unknown)."""
    if rank.pp_rank is None:
        return f"rank{rank.rank}" if rank.rank is not None else f"pid{rank.pid}"
    tp = f"/tp{rank.tp_rank}" if rank.tp_rank is not None and (rank.tp_size or 1) > 1 else ""
    return f"pp{rank.pp_rank}{tp}"


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One process's messages: their columns, in order."""

    process: int
    rank: RankInfo
    cols: array[int]  # the columns of this row's messages, ascending
    waits: tuple[tuple[int, int], ...]  # (from, to) columns a wait spans
    problems: int  # messages a finding names

    @property
    def label(self) -> str:
        """``pp1/tp0 r2``: where the process sits, and its global rank."""
        r = self.rank
        return place(r) + (f" r{r.rank}" if r.rank is not None and r.pp_rank is not None else "")


@dataclass(frozen=True, slots=True)
class Selected:
    """One message as the detail shows it: the call, or a receive's two phases."""

    ref: MessageId
    rank: RankInfo
    event: MessageEvent  # the send, the receive's end, or a wait's begin
    begin: MessageEvent | None  # a receive's begin (None for a send)
    waiting: bool  # began and never returned, or failed at its timeout


class MessageIndex:
    """Rows, columns and finding marks of a trace's message layer (see the module docstring)."""

    def __init__(self, trace: Trace, findings: Sequence[Finding]) -> None:
        self.trace = trace
        self.findings: tuple[Finding, ...] = tuple(findings)
        self.rows: list[MessageRow] = []
        self.times = array("q")  # per column: its wall-clock time
        self.row_of = array("i")  # per column: its row
        self.msg_of = array("i")  # per column: the index of its record in the process's messages
        self.state = bytearray()  # per column: glyph | kind | finding
        #: message findings (index in ``findings``) in time order of the message they name first
        self.finding_order: list[int] = []
        self.finding_cols: dict[int, tuple[int, ...]] = {}  # finding -> its messages' columns
        self.col_findings: dict[int, list[int]] = {}  # column -> findings naming it
        self.t0 = 0
        self.end_ns = 0
        self._pairs: dict[MessageId, MessageId] = {}
        self._fanout: dict[MessageId, tuple[MessageId, ...]] = {}  # a broadcast's receives
        # per process, lazily: (op, broadcast, seq) -> column (a broadcast is numbered apart)
        self._seq_cols: dict[int, dict[tuple[MessageOp, bool, int], int]] = {}
        self._row_of_process: dict[int, int] = {}
        self._by_rank: dict[int, int] = {}  # global rank -> process
        self._row_cols: list[array[int]] = []

    @property
    def width(self) -> int:
        """How many columns (messages) there are."""
        return len(self.times)

    @classmethod
    def build(cls, trace: Trace, findings: Sequence[Finding],
              pairs: Mapping[MessageId, MessageId] | None = None,
              broadcasts: Mapping[MessageId, tuple[MessageId, ...]] | None = None
              ) -> MessageIndex:
        """Index the message layer of ``trace``; ``pairs`` (send -> receive) and
        ``broadcasts`` (a broadcast's send -> each member's receive), where known, name each
        message's counterparts beyond those the findings name."""
        index = cls(trace, findings)
        index._build(pairs or {})
        for send, got in (broadcasts or {}).items():
            index._fanout[send] = got
            for recv in got:
                index._pairs[recv] = send
            if got:
                index._pairs[send] = got[0]
        return index

    # --- building ----------------------------------------------------------------------------
    def _build(self, pairs: Mapping[MessageId, MessageId]) -> None:
        processes = self.trace.processes
        procs = [i for i, p in enumerate(processes) if p.messages]
        procs.sort(key=lambda i: _order(processes[i].rank, i))
        for i, p in enumerate(processes):
            if p.rank.rank is not None:
                self._by_rank.setdefault(p.rank.rank, i)
        # One entry per column, in the order rows then records: a stable sort on time alone
        # then orders them by (time, row, record), as a sort of those tuples would, at a
        # fraction of the cost (1M messages: this loop and that sort are the whole build).
        times: list[int] = []
        rows: list[int] = []
        records: list[int] = []
        states: list[int] = []
        wait_ends: list[tuple[int, int, int]] = []  # (row, begin time, until time or -1)
        bits = _KIND_BITS.get
        send, recv = MessageOp.SEND, MessageOp.RECV
        for row, pi in enumerate(procs):
            self._row_of_process[pi] = row
            msgs = processes[pi].messages
            last = len(msgs) - 1
            ended: set[tuple[bool, int]] | None = None  # the row's receive ends, if needed
            for k, (op, phase, seq, wall, duration, kind, expected, error, group) in enumerate(
                    map(_FIELDS, msgs)):
                if op is send:
                    at, state = wall, Glyph.SEND | bits(kind, 0)
                elif phase == "begin":
                    # Its end is the column. That end is nearly always the next record (the
                    # wrapper records the two around one call): look there before the set.
                    after = _END_KEY(msgs[k + 1]) if k < last else None
                    if after is not None and after[:3] == (recv, "end", seq) and (
                            bool(after[3]) is bool(group)):
                        continue
                    if ended is None:
                        ended = {(bool(g), q) for o, p, q, g in map(_END_KEY, msgs)
                                 if o is recv and p == "end"}
                    if (bool(group), seq) in ended:
                        continue
                    # it never returned: the wait is its only record
                    at, state = wall, Glyph.WAIT | bits(expected, 0)
                    wait_ends.append((row, wall, -1))
                elif error is None:
                    at, state = wall + max(duration, 0), Glyph.RECV | bits(kind, 0)
                else:  # it failed (at its timeout): it waited from its start to then
                    at, state = wall, Glyph.WAIT | bits(expected or kind, 0)
                    wait_ends.append((row, wall, wall + max(duration, 0)))
                times.append(at)
                rows.append(row)
                records.append(k)
                states.append(state)
        order = sorted(range(len(times)), key=times.__getitem__)
        self.times = array("q", map(times.__getitem__, order))
        self.row_of = array("i", map(rows.__getitem__, order))
        self.msg_of = array("i", map(records.__getitem__, order))
        self.state = bytearray(map(states.__getitem__, order))
        row_cols: list[array[int]] = [array("l") for _ in procs]
        self._row_cols = row_cols
        appends = [cols.append for cols in row_cols]
        for col, row in enumerate(self.row_of):
            appends[row](col)
        if times:
            self.t0 = self.times[0]
            self.end_ns = self.times[-1]
        self._mark_findings()
        waits: list[list[tuple[int, int]]] = [[] for _ in procs]
        last = max(self.width - 1, 0)
        for row, since, until in wait_ends:
            start = bisect_left(self.times, since)
            stop = last if until < 0 else max(start, bisect_right(self.times, until) - 1)
            waits[row].append((start, stop))
        bad = [0] * len(procs)
        for col in self.col_findings:  # the columns a finding names are those marked
            bad[self.row_of[col]] += 1
        for row, pi in enumerate(procs):
            self.rows.append(MessageRow(pi, processes[pi].rank, row_cols[row],
                                        tuple(sorted(waits[row])), bad[row]))
        for a, b in pairs.items():
            self._pairs[a] = b
            self._pairs[b] = a

    def _mark_findings(self) -> None:
        firsts: list[tuple[int, int]] = []
        for fi, f in enumerate(self.findings):
            if not f.messages:
                continue
            cols = tuple(c for c in (self.col_of(ref) for ref in f.messages) if c is not None)
            if not cols:
                continue
            self.finding_cols[fi] = cols  # the first occurrence: where ] and [ go
            # Every occurrence the finding counts is marked, not only its first.
            more = (c for c in map(self.col_of, f.more_messages) if c is not None)
            for c in dict.fromkeys(chain(cols, more)):
                self.state[c] |= FINDING
                self.col_findings.setdefault(c, []).append(fi)
            firsts.append((cols[0], fi))
        self.finding_order = [fi for _, fi in sorted(firsts)]

    # --- lookups -----------------------------------------------------------------------------
    def col_of(self, ref: MessageId) -> int | None:
        """The column of a message (a receive's begin and end share one), or None."""
        table = self._seq_cols.get(ref.process)
        if table is None:
            table = self._seq_table(ref.process)
        return table.get((ref.op, ref.broadcast, ref.seq))

    def _seq_table(self, process: int) -> dict[tuple[MessageOp, bool, int], int]:
        table: dict[tuple[MessageOp, bool, int], int] = {}
        row = self._row_of_process.get(process)
        if row is not None and process < len(self.trace.processes):
            msgs = self.trace.processes[process].messages
            for c in self._row_cols[row]:
                m = msgs[self.msg_of[c]]
                table[(m.op, m.broadcast, m.seq)] = c
        self._seq_cols[process] = table
        return table

    def glyph(self, col: int) -> Glyph:
        """What a column shows."""
        return Glyph(self.state[col] & _GLYPH_MASK)

    def kind(self, col: int) -> str:
        """``output``, ``proxy`` or ``""`` (any other kind): the column's colour."""
        bits = (self.state[col] & _KIND_MASK) >> _KIND_SHIFT
        return KINDS[bits - 1] if bits else ""

    def marked(self, col: int) -> bool:
        """A finding names this message."""
        return bool(self.state[col] & FINDING)

    def message(self, col: int) -> Selected:
        """The message in a column, with a receive's begin."""
        row = self.rows[self.row_of[col]]
        msgs = self.trace.processes[row.process].messages
        k = self.msg_of[col]
        m = msgs[k]
        begin = None
        if m.op is MessageOp.RECV:
            begin = m if m.phase == "begin" else _begin_of(msgs, k)
        return Selected(MessageId.of(row.process, m), row.rank, m, begin,
                        self.glyph(col) is Glyph.WAIT)

    def findings_at(self, col: int) -> list[Finding]:
        """The findings that name this message."""
        return [self.findings[i] for i in self.col_findings.get(col, ())]

    def counterpart(self, col: int) -> int | None:
        """The column of the message at the other end: the other message of a finding that names
        this one and another (what the finding compares), else the analyzer's send <-> receive
        pair; None if neither is known."""
        # A send and its receive first; then a hop (a receive and the send that forwarded it,
        # on one process); then any other pair (two TP ranks' sends of one message).
        best: tuple[int, int] | None = None
        for fi in self.col_findings.get(col, ()):
            cols = self.finding_cols[fi]
            if len(cols) != 2 or col not in cols:
                continue
            other = cols[1] if cols[0] == col else cols[0]
            opposite = (self.glyph(other) is Glyph.SEND) != (self.glyph(col) is Glyph.SEND)
            rank = 0 if opposite and self.row_of[other] != self.row_of[col] else (
                1 if opposite else 2)
            if best is None or rank < best[0]:
                best = (rank, other)
        if best is not None:
            return best[1]
        paired = self._pairs.get(self.message(col).ref)
        return None if paired is None else self.col_of(paired)

    def counterparts(self, col: int) -> tuple[int, ...]:
        """Every column at the other end: a broadcast's send has one per member's receive;
        any other message at most its ``counterpart``."""
        got = self._fanout.get(self.message(col).ref)
        if got is not None:
            return tuple(c for c in map(self.col_of, got) if c is not None)
        other = self.counterpart(col)
        return () if other is None else (other,)

    def rank_of(self, global_rank: int) -> RankInfo | None:
        """The traced rank with that global rank, if any."""
        process = self._by_rank.get(global_rank)
        return None if process is None else self.trace.processes[process].rank

    def first_selection(self) -> int | None:
        """The message to select first: the one the report's first divergence names, else the
        first message a finding names, else the first message."""
        first = first_divergence(self.findings)
        if first is not None and first in self.finding_cols:
            return self.finding_cols[first][0]
        if self.finding_order:
            return self.finding_cols[self.finding_order[0]][0]
        return 0 if self.width else None

    # --- moving ------------------------------------------------------------------------------
    def step(self, col: int, delta: int) -> int:
        """The message ``delta`` places along the same row (clamped to its ends)."""
        cols = self.rows[self.row_of[col]].cols
        at = bisect_left(cols, col) + delta
        return cols[max(0, min(len(cols) - 1, at))]

    def nearest(self, row: int, col: int) -> int | None:
        """The message of ``row`` nearest to column ``col`` (None: the row has none)."""
        cols = self.rows[row].cols
        if not cols:
            return None
        at = bisect_left(cols, col)
        near = [cols[i] for i in (at - 1, at) if 0 <= i < len(cols)]
        return min(near, key=lambda c: (abs(c - col), c))

    def in_range(self, row: int, first: int, last: int) -> array[int]:
        """The columns of ``row``'s messages in [first, last)."""
        cols = self.rows[row].cols
        return cols[bisect_left(cols, first):bisect_left(cols, last)]


def _begin_of(msgs: Sequence[MessageEvent], k: int) -> MessageEvent | None:
    """The begin of the receive whose end is ``msgs[k]``: recorded just before it, nearly
    always (another thread's messages may come between), so look back there first."""
    seq, broadcast = msgs[k].seq, msgs[k].broadcast
    for near in (range(k - 1, max(-1, k - 64), -1), range(len(msgs))):
        for i in near:
            b: MessageEvent = msgs[i]
            if (b.op is MessageOp.RECV and b.phase == "begin" and b.seq == seq
                    and b.broadcast == broadcast):
                return b
    return None


#: A kind's bits in the state byte (the first of equal kinds wins, as ``KINDS.index``).
_KIND_BITS = {kind: (KINDS.index(kind) + 1) << _KIND_SHIFT for kind in KINDS}
#: What the build reads of a message, as one tuple (NamedTuple attributes cost more, at 1M).
_FIELDS = itemgetter(*(MessageEvent._fields.index(name) for name in (
    "op", "phase", "seq", "wall_ns", "duration_ns", "kind", "expected_kind", "error_type",
    "group")))
#: What says that a record is a given receive's end.
_END_KEY = itemgetter(*(MessageEvent._fields.index(name) for name in (
    "op", "phase", "seq", "group")))


def _order(rank: RankInfo, process: int) -> tuple[int, int, int, int]:
    """The processes' one order (``RankInfo.layout_order``), as the grid lists them."""
    return (*rank.layout_order(), process)
