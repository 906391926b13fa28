"""Every message the viewer's widgets send each other: the whole vocabulary, named as events.

Widgets never reach into each other; they post one of these and the screen reacts.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from .filters import FilterSpec

__all__ = ["CellSelected", "FilterChanged", "FindingChosen", "SearchSubmitted"]


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
class SearchSubmitted(Message):
    """The user pressed enter in the search box."""

    text: str
