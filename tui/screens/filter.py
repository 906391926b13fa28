"""The filter form: ranks, stages, tensor-name glob, finding kinds, errors only."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, SelectionList, Switch

from pptrace.model.errors import ConfigError
from pptrace.model.findings import FindingKind

from ..filters import FilterSpec
from ..index import TraceIndex

__all__ = ["FilterScreen"]


class FilterScreen(ModalScreen[FilterSpec | None]):
    """Edit the view filter; dismisses with the new spec, or None when cancelled."""

    HELP_GROUP = "Filter form"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", key_display="Esc"),
        Binding("ctrl+s", "apply", "Apply"),
    ]

    def __init__(self, spec: FilterSpec, index: TraceIndex) -> None:
        super().__init__()
        self.spec = spec
        present = {f.kind for f in index.findings}
        self.kinds = [k for k in FindingKind if k in present] or list(FindingKind)

    def compose(self) -> ComposeResult:
        s = self.spec
        with Vertical(id="filter-form"):
            yield Label("Filter the view", id="filter-title")
            yield Label("Ranks (e.g. 0,3 or 4-7; empty: all)")
            yield Input(",".join(map(str, sorted(s.ranks or ()))), id="ranks")
            yield Label("PP stages")
            yield Input(",".join(map(str, sorted(s.stages or ()))), id="stages")
            yield Label("Tensor name (glob, e.g. score*)")
            yield Input(s.name_glob, id="name")
            yield Label("Finding kinds (none checked: all)")
            yield SelectionList[str](
                *((Text(k.value), k.value, s.kinds is not None and k in s.kinds)
                  for k in self.kinds),
                id="kinds",
            )
            with Horizontal(id="errors-row"):
                yield Switch(s.errors_only, id="errors")
                yield Label("errors only")
            yield Label("", id="filter-error")
            with Horizontal(id="filter-buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")
        yield Footer(compact=True)

    def action_apply(self) -> None:
        """Parse the form and close with the new filter."""
        try:
            spec = FilterSpec.parse(
                ranks=self.query_one("#ranks", Input).value,
                stages=self.query_one("#stages", Input).value,
                name_glob=self.query_one("#name", Input).value,
                kinds=tuple(FindingKind(v) for v in self.query_one(SelectionList).selected),
                errors_only=self.query_one(Switch).value,
            )
        except ConfigError as exc:
            self.query_one("#filter-error", Label).update(Text(str(exc), style="bold red"))
            return
        self.dismiss(spec)

    def action_cancel(self) -> None:
        """Close without changing the filter."""
        self.dismiss(None)

    @on(Button.Pressed, "#apply")
    def _apply(self) -> None:
        self.action_apply()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.action_cancel()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_apply()
