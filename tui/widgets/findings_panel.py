"""The findings panel: the analyzer's findings in the report's order, each shown whole.

The order is the text report's (``pptrace.report.groups``): kinds worst first, then earliest;
under each finding the findings that follow from it ("then content-mismatch ..."), so a
consequence sits under its cause. An option per finding, wrapped to the panel's width (never cut
behind a scrollbar). Choosing one (enter or click) posts ``FindingChosen``; choosing a kind's
heading chooses its first finding.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from pptrace.model.findings import Finding, Severity
from pptrace.model.text import clip, inert
from pptrace.report.groups import consequences, kind_groups

from ..filters import FilterSpec
from ..index import TraceIndex
from ..literal import counted
from ..messages import FindingChosen

__all__ = ["FindingsPanel", "MAX_PER_KIND"]

#: Findings past this per kind are summarised (filter to narrow): 100k options help nobody.
MAX_PER_KIND = 500
#: The most characters of one message the panel shows (the pair detail and exports show more).
MESSAGE_CHARS = 600
_SEVERITY_STYLE = {Severity.ERROR: "bold $text-error", Severity.WARNING: "bold $text-warning",
                   Severity.INFO: "bold $text-primary"}


def _leaf(f: Finding, prefix: str = "") -> Content:
    where = f"mb {f.microbatch}  " if f.microbatch is not None else ""
    return Content.assemble(("  " + prefix, _SEVERITY_STYLE[f.severity]), (where, "dim"),
                            inert(clip(f.message, MESSAGE_CHARS)))


class FindingsPanel(OptionList):
    """Findings in the report's order; ``shown`` lists the finding indices, top to bottom."""

    HELP_GROUP = "Findings"
    BINDINGS = [Binding("enter", "select", "Jump to finding", key_display="⏎")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.shown: list[int] = []  # finding indices listed, in panel order
        self.headings: list[str] = []  # each kind's heading, as shown
        self._finding_of: list[int | None] = []  # per option: its finding (None: a note)
        self._option_of: dict[int, int] = {}

    def populate(self, index: TraceIndex, spec: FilterSpec) -> None:
        """List the findings the filter lets through, in the report's order."""
        findings = index.findings
        effects = consequences(findings)
        options: list[Option] = []
        self.shown, self.headings, self._finding_of, self._option_of = [], [], [], {}

        def add(prompt: Content, finding: int | None, *, heading: bool = False) -> None:
            if finding is not None and not heading and finding not in self._option_of:
                self._option_of[finding] = len(options)
                self.shown.append(finding)
            options.append(Option(prompt))
            self._finding_of.append(finding)

        for group in kind_groups(findings):
            ids = [i for i in group.findings if spec.finding_visible(index, i)]
            if not ids:
                continue
            heading = f"{group.kind.value} ({counted(len(ids), 'finding')})"
            self.headings.append(heading)
            add(Content.assemble((heading, _SEVERITY_STYLE[group.severity])), ids[0],
                heading=True)
            for i in ids[:MAX_PER_KIND]:
                add(_leaf(findings[i]), i)
                for j in effects.get(i, ()):
                    if spec.finding_visible(index, j):
                        add(_leaf(findings[j], f"  then {findings[j].kind.value}: "), j)
            if len(ids) > MAX_PER_KIND:
                add(Content.styled(f"  … {len(ids) - MAX_PER_KIND:,} more: filter to narrow",
                                   "dim italic"), None)
        if not options:
            text = "no findings match the filter" if spec.active else "no findings"
            add(Content.styled(text, "dim"), None)
        self.set_options(options)
        self.highlighted = self._option_of[self.shown[0]] if self.shown else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Announce the chosen finding."""
        event.stop()
        finding = self._finding_of[event.option_index]
        if finding is not None:
            self.post_message(FindingChosen(finding))

    def select_finding(self, finding: int) -> None:
        """Move the panel's highlight to a finding (after a jump from the keyboard)."""
        option = self._option_of.get(finding)
        if option is not None:
            self.highlighted = option
