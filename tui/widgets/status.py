"""One-line widgets under the grid: the legend and the replay bar."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from pptrace.model.records import Event

from ..index import Cell
from ..literal import literal
from ..widgets.grid import DIVERGENCE_GLYPH, GLYPHS
from ..widgets.pair_detail import clock

__all__ = ["Legend", "ReplayBar"]

_NAMES = {
    Cell.ATTACH: "attach",
    Cell.EXTRACT: "extract",
    Cell.PAIRED: "paired, equal",
    Cell.MISMATCH: "mismatch",
    Cell.ERROR: "engine error",
    Cell.ORPHAN: "orphan",
}
_STYLES = {
    Cell.ATTACH: "bold blue",
    Cell.EXTRACT: "bold magenta",
    Cell.PAIRED: "bold green",
    Cell.MISMATCH: "bold red",
    Cell.ERROR: "bold red reverse",
    Cell.ORPHAN: "bold yellow",
}


def legend_text() -> Text:
    """What each glyph means."""
    text = Text()
    for cell, name in _NAMES.items():
        text.append(f" {GLYPHS[cell]} ", _STYLES[cell])
        text.append(f"{name}  ")
    text.append(f" {DIVERGENCE_GLYPH} ", "bold red")
    text.append("first divergence")
    return text


class Legend(Static):
    """The glyph legend."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(legend_text(), id=id)


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
