"""The pair detail: the selected cell's calls compared, one line per auxiliary name.

A Line API widget, like the grid: ``render_line`` draws only the lines on screen, so a pair of
10^5 tensors costs what a pair of 2 does (``lines_drawn`` counts the tensor lines formatted, for
the test that holds it to that). What it shows, top to bottom: the findings at the cell; per
comparison (a TP disagreement first, then the attach against its extract) both calls, their
engine errors, then a table of every name (a value that differs is drawn ``left → right`` in the
highlight style), then the dict keys before and after each call (the first few). Every string
from the trace is a ``literal`` Text (never markup); styles are the widget's component classes.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime, timezone

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from pptrace.analyze.payload import Field, NameDiff
from pptrace.model.findings import Severity
from pptrace.model.text import clip, inert

from ..compare import FIELDS, Comparison, PairView, Side, field_text
from ..literal import literal

__all__ = ["PairDetail", "clock"]

#: Dict keys listed per call before "… N more" (a wide payload has a key per tensor).
MAX_KEYS = 12
#: Tensor lines whose values size the table's columns (a bounded sample: the rest are cut to fit).
SAMPLE = 256
_HEAD = {Field.NAME: "name", Field.SHAPE: "shape", Field.DTYPE: "dtype", Field.DEVICE: "device",
         Field.BYTES: "bytes", Field.FINGERPRINT: "fingerprint"}


def clock(ns: int) -> str:
    """Wall-clock time of day with microseconds (UTC)."""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%H:%M:%S.%f")


def _keys(keys: tuple[str, ...]) -> str:
    if not keys:
        return "(none)"
    shown = ", ".join(keys[:MAX_KEYS])
    return shown if len(keys) <= MAX_KEYS else f"{shown}, … ({len(keys) - MAX_KEYS:,} more)"


@dataclass(frozen=True, slots=True)
class _Table:
    """One comparison's tensor table, laid out for one width: drawn a line at a time."""

    comparison: Comparison
    fields: tuple[Field, ...]
    widths: tuple[int, ...]  # per field, then the note column


def _value(line: NameDiff, f: Field, sep: str) -> tuple[str, bool]:
    """A field's text on a line and whether it differs (``left → right`` when both differ)."""
    left, right = field_text(line.left, f, short=True), field_text(line.right, f, short=True)
    if line.left is None or line.right is None or f is Field.NAME:
        return (left or right), f in line.differs
    if left == right:
        return left, False
    return f"{left} {sep} {right}", f in line.differs


def _note(line: NameDiff, comparison: Comparison) -> str:
    if Field.NAME not in line.differs:
        return ""
    side = comparison.left if line.right is None else comparison.right
    return f"only {side.role}"


def _fit(wanted: list[int], floors: list[int], width: int) -> tuple[int, ...]:
    """Shrink the widest columns until the row (one space between columns) fits ``width``."""
    widths = list(wanted)
    excess = sum(widths) + len(widths) - 1 - width
    while excess > 0:
        i = max(range(len(widths)), key=lambda k: widths[k] - floors[k])
        if widths[i] <= floors[i]:
            break
        widths[i] -= 1
        excess -= 1
    return tuple(widths)


def _layout(comparison: Comparison, width: int) -> _Table:
    names = comparison.verdict.names
    sample = names[:SAMPLE]
    fields: list[Field] = [f for f in FIELDS if f is not Field.FINGERPRINT]
    if any(m is not None and m.fingerprint for line in sample for m in (line.left, line.right)):
        fields.append(Field.FINGERPRINT)
    sep = "→" if comparison.transit else "≠"
    wanted = [max([len(_HEAD[f]), *(len(_value(line, f, sep)[0]) for line in sample)])
              for f in fields]
    note = max([0, *(len(_note(line, comparison)) for line in sample)])
    floors = [max(4, min(len(_HEAD[f]), w)) for f, w in zip(fields, wanted, strict=True)]
    return _Table(comparison, tuple(fields), _fit([*wanted, note], [*floors, 0], width))


def _cell(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: max(0, width - 1)] + "…"


