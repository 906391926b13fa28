"""The one payload comparison: what one call carried against another, name by name.

The analyzer's pair rules and its TP check, the viewer's grid and its pair detail all decide
"same payload or not" here, so the report and the grid cannot disagree on one trace.

    verdict = compare(attach.tensors, extract.tensors)
    verdict.same                 # names, order, shape, dtype, bytes, device type, content agree
    for line in verdict.names:   # the left side's order, then names only the right side has
        line.name, line.left, line.right, line.differs   # differs: a frozenset of Field

What is compared, per name both sides carry: the shape; the dtype (and tensor or not); the
device *type* (``cuda:1`` agrees with ``cuda:0``: the index differs by design between ranks);
the byte count; the content fingerprint, only when both sides have one. Besides: a name on one
side only, and the shared names' order. ``same`` is the fast test of the same rule, for the
grid's millions of pairs.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from pptrace.model.records import Event, TensorMeta

__all__ = ["FAST_KEY", "Compared", "Field", "NameDiff", "PayloadVerdict", "compare",
           "compare_events", "differs", "same"]


class Field(str, enum.Enum):
    """One thing that can differ for a name between the two sides."""

    NAME = "name"  # the name is on one side only
    SHAPE = "shape"  # the shapes differ
    DTYPE = "dtype"  # the dtypes differ, or one side is not a tensor
    DEVICE = "device"  # the device types differ (cpu against cuda)
    BYTES = "bytes"  # the byte counts differ
    FINGERPRINT = "fingerprint"  # both sides have a content fingerprint, and they differ


@dataclass(frozen=True, slots=True)
class NameDiff:
    """One auxiliary name as each side carried it (None: that side lacks the name)."""

    name: str
    left: TensorMeta | None
    right: TensorMeta | None
    differs: frozenset[Field]  # empty when the name agrees (or only one side was given)


@dataclass(frozen=True, slots=True)
class PayloadVerdict:
    """Two payloads compared: every name, and the order of the names both sides carry."""

    names: tuple[NameDiff, ...]  # the left side's order, then the names only the right has
    left_order: tuple[str, ...]  # the names both sides carry, in the left side's order
    right_order: tuple[str, ...]  # the same names, in the right side's order

    @property
    def order_differs(self) -> bool:
        """Both sides carry the shared names, in different orders."""
        return self.left_order != self.right_order

    @property
    def same(self) -> bool:
        """True when nothing differs (``payload.same`` answers this faster)."""
        return not self.order_differs and not any(line.differs for line in self.names)

    @property
    def differing(self) -> tuple[NameDiff, ...]:
        """The names that differ, in ``names`` order."""
        return tuple(line for line in self.names if line.differs)

    @property
    def missing(self) -> tuple[TensorMeta, ...]:
        """What only the left side carried."""
        return tuple(line.left for line in self.names
                     if line.right is None and line.left is not None)

    @property
    def extra(self) -> tuple[TensorMeta, ...]:
        """What only the right side carried."""
        return tuple(line.right for line in self.names
                     if line.left is None and line.right is not None)


class Compared(Protocol):
    """What the comparison reads of one value (a ``TensorMeta``, of either layer)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def is_tensor(self) -> bool: ...
    @property
    def device_type(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def fingerprint(self) -> str | None: ...


def differs(x: Compared, y: Compared) -> frozenset[Field]:
    """What differs between two values one name (or key) carried on each side: the shape, the
    dtype (or tensor or not), the device type, the byte count, and the content fingerprint when
    both sides have one. Every difference is named, not the first alone."""
    out = []
    if x.shape != y.shape:
        out.append(Field.SHAPE)
    if x.dtype != y.dtype or x.is_tensor != y.is_tensor:
        out.append(Field.DTYPE)
    if x.device_type != y.device_type:
        out.append(Field.DEVICE)
    if x.nbytes != y.nbytes:
        out.append(Field.BYTES)
    if x.fingerprint is not None and y.fingerprint is not None and x.fingerprint != y.fingerprint:
        out.append(Field.FINGERPRINT)
    return frozenset(out)


_NAME_ONLY = frozenset({Field.NAME})
_NOTHING: frozenset[Field] = frozenset()


def _lines(left: Sequence[TensorMeta], right: Sequence[TensorMeta],
           both: bool) -> PayloadVerdict:
    l_by = {t.name: t for t in left}
    r_by = {t.name: t for t in right}
    lines = []
    for name, x in l_by.items():
        y = r_by.get(name)
        if y is None:
            lines.append(NameDiff(name, x, None, _NAME_ONLY if both else _NOTHING))
        else:
            lines.append(NameDiff(name, x, y, _NOTHING if x == y else differs(x, y)))
    for name, y in r_by.items():
        if name not in l_by:
            lines.append(NameDiff(name, None, y, _NAME_ONLY if both else _NOTHING))
    left_order = tuple(name for name in l_by if name in r_by)
    right_order = tuple(name for name in r_by if name in l_by)
    return PayloadVerdict(tuple(lines), left_order, right_order)


def compare(left: Sequence[TensorMeta], right: Sequence[TensorMeta]) -> PayloadVerdict:
    """Compare two payloads name by name (an attach and its extract, or two TP ranks' attaches)."""
    return _lines(left, right, True)


def compare_events(left: Event | None, right: Event | None) -> PayloadVerdict:
    """``compare`` of two events' tensors; with one side missing, its names differ in nothing."""
    both = left is not None and right is not None
    return _lines(left.tensors if left is not None else (),
                  right.tensors if right is not None else (), both)


#: A tensor's compared fields as one tuple: equal keys mean equal payloads (the converse does
#: not hold: ``cuda:0`` and ``cuda:1`` agree, and so does a fingerprint against none), so a
#: vectorised comparison may trust equal keys and ask ``same`` about the rest.
FAST_KEY = attrgetter("name", "shape", "dtype", "is_tensor", "nbytes", "device", "fingerprint")


def same(left: Sequence[TensorMeta], right: Sequence[TensorMeta]) -> bool:
    """``compare(left, right).same``, fast for equal payloads."""
    if left is right:
        return True
    if list(map(FAST_KEY, left)) == list(map(FAST_KEY, right)):
        return True
    return compare(left, right).same
