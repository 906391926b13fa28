"""The findings panel: the analyzer's findings grouped by kind, with counts.

Choosing a finding (enter or click) posts ``FindingChosen``; the screen jumps the grid and the
pair detail to it.
"""

from __future__ import annotations

from collections import defaultdict

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree

from pptrace.model.findings import FindingKind, Severity

from ..filters import FilterSpec
from ..index import TraceIndex
from ..literal import literal
from ..messages import FindingChosen

__all__ = ["FindingsPanel"]

#: Leaves past this per kind are summarised (filter to narrow): 100k rows help nobody.
MAX_PER_KIND = 500
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow",
                   Severity.INFO: "bold blue"}


class FindingsPanel(Tree[int]):
    """Findings grouped by kind; each leaf's data is the finding's index."""

    HELP_GROUP = "Findings"
    BINDINGS = [Binding("enter", "select_cursor", "Jump to finding", key_display="⏎")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(Text("findings"), id=id)
        self.show_root = False
        self.guide_depth = 2
        self.shown: list[int] = []  # finding indices listed, in panel order

    def populate(self, index: TraceIndex, spec: FilterSpec) -> None:
        """List the findings the filter lets through, grouped by kind, worst kinds first."""
        self.clear()
        groups: dict[FindingKind, list[int]] = defaultdict(list)
        for i in range(len(index.findings)):
            if spec.finding_visible(index, i):
                groups[index.findings[i].kind].append(i)
        order = sorted(groups, key=lambda k: (-k.default_severity, -len(groups[k]), k.value))
        self.shown = []
        for kind in order:
            ids = sorted(groups[kind], key=lambda i: (index.findings[i].time_ns or 0, i))
            label = Text.assemble((kind.value, _SEVERITY_STYLE[kind.default_severity]),
                                  f" ({len(ids)})")
            node = self.root.add(label, expand=True)
            for i in ids[:MAX_PER_KIND]:
                f = index.findings[i]
                where = f"mb {f.microbatch} " if f.microbatch is not None else ""
                node.add_leaf(Text.assemble((where, "dim"), literal(f.message)), data=i)
                self.shown.append(i)
            if len(ids) > MAX_PER_KIND:
                node.add_leaf(Text(f"… {len(ids) - MAX_PER_KIND} more: filter to narrow",
                                   style="dim italic"))
        if not order:
            self.root.add_leaf(Text("no findings" if not spec.active else "no findings match "
                                    "the filter", style="dim"))

    def on_tree_node_selected(self, event: Tree.NodeSelected[int]) -> None:
        """Announce the chosen finding."""
        if event.node.data is not None:
            event.stop()
            self.post_message(FindingChosen(event.node.data))

    def select_finding(self, finding: int) -> None:
        """Move the panel's cursor to a finding's leaf (after a replay jump)."""
        for group in self.root.children:
            for leaf in group.children:
                if leaf.data == finding:
                    self.move_cursor(leaf)
                    return
