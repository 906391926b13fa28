"""One-line widgets under the grid: the legend and the replay bar."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.widgets import Static

from pptrace.model.records import Event

from ..index import Cell, TraceIndex
from ..literal import literal
from ..widgets.grid import DIVERGENCE_GLYPH, GLYPHS
from ..widgets.pair_detail import clock

__all__ = ["Legend", "ReplayBar"]

_NAMES = {
    Cell.ATTACH: "attach",
    Cell.EXTRACT: "extract",
    Cell.PAIRED: "paired, equal",
    Cell.FAILED: "other side raised",
    Cell.MISMATCH: "mismatch",
    Cell.ERROR: "raised",
    Cell.ORPHAN: "unpaired",
}
_STYLES = {
    Cell.ATTACH: "bold blue",
    Cell.EXTRACT: "bold magenta",
    Cell.PAIRED: "bold green",
    Cell.FAILED: "bold red",
    Cell.MISMATCH: "bold red",
    Cell.ERROR: "bold red reverse",
    Cell.ORPHAN: "bold yellow",
}


def legend_text(states: Iterable[Cell] | None = None, divergence: bool = True) -> Text:
    """What each glyph means: of the states given (all of them by default)."""
    shown = set(_NAMES) if states is None else set(states)
    text = Text()
    for cell, name in _NAMES.items():
        if cell in shown:
            text.append(f"{GLYPHS[cell]} ", _STYLES[cell])
            text.append(f"{name}  ")
    if divergence:
        text.append(f"{DIVERGENCE_GLYPH} ", "bold red")
        text.append("first divergence")
    return text


class Legend(Static):
    """The glyph legend: only the states the grid shows (the help screen lists them all)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(legend_text(), id=id)

    def show(self, index: TraceIndex) -> None:
        """List the states this trace's cells take."""
        states = {state for row in index.rows for state in row.counts}
        self.update(legend_text(states, index.first_divergence_cell is not None))


class ReplayBar(Static):
    """Where the replay is: position in time order, play state, speed, the event, the filter."""

    def show(self, *, position: int, total: int, playing: bool, speed: float,
             event: Event | None, filter_text: str, timeline_ready: bool) -> None:
        """Redraw with the replay's state."""
        text = Text()
        text.append("▶ playing " if playing else "⏸ paused ", "bold green" if playing else "bold")
        text.append(f"{speed:g} ev/s  ")
        if timeline_ready and position >= 0:
            text.append(f"event {position + 1:,}/{total:,}  ")
        elif not timeline_ready:
            text.append("ordering events…  ", "dim")
        if event is not None:
            text.append(clock(event.start_ns) + "  ", "dim")
            text.append_text(literal(event.rank.label()))
            text.append(f" {event.direction.value} #{event.seq}")
        if filter_text:
            text.append("  filter: ", "bold yellow")
            text.append_text(literal(filter_text))
        self.update(text, layout=False)  # one line, always: no need to lay the screen out
