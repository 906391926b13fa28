"""The overview grid: one line per (rank, direction), one cell per microbatch, coloured by state.

A Line API widget: ``render_line`` draws only the rows and columns on screen, so a trace of 1M
events paints as fast as one of 100. The left gutter (rank label, event count, problems) and the
top ruler stay put while the cells scroll.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.strip import Strip

from ..filters import FilterSpec
from ..index import Cell, TraceIndex
from ..messages import CellSelected
from .cells import CELL, CellView, cell_bindings

__all__ = ["GLYPHS", "GridView"]

LABEL_MAX = 18  # the widest rank label ("pp12 tp3 extract")
_HEAD = ("rank / dir", "events", "bad")

#: The glyph of each cell state (also the legend, the help screen and the tmux test read these).
GLYPHS = {
    Cell.EMPTY: "·",
    Cell.ATTACH: "a",
    Cell.EXTRACT: "e",
    Cell.PAIRED: "=",
    Cell.FAILED: "×",
    Cell.ORPHAN: "?",
    Cell.MISMATCH: "≠",
    Cell.ERROR: "!",
}
DIVERGENCE_GLYPH = "◆"
_CLASS = {
    Cell.EMPTY: "grid--empty",
    Cell.ATTACH: "grid--attach",
    Cell.EXTRACT: "grid--extract",
    Cell.PAIRED: "grid--paired",
    Cell.FAILED: "grid--failed",
    Cell.ORPHAN: "grid--orphan",
    Cell.MISMATCH: "grid--mismatch",
    Cell.ERROR: "grid--error",
}


class GridView(CellView, can_focus=True):
    """Rank x microbatch overview with a cell cursor."""

    HELP_GROUP = "Grid"
    OVERLAYS = frozenset({"grid--divergence"})

    COMPONENT_CLASSES = {
        *_CLASS.values(),
        "grid--cursor",
        "grid--dim",
        "grid--gutter",
        "grid--gutter-bad",
        "grid--header",
        "grid--divergence",
    }

    BINDINGS = cell_bindings("Row")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index: TraceIndex | None = None
        self.spec = FilterSpec()
        self.visible_rows: list[int] = []
        self.cursor: tuple[int, int] = (0, 0)  # absolute (row, col)
        #: widths of the gutter's label, count and problem columns (from the rows shown).
        self._widths = (len(_HEAD[0]), len(_HEAD[1]), len(_HEAD[2]))

    @property
    def gutter_width(self) -> int:
        """Columns left of the cells: label, event count, problem count, one space after each."""
        return sum(self._widths) + 3

    # --- data ----------------------------------------------------------------------------
    def set_index(self, index: TraceIndex) -> None:
        """Show another index (a fresh load, or ``--follow`` saw the trace grow)."""
        self.index = index
        self._layout()
        row, col = self.cursor
        if self.visible_rows and row not in self.visible_rows:
            row = self.visible_rows[0]
        self.cursor = (row, min(col, max(index.width - 1, 0)))
        self.refresh()

    def set_filter(self, spec: FilterSpec) -> None:
        """Dim what the filter hides; hide rows it excludes."""
        self.spec = spec
        self._layout()
        if self.visible_rows and self.cursor[0] not in self.visible_rows:
            self.goto(self.visible_rows[0], self.cursor[1])
        self.refresh()

    def _layout(self) -> None:
        index = self.index
        if index is None:
            return
        self.visible_rows = [i for i, r in enumerate(index.rows) if self.spec.row_visible(r)]
        # The gutter is as wide as the rows shown need (never wider): at 80 columns every
        # column it does not take is a cell the user sees.
        rows = [index.rows[i] for i in self.visible_rows]
        label = max((len(r.label) for r in rows), default=0)
        events = max((len(f"{sum(r.counts.values()):,}") for r in rows), default=0)
        bad = max((len(f"{r.problems:,}✗") for r in rows if r.problems), default=0)
        self._widths = (max(len(_HEAD[0]), min(label, LABEL_MAX)), max(len(_HEAD[1]), events),
                        max(len(_HEAD[2]), bad))
        self.virtual_size = Size(self.gutter_width + index.width * CELL, len(self.visible_rows) + 1)

    # --- cursor --------------------------------------------------------------------------
    def goto(self, row: int, col: int, *, announce: bool = True) -> None:
        """Move the cursor to a cell, scroll it into view and (by default) announce it."""
        if self.index is None or not 0 <= row < len(self.index.rows):
            return
        col = max(0, min(col, self.index.width - 1))
        self.cursor = (row, col)
        self._scroll_to_cursor()
        self.refresh()
        if announce:
            self.post_message(CellSelected(row, col))

    def _scroll_to_cursor(self) -> None:
        row, col = self.cursor
        pos = self.visible_rows.index(row) if row in self.visible_rows else None
        self._scroll_into_view(col, pos)

    def action_move(self, drow: int, dcol: int) -> None:
        """Move the cursor by rows (among visible rows) and columns."""
        if not self.visible_rows:
            return
        row, col = self.cursor
        pos = self.visible_rows.index(row) if row in self.visible_rows else 0
        pos = max(0, min(len(self.visible_rows) - 1, pos + drow))
        self.goto(self.visible_rows[pos], col + dcol)

    def action_page(self, direction: int) -> None:
        """Move the cursor a screen's width of columns."""
        self.action_move(0, direction * self._columns_on_screen())

    def action_edge(self, end: int) -> None:
        """Jump to the first column, or the last cell of the current row."""
        if self.index is None or not self.visible_rows:
            return
        row = self.cursor[0]
        self.goto(row, len(self.index.rows[row].cells) - 1 if end else 0)

    def on_click(self, event: events.Click) -> None:
        """Select the clicked cell."""
        offset = event.get_content_offset(self)
        gutter = self.gutter_width
        if offset is None or self.index is None or offset.x < gutter or offset.y < 1:
            return
        pos = offset.y - 1 + int(self.scroll_y)
        if pos >= len(self.visible_rows):
            return
        col = int(self.scroll_x) // CELL + (offset.x - gutter) // CELL
        self.focus()
        self.goto(self.visible_rows[pos], col)

    # --- drawing -------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        """Draw one screen line: the ruler (y == 0) or one rank's cells."""
        width = self.scrollable_content_region.width
        index = self.index
        styles = self._styles()
        if index is None:
            return Strip.blank(width, styles["base"])
        first_col = int(self.scroll_x) // CELL
        shown = self._columns_on_screen()
        last_col = min(index.width, first_col + shown)
        if y == 0:
            return self._ruler(first_col, last_col, styles, width)
        pos = y - 1 + int(self.scroll_y)
        if pos >= len(self.visible_rows):
            return Strip.blank(width, styles["base"])
        r = self.visible_rows[pos]
        row = index.rows[r]
        count = sum(row.counts.values())  # events (gaps from dropped events are not counted)
        lw, cw, bw = self._widths
        label = row.label if len(row.label) <= lw else row.label[: lw - 1] + "…"
        segments = [Segment(f"{label:<{lw}} {count:>{cw},} ", styles["grid--gutter"])]
        bad = row.problems
        segments.append(
            Segment(f"{f'{bad:,}✗':>{bw}} ", styles["grid--gutter-bad"])
            if bad else Segment(" " * (bw + 1), styles["grid--gutter"])
        )
        cells = row.cells
        n = len(cells)
        spec = self.spec
        filtering = spec.active
        divergence = index.first_divergence_cell
        cursor = self.cursor
        dim = styles["grid--dim"]
        for col in range(first_col, last_col):
            state = Cell(cells[col]) if col < n else Cell.EMPTY
            glyph = GLYPHS[state]
            style = styles[_CLASS[state]]
            if filtering and state is not Cell.EMPTY and not spec.cell_visible(index, r, col):
                style = dim
            if divergence == (r, col):
                glyph = DIVERGENCE_GLYPH
                style = style + styles["grid--divergence"]
            if cursor == (r, col):
                style = style + styles["grid--cursor"]
            segments.append(Segment(glyph + " ", style))
        return Strip(segments).adjust_cell_length(width, styles["base"])

    def _ruler(self, first: int, last: int, styles: dict[str, Style], width: int) -> Strip:
        chars = [" "] * ((last - first) * CELL)
        col = first + (-first % 10)
        while col < last:
            label = str(col)
            at = (col - first) * CELL
            chars[at : at + len(label)] = label[: len(chars) - at]
            col += 10
        divergence = self.index.first_divergence_cell if self.index else None
        if divergence is not None and first <= divergence[1] < last:
            chars[(divergence[1] - first) * CELL] = "▼"
        lw, cw, bw = self._widths
        head = f"{_HEAD[0]:<{lw}} {_HEAD[1]:>{cw}} {_HEAD[2]:>{bw}} "
        segments = [
            Segment(head, styles["grid--header"]),
            Segment("".join(chars), styles["grid--header"]),
        ]
        return Strip(segments).adjust_cell_length(width, styles["base"])
