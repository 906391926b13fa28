"""Every message the viewer's widgets send each other: the whole vocabulary, named as events.

Widgets never reach into each other; they post one of these and the screen reacts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from .filters import FilterSpec

__all__ = ["CellSelected", "ExportWritten", "FilterChanged", "FindingChosen"]


@dataclass
class CellSelected(Message):
    """The grid cursor moved to a cell (by key, mouse, replay or a jump)."""

    row: int
    col: int


@dataclass
class FindingChosen(Message):
    """The user chose a finding in the findings panel (its index in ``TraceIndex.findings``)."""

    index: int


@dataclass
class FilterChanged(Message):
    """The filter form was applied."""

    spec: FilterSpec


@dataclass
class ExportWritten(Message):
    """The main screen wrote an export file (the app remembers the last one)."""

    path: Path
