"""The message screen: the PP message layer as stage x time, and a message's detail beside it.

Pushed from the main screen (``M``) with the trace and the analyzer's findings; it owns the
finding cursor (``]``/``[`` step through the messages that findings name, in time order) and
starts on the message the report's first divergence names (a hang's wait, where there is one).
Its index is built off the UI thread (``TraceIndex.messages``); until it is, ``M`` shows
``MessagesWaiting`` (progress; Esc goes back to the grid), which gives way to the screen.

    app.push_screen(MessagesScreen.of(trace, findings))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from pptrace.model.findings import Finding, MessageId
from pptrace.model.trace import Trace

from ..literal import counted
from ..message_index import MessageIndex
from ..widgets.message_detail import MessageDetail
from ..widgets.message_timeline import GLYPHS, WAIT_LINE, MessageTimeline
from .loading import LoadingScreen

__all__ = ["MessagesScreen", "MessagesWaiting", "legend"]


def legend() -> Content:
    """What the timeline's glyphs and colours mean (theme variables: both themes)."""
    g = list(GLYPHS.values())
    return Content.assemble(
        (f"{g[0]} ", "bold"), "send  ", (f"{g[1]} ", "bold"), "receive  ",
        (f"{g[2]}{WAIT_LINE} ", "bold $text-warning"), "waits  ",
        ("■ ", "$text-success"), "output  ", ("■ ", "$text-primary"), "proxy  ",
        ("■ ", "$text-secondary"), "other  ", ("■ ", "$error"), "a finding names it",
    )


class MessagesScreen(Screen[None]):
    """Every send and receive between stages, and the selected one's detail."""

    HELP_GROUP = "Messages"
    _FINDING = Binding.Group("Finding", compact=True)
    BINDINGS = [
        Binding("escape", "back", "Back", key_display="Esc"),
        Binding("question_mark", "app.help", "Help", key_display="?"),
        Binding("q", "app.quit", "Quit"),
        Binding("right_square_bracket", "jump_finding(1)", "Next finding", key_display="]",
                group=_FINDING),
        Binding("left_square_bracket", "jump_finding(-1)", "Prev finding", key_display="[",
                group=_FINDING),
        Binding("enter", "detail", "Detail", key_display="⏎"),
    ]

    def __init__(self, index: MessageIndex, finding: int | None = None,
                 partial: str | None = None) -> None:
        super().__init__()
        self.index = index
        #: What the index holds while the whole trace is read (``PptraceViewer``'s
        #: ``partial``); the whole trace's screen replaces this one when it is.
        self.partial = partial
        #: the finding (its index in the findings) to open on; None: the first divergence
        self.start_finding = finding
        self.finding_cursor = -1  # position in index.finding_order

    @classmethod
    def of(cls, trace: Trace, findings: Sequence[Finding],
           pairs: Mapping[MessageId, MessageId] | None = None, *,
           finding: int | None = None,
           broadcasts: Mapping[MessageId, tuple[MessageId, ...]] | None = None
           ) -> MessagesScreen:
        """The screen on a trace, the analyzer's findings of it, its send -> receive pairs and
        broadcast -> receives, opened on ``finding``'s first message (None: the first
        divergence's)."""
        return cls(MessageIndex.build(trace, findings, pairs, broadcasts), finding)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="messages-body"):
            yield MessageTimeline(self.index, id="message-timeline")
            yield Static(legend(), id="message-legend")
            yield MessageDetail(id="message-detail")
        yield Footer(compact=True, show_command_palette=False)

    @property
    def timeline(self) -> MessageTimeline:
        return self.query_one(MessageTimeline)

    @property
    def detail(self) -> MessageDetail:
        return self.query_one(MessageDetail)

    def on_mount(self) -> None:
        index = self.index
        self.title = "pptrace view · messages"
        self.sub_title = " · ".join([
            counted(index.width, "message"), counted(len(index.rows), "rank"),
            counted(len(index.finding_order), "message finding")])
        if self.partial is not None:
            self.sub_title = f"◐ {self.partial}, the rest being read · {self.sub_title}"
        self.timeline.border_title = "messages · stage × time"
        self.detail.border_title = "message detail"
        self.timeline.focus()
        first = index.first_selection()
        if self.start_finding in index.finding_cols:
            first = index.finding_cols[self.start_finding][0]
        if first is None:
            self.detail.show(index, None)
            return
        if first in index.col_findings:
            for pos, fi in enumerate(index.finding_order):
                if index.finding_cols[fi][0] == first and (
                        self.start_finding is None or fi == self.start_finding):
                    self.finding_cursor = pos
                    break
        # After the first layout: the timeline's size decides how far it scrolls.
        self.call_after_refresh(self.timeline.select, first)

    @on(MessageTimeline.Chosen)
    def _chosen(self, message: MessageTimeline.Chosen) -> None:
        self.detail.show(self.index, message.col)

    def action_jump_finding(self, delta: int) -> None:
        """Select the next (previous) message a finding names, in time order."""
        order = self.index.finding_order
        if not order:
            self.notify("no message findings", severity="warning", timeout=2)
            return
        self.finding_cursor = (self.finding_cursor + delta) % len(order)
        self.timeline.select(self.index.finding_cols[order[self.finding_cursor]][0])

    def action_back(self) -> None:
        """Close the detail (enter gave it the screen) first, else go back to the main
        screen."""
        if self.maximized is not None:
            self.minimize()
            self.timeline.focus()
        else:
            self.app.pop_screen()

    def action_detail(self) -> None:
        """Give the detail the whole screen, or undo it."""
        if self.maximized is not None:
            self.minimize()
            self.timeline.focus()
        else:
            self.maximize(self.detail)
            self.detail.focus()


class MessagesWaiting(LoadingScreen):
    """Progress while the message screen's index is built; Esc goes back, the build goes on."""

    HELP_GROUP = "Messages, while their index is built"
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", key_display="Esc")]

    def __init__(self, messages: int) -> None:
        super().__init__(f"indexing {messages:,} messages",
                         title="pptrace view · messages (Esc: back to the grid)")
        self._ready: MessagesScreen | None = None

    def give_way(self, screen: MessagesScreen) -> None:
        """Show ``screen`` in this one's place now, or when this one is on top again (the help
        may be over it)."""
        self._ready = screen
        if self.app.screen is self:  # (not ``is_current``: that holds under a modal help too)
            self.app.switch_screen(screen)

    def on_screen_resume(self) -> None:
        if self._ready is not None and self.app.screen is self:
            self.app.switch_screen(self._ready)
