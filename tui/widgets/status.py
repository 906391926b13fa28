"""One-line widgets under the grid: the legend and the replay bar."""

from __future__ import annotations

from collections.abc import Iterable

from textual.content import Content
from textual.widgets import Static

from pptrace.model.records import Event
from pptrace.model.text import inert

from ..index import Cell, TraceIndex
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
    Cell.ATTACH: "bold $text-primary",
    Cell.EXTRACT: "bold $text-secondary",
    Cell.PAIRED: "bold $text-success",
    Cell.FAILED: "bold $text-error",
    Cell.MISMATCH: "bold $text-error",
    Cell.ERROR: "bold $text-error reverse",
    Cell.ORPHAN: "bold $text-warning",
}


def legend_text(states: Iterable[Cell] | None = None, divergence: bool = True) -> Content:
    """What each glyph means: of the states given (all of them by default). Theme variables,
    not colours: the light theme has its own."""
    shown = set(_NAMES) if states is None else set(states)
    parts: list[tuple[str, str] | str] = []
    for cell, name in _NAMES.items():
        if cell in shown:
            parts += [(f"{GLYPHS[cell]} ", _STYLES[cell]), f"{name}  "]
    if divergence:
        parts += [(f"{DIVERGENCE_GLYPH} ", "bold $text-error"), "first divergence"]
    return Content.assemble(*parts)


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
        parts: list[tuple[str, str] | str] = [
            ("▶ playing " if playing else "⏸ paused ", "bold $text-success" if playing else "bold"),
            f"{speed:g} ev/s  "]
        if timeline_ready and position >= 0:
            parts.append(f"event {position + 1:,}/{total:,}  ")
        elif not timeline_ready:
            parts.append(("ordering events…  ", "$text-muted"))
        if event is not None:
            parts += [(clock(event.start_ns) + "  ", "$text-muted"), inert(event.rank.label()),
                      f" {event.direction.value} #{event.seq}"]
        if filter_text:
            parts += [("  filter: ", "bold $text-warning"), inert(filter_text)]
        text = Content.assemble(*parts)  # plain strings are never read as markup
        self.update(text, layout=False)  # one line, always: no need to lay the screen out
