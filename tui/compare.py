"""The two sides of one attach/extract pair, compared name by name (no Textual here).

    detail = PairView.of(index, row, col)
    for line in detail.tensors: line.name, line.left, line.right, line.differs

A field differs when both sides have the name and the values disagree; the device is compared
by type (``cuda:1`` and ``cuda:0`` agree: the index differs by design), the fingerprint only when
both sides have one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptrace.model.findings import Finding
from pptrace.model.records import Direction, Event, TensorMeta
from pptrace.model.trace import EventId

from .index import TraceIndex

__all__ = ["FIELDS", "PairView", "TensorLine"]

#: The per-tensor fields shown side by side, in display order.
FIELDS = ("name", "shape", "dtype", "device", "bytes", "fingerprint")


def field_text(meta: TensorMeta | None, name: str) -> str:
    """One field of one tensor as shown in the pair detail ("" when the side lacks it)."""
    if meta is None:
        return ""
    if name == "name":
        return meta.name
    if name == "shape":
        return "[" + ", ".join(map(str, meta.shape)) + "]" if meta.is_tensor else "-"
    if name == "dtype":
        return meta.dtype if meta.is_tensor else f"non-tensor {meta.dtype}"
    if name == "device":
        return meta.device
    if name == "bytes":
        return f"{meta.nbytes:,}"
    return meta.fingerprint or ""


def _differs(a: TensorMeta, b: TensorMeta) -> frozenset[str]:
    out = set()
    if a.shape != b.shape:
        out.add("shape")
    if a.dtype != b.dtype or a.is_tensor != b.is_tensor:
        out.add("dtype")
    if a.device_type != b.device_type:
        out.add("device")
    if a.nbytes != b.nbytes:
        out.add("bytes")
    if a.fingerprint and b.fingerprint and a.fingerprint != b.fingerprint:
        out.add("fingerprint")
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class TensorLine:
    """One auxiliary name, as each side carried it (None: that side lacks the name)."""

    name: str
    left: TensorMeta | None
    right: TensorMeta | None
    differs: frozenset[str]  # field names from FIELDS; "name" when one side lacks it


@dataclass(frozen=True, slots=True)
class PairView:
    """What the pair detail shows for the selected cell: both sides, compared."""

    attach: Event | None
    extract: Event | None
    attach_id: EventId | None
    extract_id: EventId | None
    tensors: tuple[TensorLine, ...]
    findings: tuple[Finding, ...]
    order_differs: bool

    @classmethod
    def of(cls, index: TraceIndex, row: int, col: int) -> PairView | None:
        """The pair through a cell (one side only when unpaired); None for an empty cell."""
        event = index.event_at(row, col)
        if event is None:
            return None
        here = (row, col)
        other = index.partner(row, col)
        cells = {index.rows[row].direction: here}
        if other is not None:
            cells[index.rows[other[0]].direction] = other
        a_cell, e_cell = cells.get(Direction.ATTACH), cells.get(Direction.EXTRACT)
        attach = index.event_at(*a_cell) if a_cell else None
        extract = index.event_at(*e_cell) if e_cell else None
        return cls(
            attach=attach,
            extract=extract,
            attach_id=index.event_id(*a_cell) if a_cell else None,
            extract_id=index.event_id(*e_cell) if e_cell else None,
            tensors=compare(attach, extract),
            findings=tuple(index.findings_at(row, col)),
            order_differs=bool(
                attach and extract and attach.names != extract.names
                and sorted(attach.names) == sorted(extract.names)
            ),
        )

    @property
    def differs(self) -> bool:
        """True when any name or field differs between the two sides."""
        return any(line.differs for line in self.tensors) or self.order_differs


def compare(attach: Event | None, extract: Event | None) -> tuple[TensorLine, ...]:
    """Line up both sides' tensors by name: the attach side's order, then extract-only names."""
    left = {m.name: m for m in attach.tensors} if attach else {}
    right = {m.name: m for m in extract.tensors} if extract else {}
    both = attach is not None and extract is not None
    names = list(left) + [n for n in right if n not in left]
    lines = []
    for name in names:
        a, b = left.get(name), right.get(name)
        if a is not None and b is not None:
            differs = _differs(a, b)
        else:
            differs = frozenset({"name"}) if both else frozenset()
        lines.append(TensorLine(name, a, b, differs))
    return tuple(lines)
