"""The main screen: grid, replay bar, pair detail, findings panel and search box.

It owns the view state (the index, the filter, the replay position) and reacts to the widgets'
messages; the replay, jump, filter and export bindings live here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Input

from ..compare import PairView
from ..export import ExportDoc, render
from ..filters import FilterSpec
from ..index import TraceIndex
from ..literal import counted, literal
from ..message_index import MessageIndex
from ..messages import CellSelected, ExportWritten, FilterChanged, FindingChosen
from ..screens.filter import FilterScreen
from ..screens.messages import MessagesScreen, MessagesWaiting
from ..widgets.findings_panel import FindingsPanel
from ..widgets.grid import GridView
from ..widgets.pair_detail import PairDetail
from ..widgets.status import Legend, ReplayBar

__all__ = ["MainScreen", "SPEEDS"]

#: Replay speeds in events per second.
SPEEDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class MainScreen(Screen[None]):
    """The viewer's one working screen."""

    HELP_GROUP = "Replay, findings, filter"
    #: Below 120 columns the findings stack above the pair detail instead of beside it.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    _STEP = Binding.Group("Step", compact=True)
    _FINDING = Binding.Group("Finding", compact=True)
    _SPEED = Binding.Group("Speed", compact=True)
    _EXPORT = Binding.Group("Export json/md", compact=True)
    # The footer lists the focused widget's keys, then these, then the app's: help and quit
    # come first so that 80 columns still show them. The rest is in help (?) and the palette.
    BINDINGS = [
        Binding("question_mark", "app.help", "Help", key_display="?"),
        Binding("q", "app.quit", "Quit"),
        Binding("n", "step(1)", "Next event", group=_STEP),
        Binding("p", "step(-1)", "Prev event", group=_STEP),
        Binding("right_square_bracket", "jump_finding(1)", "Next finding", key_display="]",
                group=_FINDING),
        Binding("left_square_bracket", "jump_finding(-1)", "Prev finding", key_display="[",
                group=_FINDING),
        Binding("d", "first_divergence", "1st divergence"),
        # Listed early (help's first page; the footer has no room at 80 columns): a run whose first
        # divergence is in the message layer is explained there.
        Binding("M", "messages", "Messages", show=False),
        Binding("f", "filter", "Filter"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("space", "toggle_play", "Play/pause", key_display="␣"),
        Binding("z", "zoom", "Zoom panel"),
        Binding("plus", "speed(1)", "Faster", key_display="+", group=_SPEED, show=False),
        Binding("minus", "speed(-1)", "Slower", key_display="-", group=_SPEED, show=False),
        Binding("escape", "clear_filter", "Clear filter", key_display="Esc", show=False),
        Binding("e", "export('json')", "Export JSON", group=_EXPORT, show=False),
        Binding("m", "export('markdown')", "Export Markdown", group=_EXPORT, show=False),
    ]

    def __init__(self, index: TraceIndex, *, export_dir: Path,
                 live: float | None = None, partial: str | None = None) -> None:
        super().__init__()
        self.index = index
        self.export_dir = export_dir
        #: ``--follow``: the files are re-read every ``live`` seconds (the subtitle says so).
        self.live = live
        #: What the index holds while the whole trace is being read ("the first 4% of
        #: 1.5 GB of trace files"), and how far that reading is; None once it is whole.
        self.partial = partial
        self._reading = "reading the rest"
        self._opened_at: tuple[int, int] | None = None
        self._checked_at: str | None = None
        self.spec = FilterSpec()
        self.playing = False
        self.speed_level = 2
        self.finding_cursor = -1  # position in the findings panel's list
        self._timer: Timer | None = None
        #: perf_counter() when the screen was first drawn (the benchmark reads it).
        self.painted_at: float | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        # Hidden until "/" (the active search shows in the grid's title and the replay bar):
        # at 24 lines every line counts.
        yield Input(placeholder="search names, errors, findings (enter: next match, esc: done)",
                    id="search")
        with Vertical(id="body"):
            yield GridView(id="grid")
            yield Legend(id="legend")
            yield ReplayBar(id="replay")
            # The findings dock beside the pair detail on a wide screen, above it on a narrow one.
            with Vertical(id="lower"):
                yield FindingsPanel(id="findings")
                yield PairDetail(id="pair")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.title = "pptrace view"
        self.grid.set_index(self.index)
        self.findings_panel.populate(self.index, self.spec)
        self._update_subtitle()
        self._title_grid()
        self.findings_panel.border_title = "findings"
        self.pair_detail.border_title = "pair detail"
        self.grid.focus()
        self._open_at_first_divergence()
        # Time order is only needed for replay, the message index only for M: build them off
        # the UI thread after first paint.
        self.call_after_refresh(self._start_ordering)

    def _open_at_first_divergence(self) -> None:
        """Put the cursor on the first divergence (or the first cell); where that is in the
        message layer, open the message screen on it."""
        cell = self.index.first_divergence_cell
        if cell is None and self.grid.visible_rows:
            cell = (self.grid.visible_rows[0], 0)
        if cell is not None:
            self.grid.goto(*cell)
        #: Where the cursor was put: while it is still there, the user has not moved it.
        self._opened_at = self.grid.cursor
        index = self.index
        first = index.first_divergence
        if first is not None and index.first_divergence_cell is None \
                and index.findings[first].messages:
            # The first divergence is in the message layer: open where it is, not on a grid
            # where every cell is fine (Esc comes back here).
            self.pair_detail.empty_hint = ("The first divergence is in the PP message layer: "
                                           "M shows it.")
            self.call_after_refresh(self.action_messages, first)

    def _start_ordering(self) -> None:
        if self.painted_at is None:
            self.painted_at = time.perf_counter()  # after the first refresh: first paint
        self.run_worker(self._order_events, thread=True, group="timeline", exit_on_error=False)
        # A failed build is not lost: M builds again, and says why it failed.
        self.run_worker(self.index.messages, thread=True, group="message-index",
                        exit_on_error=False)

    def _order_events(self) -> None:
        index = self.index
        index.timeline()
        if index is self.index:
            self.app.call_from_thread(self._refresh_replay)

    # --- parts ---------------------------------------------------------------------------
    @property
    def grid(self) -> GridView:
        return self.query_one(GridView)

    @property
    def findings_panel(self) -> FindingsPanel:
        return self.query_one(FindingsPanel)

    @property
    def pair_detail(self) -> PairDetail:
        return self.query_one(PairDetail)

    def _title_grid(self) -> None:
        desc = self.spec.describe()
        # A Text, not a str: the search text is the user's and must not be read as markup.
        self.grid.border_title = literal(f"overview · filter: {desc}" if desc else "overview")

    def _update_subtitle(self) -> None:
        index = self.index
        self.query_one(Legend).show(index)
        bad = sum(r.problems for r in index.rows)
        # Message-layer findings are drawn on the message screen, not as cells: say where
        # (early in the line: the header cuts it at 80 columns).
        layer = sum(1 for f in index.findings if f.messages and not f.events)
        found = counted(len(index.findings), "finding") + (
            f", {layer} on messages (M)" if layer else "")
        sub = " · ".join([counted(index.trace.event_count, "event"), found,
                          counted(bad, "cell") + " in trouble"])
        if self.live is not None:
            if not index.trace.event_count:
                sub = f"waiting for traces (re-read every {self.live:g} s)"
            when = f", read at {self._checked_at}" if self._checked_at else ""
            sub = f"● live{when} · {sub}"
        if index.unplaced:
            sub += (f" · {counted(index.unplaced, 'event')} with an impossible sequence number "
                    "not drawn")
        if self.partial is not None:
            sub = f"◐ {self.partial}, {self._reading} · {sub}"
        self.sub_title = sub

    def reading(self, text: str) -> None:
        """How far the reading of the whole trace is (shown while the start is)."""
        self._reading = text
        self._update_subtitle()

    def checked(self) -> None:
        """``--follow`` re-read the files (whether or not they changed): show when."""
        self._checked_at = time.strftime("%H:%M:%S")
        self._update_subtitle()

    def replace_index(self, index: TraceIndex, whole: bool = False) -> None:
        """Show a fresh index (``--follow``; ``whole``: the whole trace after its start),
        keeping the cursor and the filter."""
        untouched = whole and self.grid.cursor == self._opened_at
        if whole:
            self.partial = None
        self.index = index
        self.grid.set_index(index)
        self.grid.set_filter(self.spec)
        self.findings_panel.populate(index, self.spec)
        self._update_subtitle()
        if untouched and self.app.screen is self:
            self._open_at_first_divergence()  # where a fresh start would have opened
        self._show_cell(*self.grid.cursor)
        self._start_ordering()

    # --- reacting to widgets -------------------------------------------------------------
    @on(CellSelected)
    def _cell_selected(self, message: CellSelected) -> None:
        self._show_cell(message.row, message.col)

    def _show_cell(self, row: int, col: int) -> None:
        self.pair_detail.show(PairView.of(self.index, row, col))
        self._refresh_replay()

    def _refresh_replay(self) -> None:
        index = self.index
        row, col = self.grid.cursor
        ready = index.timeline_ready
        self.query_one(ReplayBar).show(
            position=index.position(row, col) if ready else -1,
            total=len(index.timeline()) if ready else index.trace.event_count,
            playing=self.playing,
            speed=SPEEDS[self.speed_level],
            event=index.event_at(row, col),
            filter_text=self.spec.describe(),
            timeline_ready=ready,
        )

    @on(FindingChosen)
    def _finding_chosen(self, message: FindingChosen) -> None:
        if message.index in self.findings_panel.shown:
            self.finding_cursor = self.findings_panel.shown.index(message.index)
        self._goto_finding(message.index)

    def _goto_finding(self, finding: int) -> None:
        cell = self.index.finding_cells[finding]
        if cell is None:
            if self.index.findings[finding].messages:  # a message-layer finding: its screen
                self.action_messages(finding)
                return
            self._goto_rank_of(finding)
            return
        if cell[0] not in self.grid.visible_rows:
            self.notify("the finding's rank is hidden by the filter", severity="warning")
            return
        self.grid.goto(*cell)

    def _goto_rank_of(self, finding: int) -> None:
        """A finding about a rank as a whole (its recorder lost events, its window was cut):
        go to that rank's first row, keeping the column."""
        f = self.index.findings[finding]
        rows = [r for r in self.grid.visible_rows if self.index.rows[r].rank.rank in f.ranks]
        if not rows:
            self.notify("this finding names no event, message or shown rank (see its text)",
                        severity="warning")
            return
        self.grid.goto(rows[0], self.grid.cursor[1])
        self.notify(f"{f.kind.value} is about {self.index.rows[rows[0]].rank.label()} as a "
                    "whole, not one event", timeout=3)

    @on(FilterChanged)
    def _filter_changed(self, message: FilterChanged) -> None:
        self.apply_filter(message.spec)

    def apply_filter(self, spec: FilterSpec) -> None:
        """Apply a filter to the grid, the findings panel and the replay."""
        self.spec = spec
        self.grid.set_filter(spec)
        self._title_grid()
        self.findings_panel.populate(self.index, spec)
        self.finding_cursor = -1
        self._show_cell(*self.grid.cursor)

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        self._end_search()
        text = event.value.strip()
        if text != self.spec.text:
            self.apply_filter(self.spec.with_text(text))
        if text:
            self.action_step(1)

    # --- replay --------------------------------------------------------------------------
    def action_step(self, delta: int) -> bool:
        """Move to the next (previous) event in recorded time order that the filter shows."""
        index = self.index
        timeline = index.timeline()
        if not timeline:
            self.notify("no more events: the trace has none", severity="warning", timeout=2)
            return False
        row, col = self.grid.cursor
        pos = index.position(row, col)
        if pos < 0:
            pos = -1 if delta > 0 else len(timeline)
        spec = self.spec
        check = spec.active
        visible = set(self.grid.visible_rows)
        pos += delta
        while 0 <= pos < len(timeline):
            packed = timeline[pos]
            r, c = packed >> 32, packed & 0xFFFFFFFF
            if r in visible and (not check or spec.cell_visible(index, r, c)):
                self.grid.goto(r, c)
                return True
            pos += delta
        self.notify("no more events" + (" matching the filter" if check else ""),
                    severity="warning", timeout=2)
        return False

    def action_jump_finding(self, delta: int) -> None:
        """Jump to the next (previous) finding in the panel's order (grouped, then by time)."""
        shown = self.findings_panel.shown
        if not shown:
            self.notify("no findings", severity="warning", timeout=2)
            return
        self.finding_cursor = (self.finding_cursor + delta) % len(shown)
        finding = shown[self.finding_cursor]
        self.findings_panel.select_finding(finding)
        self._goto_finding(finding)

    def action_toggle_play(self) -> None:
        """Start or pause the replay."""
        self.playing = not self.playing
        self._restart_timer()
        self._refresh_replay()

    def action_speed(self, delta: int) -> None:
        """Change the replay speed."""
        self.speed_level = max(0, min(len(SPEEDS) - 1, self.speed_level + delta))
        self._restart_timer()
        self._refresh_replay()

    def _restart_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.playing:
            self._timer = self.set_interval(1 / SPEEDS[self.speed_level], self._tick)

    def _tick(self) -> None:
        if not self.action_step(1):
            self.playing = False
            self._restart_timer()
            self._refresh_replay()

    def action_first_divergence(self) -> None:
        """Jump to the finding the report names first (the first divergence)."""
        if self.index.first_divergence is None:
            self.notify("no divergence in the part read so far: its findings are none"
                        if self.partial is not None else
                        "no divergence: the trace has no findings", timeout=3)
            return
        self.findings_panel.select_finding(self.index.first_divergence)
        self._goto_finding(self.index.first_divergence)

    # --- filter, search, export ----------------------------------------------------------
    def action_filter(self) -> None:
        """Open the filter form."""
        def done(spec: FilterSpec | None) -> None:
            if spec is not None:
                self.apply_filter(spec.with_text(self.spec.text))

        self.app.push_screen(FilterScreen(self.spec, self.index), done)

    def action_clear_filter(self) -> None:
        """Show everything again."""
        search = self.query_one("#search", Input)
        if self.focused is search:
            self._end_search()
            return
        search.value = ""
        if self.spec.active:
            self.apply_filter(FilterSpec())

    def action_messages(self, finding: int | None = None) -> None:
        """Open the message layer's stage x time view (pptrace_tui.screens.messages), on a
        finding's first message (None: on the first divergence's); until its index is built,
        its progress."""
        if self.app.screen is not self:
            return  # already on top (the first divergence opened it), or another screen is
        index = self.index
        if index.messages_ready:
            self.app.push_screen(MessagesScreen(index.messages(), finding, self.partial))
            return
        waiting = MessagesWaiting(sum(len(p.messages) for p in index.trace.processes))
        self.app.push_screen(waiting)
        self.run_worker(lambda: self._wait_for_messages(index, waiting, finding), thread=True,
                        group="messages", exit_on_error=False)

    def _wait_for_messages(self, index: TraceIndex, waiting: MessagesWaiting,
                           finding: int | None) -> None:
        """(A worker thread) wait for the message index, then show it instead of the progress."""
        try:
            built = index.messages()
        except Exception as exc:  # say why, and go back: never a progress screen that waits on
            self.app.call_from_thread(self._messages_failed, waiting, exc)
            return
        self.app.call_from_thread(self._messages_built, waiting, built, finding)

    def _messages_built(self, waiting: MessagesWaiting, built: MessageIndex,
                        finding: int | None) -> None:
        if waiting in self.app.screen_stack:  # still waiting: the user did not go back
            waiting.give_way(MessagesScreen(built, finding, self.partial))

    def _messages_failed(self, waiting: MessagesWaiting, exc: Exception) -> None:
        if self.app.screen is waiting:
            self.app.pop_screen()  # (under the help: Esc leaves it, as it would anyway)
        self.notify(f"the message index failed: {exc}", severity="error", markup=False)

    def action_zoom(self) -> None:
        """Give the focused panel (grid, findings, pair detail) the whole screen, or undo it."""
        if self.maximized is not None:
            self.minimize()
        elif self.focused is not None:
            self.maximize(self.focused)

    def action_search(self) -> None:
        """Open the search box."""
        self.add_class("-searching")
        self.query_one("#search", Input).focus()

    @on(Input.Blurred, "#search")
    def _search_blurred(self) -> None:
        self.remove_class("-searching")

    def _end_search(self) -> None:
        self.remove_class("-searching")
        self.grid.focus()

    def export_doc(self) -> ExportDoc:
        """What is on screen, as an export document."""
        shown = self.findings_panel.shown
        return ExportDoc(
            findings=[self.index.findings[i] for i in shown],
            pair=self.pair_detail.pair,
            filter=self.spec.describe(),
            sources=self.index.trace.sources,
        )

    def action_export(self, fmt: Literal["json", "markdown"]) -> None:
        """Write the visible findings and the shown pair to a file; say where."""
        if self.partial is not None:  # an export says what the trace holds: all of it
            self.notify(f"the whole trace is still being read ({self._reading}): export once "
                        "it is shown", severity="warning", markup=False)
            return
        suffix = "json" if fmt == "json" else "md"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        directory = self.export_dir
        path = directory / f"pptrace-view-{stamp}.{suffix}"
        n = 1
        while path.exists():
            n += 1
            path = directory / f"pptrace-view-{stamp}-{n}.{suffix}"
        try:
            Path(path).write_text(render(self.export_doc(), fmt), encoding="utf-8")
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error", markup=False)
            return
        self.post_message(ExportWritten(path))
        self.notify(f"exported to {path}", title="Export", markup=False)
