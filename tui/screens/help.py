"""The help screen, generated from the bindings the viewer's widgets declare (never by hand)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from ..bindings_catalog import Entry
from ..widgets.status import legend_text

__all__ = ["HelpScreen", "help_table"]


def help_table(entries: list[Entry], key_display: dict[int, str]) -> Table:
    """One table of every binding: group, key(s), what it does."""
    table = Table(title="Key bindings", expand=True, show_lines=False)
    table.add_column("where", style="bold")
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("does")
    last = ""
    for i, entry in enumerate(entries):
        where = entry.where if entry.where != last else ""
        last = entry.where
        table.add_row(Text(where), Text(key_display[i]), Text(entry.binding.description))
    return table


class HelpScreen(ModalScreen[None]):
    """Every key binding, and what the grid's glyphs mean."""

    HELP_GROUP = "Help"
    BINDINGS = [
        Binding("escape", "dismiss", "Close", key_display="Esc"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, entries: list[Entry]) -> None:
        super().__init__()
        self.entries = entries

    def compose(self) -> ComposeResult:
        keys = {i: self.app.get_key_display(e.binding) for i, e in enumerate(self.entries)}
        with VerticalScroll(id="help-body"):
            yield Static(help_table(self.entries, keys))
            yield Static(Content.styled("\nGrid glyphs:", "bold"))
            yield Static(legend_text())
            yield Static(Content.styled(
                "\nMouse: click a cell or a finding; scroll the grid with the wheel. "
                "z gives the focused panel the whole screen. Ctrl+P opens the command palette "
                "with every action.", "$text-muted"))
        yield Footer(compact=True)
