"""What the pair detail shows for one cell: the calls compared, as ``pptrace.analyze.payload``
compares them (the analyzer's own comparison: the grid, the detail and the report agree).

    view = PairView.of(index, row, col)
    for comparison in view.comparisons:      # a TP disagreement first, then attach vs extract
        comparison.left.role, comparison.right.role, comparison.verdict.names

A cell's pair is its attach and the extract that received it (one side only when unpaired). At a
``tp-disagree`` finding the root cause is what the last stage's TP ranks attached, so the detail
first compares those attaches side by side, then the pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptrace.analyze.payload import Field, PayloadVerdict, compare_events
from pptrace.model.findings import Finding, FindingKind
from pptrace.model.records import Direction, Event, TensorMeta
from pptrace.model.trace import EventId

from .index import TraceIndex

__all__ = ["FIELDS", "Comparison", "PairView", "Side", "field_text"]

#: The per-tensor fields shown, in display order (the name first).
FIELDS = (Field.NAME, Field.SHAPE, Field.DTYPE, Field.DEVICE, Field.BYTES, Field.FINGERPRINT)


#: Characters of a content fingerprint the pair detail shows (the exports show all of it).
SHORT_FINGERPRINT = 12


def field_text(meta: TensorMeta | None, name: Field, *, short: bool = False) -> str:
    """One field of one tensor as shown ("" when the side lacks the tensor); ``short`` cuts
    the fingerprint to its first characters, as the text report quotes it."""
    if meta is None:
        return ""
    if name is Field.NAME:
        return meta.name
    if name is Field.SHAPE:
        return "[" + ", ".join(map(str, meta.shape)) + "]" if meta.is_tensor else "-"
    if name is Field.DTYPE:
        return meta.dtype if meta.is_tensor else f"non-tensor {meta.dtype}"
    if name is Field.DEVICE:
        return meta.device
    if name is Field.BYTES:
        return f"{meta.nbytes:,}"
    fingerprint = meta.fingerprint or ""
    return fingerprint[:SHORT_FINGERPRINT] if short else fingerprint


@dataclass(frozen=True, slots=True)
class Side:
    """One call of a comparison: its role ("attach", "tp 1 attach"), the event and its id."""

    role: str
    event: Event | None
    ref: EventId | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two calls' payloads compared name by name."""

    title: str  # what is compared against what, in a few words
    left: Side
    right: Side
    verdict: PayloadVerdict
    transit: bool  # True: an attach and its extract (the right side received the left)


@dataclass(frozen=True, slots=True)
class PairView:
    """The cell's findings and the comparisons that explain them, root cause first."""

    findings: tuple[Finding, ...]
    comparisons: tuple[Comparison, ...]

    @property
    def pair(self) -> Comparison:
        """The cell's attach against its extract (the last comparison)."""
        return self.comparisons[-1]

    @property
    def attach(self) -> Event | None:
        """The cell's attach (None when it is an extract with no attach)."""
        return self.pair.left.event

    @property
    def extract(self) -> Event | None:
        """The cell's extract (None when it is an attach no extract received)."""
        return self.pair.right.event

    @property
    def differs(self) -> bool:
        """True when any comparison finds a difference."""
        return any(not c.verdict.same for c in self.comparisons)

    @classmethod
    def of(cls, index: TraceIndex, row: int, col: int) -> PairView | None:
        """The comparisons through a cell; None for an empty cell."""
        event = index.event_at(row, col)
        if event is None:
            return None
        cells = {event.direction: (row, col)}
        other = index.partner(row, col)
        if other is not None:
            partner = index.event_at(*other)
            if partner is not None:
                cells[partner.direction] = other
        a_cell, e_cell = cells.get(Direction.ATTACH), cells.get(Direction.EXTRACT)
        attach = Side("attach", *_at(index, a_cell))
        extract = Side("extract", *_at(index, e_cell))
        findings = tuple(index.findings_at(row, col))
        pair = Comparison("attach against the extract that received it", attach, extract,
                          compare_events(attach.event, extract.event), transit=True)
        tp = [c for f in findings if f.kind is FindingKind.TP_DISAGREE
              if (c := _tp_comparison(index, f)) is not None]
        return cls(findings, (*tp[:1], pair))


def _at(index: TraceIndex, cell: tuple[int, int] | None) -> tuple[Event | None, EventId | None]:
    if cell is None:
        return None, None
    return index.event_at(*cell), index.event_id(*cell)


def _tp_comparison(index: TraceIndex, finding: Finding) -> Comparison | None:
    """The first two attaches a ``tp-disagree`` finding names, side by side."""
    sides = []
    for ref in finding.events:
        cell = index.cell_of(ref)
        if ref.direction is Direction.ATTACH and cell is not None:
            event = index.event_at(*cell)
            if event is not None:
                tp = event.rank.tp_rank
                sides.append(Side("attach" if tp is None else f"tp {tp} attach", event, ref))
    if len(sides) < 2:
        return None
    left, right = sides[0], sides[1]
    return Comparison("what the last stage's TP ranks attached", left, right,
                      compare_events(left.event, right.event), transit=False)