class PairDetail(ScrollView, can_focus=True):
    """The scrollable pair detail; ``show`` a ``PairView`` (None: an empty cell)."""

    HELP_GROUP = "Pair detail"
    COMPONENT_CLASSES = {
        "pair--title", "pair--role", "pair--dim", "pair--diff", "pair--missing", "pair--error",
        "pair--warning", "pair--head",
    }

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pair: PairView | None = None
        #: said after "No event here" (where the first divergence is when it is not a cell)
        self.empty_hint = ""
        self._reveal = False
        #: tensor lines formatted since the last ``show`` (the virtualisation test reads it).
        self.lines_drawn = 0
        self._width = -1
        self._starts: list[int] = []  # first line of each block
        self._blocks: list[list[Strip] | _Table] = []
        self._style_cache: dict[str, Style] | None = None

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._restyle)

    def _restyle(self, _theme: object = None) -> None:
        self._style_cache = None
        self._width = -1
        self.refresh()

    def notify_style_update(self) -> None:
        """Forget the resolved styles when the CSS changes."""
        self._style_cache = None
        self._width = -1
        super().notify_style_update()

    def _styles(self) -> dict[str, Style]:
        if self._style_cache is None:
            # Whole styles (background included), so that "$text" contrasts with what is under
            # it in either theme; "base" is the widget's own, under every plain segment.
            self._style_cache = {n.removeprefix("pair--"): self.get_component_rich_style(n)
                                 for n in self.COMPONENT_CLASSES}
            self._style_cache["base"] = self.rich_style
        return self._style_cache

    # --- content -------------------------------------------------------------------------
    def show(self, pair: PairView | None) -> None:
        """Show a cell's comparisons (None: nothing there)."""
        self.pair = pair
        self.lines_drawn = 0
        self._width = -1
        self.scroll_to(0, 0, animate=False, immediate=True)
        self._reveal = True  # once laid out: bring the first differing row into view
        self.refresh()

    def _paragraphs(self, width: int) -> list[list[Strip] | _Table]:
        """Every block for this width: wrapped paragraphs and (unwrapped) tensor tables."""
        s = self._styles()
        pair = self.pair
        blocks: list[list[Strip] | _Table] = []

        def para(*parts: Text | str | tuple[str, Style], one_line: bool = False) -> None:
            text = Text.assemble(*parts)
            if one_line:
                text.no_wrap, text.overflow = True, "ellipsis"
            blocks.append(self._wrap(text, width))

        if pair is None:
            para(("No event here. Move the cursor to a cell, or pick a finding.", s["dim"]))
            if self.empty_hint:
                para((self.empty_hint, s["warning"]))
            return blocks
        for finding in pair.findings:
            style = s["error"] if finding.severity >= Severity.ERROR else s["warning"]
            # One line each: the findings panel shows the whole message.
            para((f"{finding.kind.value}: ", style), literal(clip(finding.message)),
                 one_line=True)
        for comparison in pair.comparisons:
            sep = "→" if comparison.transit else "≠"
            para((f"── {comparison.title} ", s["title"]),
                 (f"({comparison.left.role} {sep} {comparison.right.role})", s["dim"]))
            for side in (comparison.left, comparison.right):
                para(*self._side(side, s), one_line=True)
            for side in (comparison.left, comparison.right):
                ev = side.event
                if ev is not None and ev.error_type is not None:
                    para((f"{side.role} raised: ", s["error"]),
                         literal(clip(f"{ev.error_type}: {ev.error_message or ''}"), s["error"]))
                    if ev.inserted_before_error:
                        para((f"  {side.role} left in the dict: ", s["role"]),
                             literal(_keys(ev.inserted_before_error)))
            if comparison.verdict.order_differs:
                para(("the two sides carry the same names in a different order", s["warning"]))
            if comparison.verdict.names:
                blocks.append(_layout(comparison, width))
            else:
                para(("no auxiliary tensors", s["dim"]))
            for side in (comparison.left, comparison.right):
                ev = side.event
                if ev is not None and comparison.transit:
                    para((f"{side.role} keys before: ", s["role"]), literal(_keys(ev.keys_before)))
                    para((f"{side.role} keys after:  ", s["role"]), literal(_keys(ev.keys_after)))
        return blocks

    def _side(self, side: Side, s: dict[str, Style]) -> tuple[Text | str | tuple[str, Style], ...]:
        ev = side.event
        if ev is None:
            return (f"{side.role}: ", s["role"]), ("no counterpart", s["missing"])
        return ((f"{side.role}: ", s["role"]), literal(ev.rank.label()), f"  #{ev.seq}  ",
                (clock(ev.start_ns), s["dim"]), "  ", literal(clip(ev.subject_type, 200), s["dim"]))

    def _wrap(self, text: Text, width: int) -> list[Strip]:
        console = self.app.console
        lines = console.render_lines(text, console.options.update(width=max(1, width),
                                                                  height=None), pad=False)
        return [Strip(line) for line in lines]

    def _relayout(self) -> None:
        width = self.scrollable_content_region.width
        if width == self._width:
            return
        self._width = width
        self._blocks = self._paragraphs(width)
        self._starts = []
        total = 0
        for block in self._blocks:
            self._starts.append(total)
            total += (len(block) if isinstance(block, list)
                      else 1 + len(block.comparison.verdict.names))
        self.virtual_size = Size(width, total)
        if self._reveal:
            self._reveal = False
            first = self._first_difference()
            height = self.scrollable_content_region.height
            if first is not None and height and first >= height:
                # At 80x24 the detail has 7 lines: the differing row of a table would sit
                # below them. Scroll it onto the last line (the findings panel has the lines
                # this scrolls away); not now, mid-draw, but right after.
                self.call_after_refresh(self.scroll_to, 0, first - height + 1, animate=False,
                                        immediate=True)

    def _first_difference(self) -> int | None:
        """The line of the first table row with a differing field, if any."""
        for start, block in zip(self._starts, self._blocks, strict=True):
            if isinstance(block, _Table):
                for i, name in enumerate(block.comparison.verdict.names):
                    if name.differs:
                        return start + 1 + i
        return None

    # --- scrolling: at once, since an animated scroll draws every line it passes ------------
    def action_scroll_home(self) -> None:
        """Scroll to the top."""
        self.scroll_home(animate=False, immediate=True)

    def action_scroll_end(self) -> None:
        """Scroll to the bottom."""
        self.scroll_end(animate=False, immediate=True)

    def action_page_up(self) -> None:
        """Scroll up a page."""
        self.scroll_page_up(animate=False)

    def action_page_down(self) -> None:
        """Scroll down a page."""
        self.scroll_page_down(animate=False)

    # --- drawing -------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        """Draw one screen line of the detail."""
        self._relayout()
        width = self._width
        base = self._styles()["base"]
        line = y + int(self.scroll_y)
        if not self._blocks or line < 0:
            return Strip.blank(width, base)
        b = bisect_right(self._starts, line) - 1
        block, at = self._blocks[b], line - self._starts[b]
        if isinstance(block, list):
            strip = block[at] if at < len(block) else Strip.blank(width, base)
        elif at == 0:
            strip = self._table_head(block)
        elif at - 1 < len(block.comparison.verdict.names):
            strip = self._table_line(block, block.comparison.verdict.names[at - 1])
        else:
            strip = Strip.blank(width, base)
        return strip.adjust_cell_length(width, base).apply_style(base)

    def _table_head(self, table: _Table) -> Strip:
        s = self._styles()
        names = [*(_HEAD[f] for f in table.fields), ""]
        text = " ".join(_cell(n, w) for n, w in zip(names, table.widths, strict=True))
        return Strip([Segment(text.rstrip(), s["head"])])

    def _table_line(self, table: _Table, line: NameDiff) -> Strip:
        self.lines_drawn += 1
        s = self._styles()
        sep = "→" if table.comparison.transit else "≠"
        segments = []
        for f, w in zip(table.fields, table.widths[:-1], strict=True):
            text, differs = _value(line, f, sep)
            style = s["diff"] if differs else (s["role"] if f is Field.NAME else s["base"])
            segments.append(Segment(_cell(inert(text[: w + 1]), w), style))
            segments.append(Segment(" ", s["base"]))
        segments.append(Segment(_cell(_note(line, table.comparison), table.widths[-1]),
                                s["missing"]))
        return Strip(segments)
