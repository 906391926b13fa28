"""The pair detail: both sides of the selected attach/extract pair, side by side.

Per auxiliary name: shape, dtype, device, bytes and fingerprint on each side, the cells that
differ highlighted; then each side's dict keys before and after the call, and the engine's error
text. Every string from the trace is a ``literal`` Text (never markup).
"""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from pptrace.model.findings import Severity
from pptrace.model.records import Event

from ..compare import FIELDS, PairView, field_text
from ..literal import literal

__all__ = ["PairDetail", "render_pair"]

_DIFF = "bold reverse red"
_MISSING = "italic dim"


def clock(ns: int) -> str:
    """Wall-clock time of day with microseconds (UTC)."""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%H:%M:%S.%f")


def _side_header(title: str, ev: Event | None) -> Text:
    if ev is None:
        return Text.assemble((f"{title}: ", "bold"), ("no counterpart", _MISSING))
    text = Text.assemble((f"{title}: ", "bold"), literal(ev.rank.label()), f"  #{ev.seq}  ")
    text.append(clock(ev.start_ns), "dim")
    text.append("  ")
    text.append_text(literal(ev.subject_type, "dim"))
    return text


def _keys(title: str, ev: Event) -> Text:
    text = Text(f"{title} keys before: ", style="bold")
    text.append_text(literal(", ".join(ev.keys_before) or "(none)"))
    text.append("\n")
    text.append(f"{title} keys after:  ", style="bold")
    text.append_text(literal(", ".join(ev.keys_after) or "(none)"))
    if ev.error_type is not None:
        text.append("\n")
        text.append(f"{title} error: ", style="bold red")
        text.append_text(literal(f"{ev.error_type}: {ev.error_message or ''}", "red"))
        if ev.inserted_before_error:
            text.append("\n  left in the dict: ", style="bold")
            text.append_text(literal(", ".join(ev.inserted_before_error)))
    return text


def render_pair(pair: PairView | None) -> RenderableType:
    """The whole detail as one Rich renderable."""
    if pair is None:
        return Text("No event here. Move the cursor to a cell, or pick a finding.", style="dim")
    table = Table(expand=True, show_edge=False, pad_edge=False, box=None)
    table.add_column(Text("name", style="bold"), ratio=2, overflow="fold")
    table.add_column(Text("", style="bold"), width=11)
    table.add_column(Text("attach", style="bold"), ratio=3, overflow="fold")
    table.add_column(Text("extract", style="bold"), ratio=3, overflow="fold")
    fingerprints = any(
        m is not None and m.fingerprint for line in pair.tensors for m in (line.left, line.right)
    )
    for line in pair.tensors:
        name_style = _DIFF if "name" in line.differs else "bold"
        for n, f in enumerate(FIELDS[1:]):
            if f == "fingerprint" and not fingerprints:
                continue
            cells = [literal(line.name, name_style) if n == 0 else Text(""), Text(f, "dim")]
            for meta in (line.left, line.right):
                if meta is None:
                    cells.append(Text("missing" if n == 0 else "", style=_MISSING))
                else:
                    cells.append(literal(field_text(meta, f), _DIFF if f in line.differs else ""))
            table.add_row(*cells)
    parts: list[RenderableType] = [
        _side_header("attach", pair.attach),
        _side_header("extract", pair.extract),
    ]
    for finding in pair.findings:
        sev = "red" if finding.severity >= Severity.ERROR else "yellow"
        parts.append(Text.assemble((f"{finding.kind.value}: ", f"bold {sev}"),
                                   literal(finding.message)))
    if pair.order_differs:
        parts.append(Text("the two sides carry the same names in a different order", "yellow"))
    parts.append(table if pair.tensors else Text("no auxiliary tensors", style="dim"))
    for title, ev in (("attach", pair.attach), ("extract", pair.extract)):
        if ev is not None:
            parts.append(_keys(title, ev))
    return Group(*parts)


def _shape(pair: PairView | None) -> tuple[object, ...]:
    """What decides the detail's height: which sides, how many lines of each part."""
    if pair is None:
        return (None,)
    sides = tuple(
        None if ev is None else (
            len(", ".join(ev.keys_before)), len(", ".join(ev.keys_after)),
            len(ev.error_message or "") if ev.error_type else -1, len(ev.subject_type),
            len(ev.inserted_before_error))
        for ev in (pair.attach, pair.extract)
    )
    names = tuple(len(line.name) for line in pair.tensors)
    fields = tuple(len(field_text(m, f)) for line in pair.tensors for m in (line.left, line.right)
                   for f in FIELDS)
    return (sides, names, fields, tuple(len(f.message) for f in pair.findings), pair.order_differs)


class PairDetail(VerticalScroll, can_focus=True):
    """Scrollable pair detail under the grid."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pair: PairView | None = None
        self._shape: tuple[object, ...] = ()
        self._body = Static(render_pair(None), id="pair-body")

    def compose(self):  # type: ignore[no-untyped-def]
        yield self._body

    def show(self, pair: PairView | None) -> None:
        """Show a pair (None: nothing selected)."""
        self.pair = pair
        # Re-laying out the screen costs more than drawing the pair; consecutive pairs nearly
        # always have the same shape, so lay out only when the shape (hence height) may change.
        shape = _shape(pair)
        self._body.update(render_pair(pair), layout=shape != self._shape)
        self._shape = shape
