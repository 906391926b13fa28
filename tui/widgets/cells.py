"""What the grid and the message timeline share: a scroll view of rows of ``CELL``-wide cells
after a gutter, drawn a line at a time with styles resolved once per theme.

    class GridView(CellView, can_focus=True):
        OVERLAYS = frozenset({"grid--divergence"})   # drawn over a cell: text style only
        ...
        styles = self._styles()                      # in render_line
        self._scroll_into_view(col, line)            # after the cursor moved
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from textual.binding import Binding
from textual.scroll_view import ScrollView

__all__ = ["CELL", "CellView", "cell_bindings"]

CELL = 2  # characters per cell: a glyph and a space


_MOVE = Binding.Group("Move", compact=True)
_PAGE = Binding.Group("Page", compact=True)
_EDGE = Binding.Group("First/last", compact=True)


def cell_bindings(row: str) -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    """The keys of a cell view: arrows step (``row``: what up and down step between, "Row" or
    "Rank"), PgUp/PgDn a screen's width, Home/End the first and last; each view's ``move``,
    ``page`` and ``edge`` actions do the stepping."""
    return [
        Binding("left", "move(0, -1)", "Earlier", key_display="←", group=_MOVE),
        Binding("right", "move(0, 1)", "Later", key_display="→", group=_MOVE),
        Binding("up", "move(-1, 0)", f"{row} up", key_display="↑", group=_MOVE),
        Binding("down", "move(1, 0)", f"{row} down", key_display="↓", group=_MOVE),
        Binding("pageup", "page(-1)", "Page left", key_display="PgUp", group=_PAGE, show=False),
        Binding("pagedown", "page(1)", "Page right", key_display="PgDn", group=_PAGE, show=False),
        Binding("home", "edge(0)", "First", key_display="Home", group=_EDGE, show=False),
        Binding("end", "edge(1)", "Last", key_display="End", group=_EDGE, show=False),
    ]


class CellView(ScrollView):
    """A scroll view whose first line is a ruler and whose other lines are rows of cells,
    ``gutter_width`` columns in (the subclass says how wide its gutter is)."""

    #: Component classes drawn over a cell's own style: their text style only.
    OVERLAYS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._style_cache: dict[str, Style] | None = None

    @property
    def gutter_width(self) -> int:
        """Columns left of the cells."""
        return 0

    def _styles(self) -> dict[str, Style]:
        # Resolving a component style walks the CSS: once per theme/CSS change, not per line.
        if self._style_cache is None:
            # Whole styles, background included: "$text" picks its contrast against the
            # background it is drawn on (a partial style resolves it against black: white labels
            # on the light theme). An overlay: text style only.
            self._style_cache = {
                n: self.get_component_rich_style(n, partial=n in self.OVERLAYS)
                for n in self.COMPONENT_CLASSES}
            self._style_cache["base"] = self.rich_style
        return self._style_cache

    def on_mount(self) -> None:
        # A theme switch changes the variables the component classes use, without a style
        # update on this widget: resolve the styles again, or the view keeps the old theme.
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        self._style_cache = None
        self.refresh()

    def notify_style_update(self) -> None:
        """Forget the resolved styles when the CSS changes."""
        self._style_cache = None
        super().notify_style_update()

    def _columns_on_screen(self) -> int:
        """Whole cells that fit right of the gutter (at least one)."""
        return max(1, (self.scrollable_content_region.width - self.gutter_width) // CELL)

    def _scroll_into_view(self, col: int, line: int | None) -> None:
        """Scroll so that cell ``col`` of row ``line`` (counted among the rows drawn, below the
        ruler; None: leave the rows where they are) is on screen, moving as little as can be."""
        first, shown = int(self.scroll_x) // CELL, self._columns_on_screen()
        x = self.scroll_x
        if col < first:
            x = col * CELL
        elif col >= first + shown:
            x = (col - shown + 1) * CELL
        y = self.scroll_y
        if line is not None:
            lines = max(1, self.scrollable_content_region.height - 1)
            if line < y:
                y = line
            elif line >= y + lines:
                y = line - lines + 1
        self.scroll_to(x, y, animate=False, immediate=True)
