"""The stage x time view of the PP message layer: one line per rank, one column per message.

A Line API widget, as the overview grid is: ``render_line`` draws only the rows and columns on
screen, so 1M messages scroll as fast as 100. A send is ``▶``, a receive ``◀``, a receive that
waits ``⧗`` with ``┄`` running to the end of its wait; the kind picks the colour (output,
proxy, other), a message a finding names is drawn on the error colour, and the message at the
other end of the selected one is underlined. Columns are messages in wall-clock order (see
``pptrace_tui.message_index``); the ruler gives their time since the first message.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip

from ..message_index import Glyph, MessageIndex
from .cells import CELL, CellView, cell_bindings

__all__ = ["GLYPHS", "WAIT_LINE", "MessageTimeline", "since"]

LABEL_MAX = 14
_HEAD = ("stage / rank", "msgs", "bad")
#: The glyph of each kind of column (the legend and the tests read these).
GLYPHS = {Glyph.SEND: "▶", Glyph.RECV: "◀", Glyph.WAIT: "⧗"}
WAIT_LINE = "┄"
_KIND_CLASS = {"output": "mt--output", "proxy": "mt--proxy", "": "mt--other"}


def since(ns: int) -> str:
    """``+12.3ms``, ``+4.01s``: a time since the first message, short enough for the ruler."""
    if ns < 1_000_000:
        return f"+{ns / 1e3:.0f}µs"
    if ns < 1_000_000_000:
        return f"+{ns / 1e6:.1f}ms"
    return f"+{ns / 1e9:.2f}s"


class MessageTimeline(CellView, can_focus=True):
    """Stage x time view of every send and receive, with a message cursor."""

    HELP_GROUP = "Messages"
    OVERLAYS = frozenset({"mt--counterpart"})
    COMPONENT_CLASSES = {
        *_KIND_CLASS.values(), "mt--finding", "mt--wait", "mt--cursor", "mt--counterpart",
        "mt--gutter", "mt--gutter-bad", "mt--header",
    }
    BINDINGS = cell_bindings("Rank")

    @dataclass
    class Chosen(Message):
        """The cursor moved to a message (its column in the index)."""

        col: int

    def __init__(self, index: MessageIndex, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = index
        self.cursor = -1  # the selected message's column; -1: none
        self.other: int | None = None  # the column of the message at its other end
        self.others: frozenset[int] = frozenset()  # every member's receive, for a broadcast
        rows = index.rows
        self._widths = (
            max(len(_HEAD[0]), min(max((len(r.label) for r in rows), default=0), LABEL_MAX)),
            max(len(_HEAD[1]), max((len(f"{len(r.cols):,}") for r in rows), default=0)),
            max(len(_HEAD[2]), max((len(f"{r.problems:,}✗") for r in rows if r.problems),
                                   default=0)))
        self.virtual_size = Size(self.gutter_width + index.width * CELL, len(rows) + 1)

    @property
    def gutter_width(self) -> int:
        """Columns left of the messages: label, count, findings, one space after each."""
        return sum(self._widths) + 3

    # --- cursor ------------------------------------------------------------------------------
    def select(self, col: int) -> None:
        """Select a message, scroll it into view and announce it."""
        if not 0 <= col < self.index.width:
            return
        self.cursor = col
        self.other = self.index.counterpart(col)
        self.others = frozenset(self.index.counterparts(col))  # a broadcast: every member
        self._show_col(col)
        self.refresh()
        self.post_message(self.Chosen(col))

    def _show_col(self, col: int) -> None:
        self._scroll_into_view(col, self.index.row_of[col])

    def action_move(self, drow: int, dcol: int) -> None:
        """Step to the previous/next message of the rank, or the nearest one of the rank
        above/below."""
        index = self.index
        if self.cursor < 0:
            return
        if dcol:
            self.select(index.step(self.cursor, dcol))
            return
        row = index.row_of[self.cursor] + drow
        while 0 <= row < len(index.rows):
            near = index.nearest(row, self.cursor)
            if near is not None:
                self.select(near)
                return
            row += drow

    def action_page(self, direction: int) -> None:
        """Move a screen's width of messages along the rank."""
        if self.cursor >= 0:
            row = self.index.row_of[self.cursor]
            near = self.index.nearest(row, self.cursor + direction * self._columns_on_screen())
            if near is not None:
                self.select(near)

    def action_edge(self, end: int) -> None:
        """Jump to the rank's first or last message."""
        if self.cursor >= 0:
            cols = self.index.rows[self.index.row_of[self.cursor]].cols
            self.select(cols[-1] if end else cols[0])

    def on_click(self, event: events.Click) -> None:
        """Select the clicked message (or the nearest one of the clicked rank)."""
        offset = event.get_content_offset(self)
        if offset is None or offset.x < self.gutter_width or offset.y < 1:
            return
        row = offset.y - 1 + int(self.scroll_y)
        if row >= len(self.index.rows):
            return
        col = int(self.scroll_x) // CELL + (offset.x - self.gutter_width) // CELL
        near = self.index.nearest(row, col)
        self.focus()
        if near is not None:
            self.select(near)

    # --- drawing -----------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        """Draw one screen line: the ruler (y == 0) or one rank's messages."""
        width = self.scrollable_content_region.width
        styles = self._styles()
        index = self.index
        first = int(self.scroll_x) // CELL
        last = min(index.width, first + self._columns_on_screen())
        if y == 0:
            return self._ruler(first, last, styles, width)
        r = y - 1 + int(self.scroll_y)
        if r >= len(index.rows):
            return Strip.blank(width, styles["base"])
        row = index.rows[r]
        lw, cw, bw = self._widths
        label = row.label if len(row.label) <= lw else row.label[: lw - 1] + "…"
        segments = [Segment(f"{label:<{lw}} {len(row.cols):>{cw},} ", styles["mt--gutter"])]
        segments.append(Segment(f"{f'{row.problems:,}✗':>{bw}} ", styles["mt--gutter-bad"])
                        if row.problems else Segment(" " * (bw + 1), styles["mt--gutter"]))
        cells = [("  ", styles["base"])] * (last - first)
        wait = styles["mt--wait"]
        for a, b in row.waits:
            for c in range(max(a, first), min(b + 1, last)):
                cells[c - first] = (WAIT_LINE * CELL, wait)
        for c in index.in_range(r, first, last):
            glyph = index.glyph(c)
            style = styles[_KIND_CLASS[index.kind(c)]]
            if index.marked(c):
                style = style + styles["mt--finding"]
            if c == self.other or c in self.others:
                style = style + styles["mt--counterpart"]
            if c == self.cursor:
                style = style + styles["mt--cursor"]
            tail = WAIT_LINE if glyph is Glyph.WAIT else " "
            cells[c - first] = (GLYPHS[glyph] + tail, style)
        segments += [Segment(text, style) for text, style in cells]
        return Strip(segments).adjust_cell_length(width, styles["base"])

    def _ruler(self, first: int, last: int, styles: dict[str, Style], width: int) -> Strip:
        chars = [" "] * ((last - first) * CELL)
        col = first + (-first % 10)
        times, t0 = self.index.times, self.index.t0
        while col < last:
            label = since(times[col] - t0)
            at = (col - first) * CELL
            chars[at: at + len(label)] = label[: len(chars) - at]
            col += 10
        lw, cw, bw = self._widths
        head = f"{_HEAD[0]:<{lw}} {_HEAD[1]:>{cw}} {_HEAD[2]:>{bw}} "
        return Strip([Segment(head, styles["mt--header"]),
                      Segment("".join(chars), styles["mt--header"])]
                     ).adjust_cell_length(width, styles["base"])
