"""The ``pptrace view`` app: a trace and its findings in, a keyboard-first viewer out.

The app never opens a file. It gets a *loader*, a callable that returns a fresh
``(Trace, analysis)`` pair, the analysis being the analyzer's ``analysis(trace)``: its findings
and the attach/extract pairs the grid draws (the CLI builds one on ``pptrace.load.loader``;
tests build traces from records, and may hand findings alone, the pairs then asked of the
analyzer),
calls it in a worker thread behind a loading screen, and with ``follow=True`` calls it again
every second to watch a running engine. With ``partial`` (what the first load holds: "the first
4% of 1.5 GB of trace files") the first call gave only the start of the trace: the grid is
drawn from it, and the loader is called once more at once, in the background, for the whole
trace, which then takes its place (the subtitle says which is shown, and how far the reading is).

    app = PptraceViewer(loader=lambda status: (trace, analysis(trace)))
    app = PptraceViewer.of(trace, findings)
    app.run()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from pptrace.analyze.analyzer import Analysis
from pptrace.model.findings import Finding
from pptrace.model.trace import Trace

from .bindings_catalog import Entry, catalog
from .index import TraceIndex
from .messages import ExportWritten
from .screens.help import HelpScreen
from .screens.loading import LoadingScreen
from .screens.main import MainScreen
from .screens.messages import MessagesScreen, MessagesWaiting

__all__ = ["Loaded", "Loader", "PptraceViewer", "THEMES"]

#: A trace and the analyzer's analysis of it (or findings alone: the index then asks the
#: analyzer for the pairs).
Loaded = tuple[Trace, Analysis | Sequence[Finding]]
#: Returns a fresh trace and its analysis; may report its phase ("reading 4 files") as it goes.
Loader = Callable[[Callable[[str], None]], Loaded]
#: ``--theme`` names mapped to Textual themes.
THEMES = {"dark": "textual-dark", "light": "textual-light"}


class PptraceViewer(App[None]):
    """The trace viewer."""

    CSS_PATH = "app.tcss"
    TITLE = "pptrace view"
    HELP_GROUP = "App"
    # Two bindings on "t", one shown at a time (check_action): the footer names the theme the
    # key switches to, and says the other one after the switch.
    BINDINGS = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("t", "set_theme('light')", "Light theme"),
        Binding("t", "set_theme('dark')", "Dark theme"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+p", "command_palette", "Palette", key_display="^p"),
    ]

    def __init__(
        self,
        loader: Loader,
        *,
        follow: bool = False,
        follow_interval: float = 1.0,
        theme: str = "dark",
        export_dir: Path | None = None,
        partial: str | None = None,
    ) -> None:
        super().__init__()
        self.loader = loader
        self.partial = partial
        self._reading = ""
        self._reading_at = 0.0
        self.follow = follow
        self.follow_interval = follow_interval
        self.theme = THEMES.get(theme, theme)
        self.export_dir = export_dir or Path.cwd()
        self.last_export: Path | None = None
        self.index: TraceIndex | None = None
        self.load_error: str | None = None
        self._polling = False

    @classmethod
    def of(cls, trace: Trace, findings: Analysis | Sequence[Finding], **kwargs: object
           ) -> PptraceViewer:
        """A viewer on an already loaded trace."""
        return cls(lambda status: (trace, findings), **kwargs)  # type: ignore[arg-type]

    # --- loading -------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.push_screen(LoadingScreen())
        self.run_worker(self._load_first, thread=True, group="load", exit_on_error=False)

    def _phase(self, text: str) -> None:
        screen = self.screen
        if isinstance(screen, LoadingScreen):
            self.call_from_thread(screen.set_phase, text)

    def _load_first(self) -> TraceIndex:
        trace, result = self.loader(self._phase)
        self._phase(f"indexing {trace.event_count:,} events")
        return _index(trace, result)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Swap in the main screen when the first load finishes (or say why it failed)."""
        worker = event.worker
        if worker.group == "whole":
            self._whole_read(event)
            return
        if worker.group != "load":
            return
        if event.state is WorkerState.SUCCESS and isinstance(worker.result, TraceIndex):
            self.index = worker.result
            live = self.follow_interval if self.follow else None
            self.switch_screen(MainScreen(self.index, export_dir=self.export_dir, live=live,
                                          partial=self.partial))
            if self.partial is not None:
                self.run_worker(self._read_whole, thread=True, group="whole",
                                exit_on_error=False)
            elif self.follow:
                self.set_interval(self.follow_interval, self._poll)
        elif event.state is WorkerState.ERROR:
            self.load_error = str(worker.error)
            self.exit(message=f"pptrace: error: {worker.error}")

    # --- the whole trace, after its start ------------------------------------------------
    def _read_whole(self) -> TraceIndex:
        trace, result = self.loader(self._whole_phase)
        self._whole_phase(f"indexing {trace.event_count:,} events")
        return _index(trace, result)

    def _whole_phase(self, text: str) -> None:
        # The loader reports every megabyte: show a new phase at once, the progress within one
        # twice a second (each update waits for the UI thread, and the header redraws).
        now = time.monotonic()
        same_phase = text.split(" ", 1)[0] == self._reading.split(" ", 1)[0]
        if text == self._reading or (same_phase and now - self._reading_at < 0.5):
            return
        self._reading, self._reading_at = text, now
        self.call_from_thread(self._show_reading, text)

    def _show_reading(self, text: str) -> None:
        screen = self.main_screen
        if screen is not None:
            screen.reading(text)

    def _whole_read(self, event: Worker.StateChanged) -> None:
        """Put the whole trace in the start's place (or say why it could not be read)."""
        worker = event.worker
        screen = self.main_screen
        if event.state is WorkerState.SUCCESS and isinstance(worker.result, TraceIndex):
            self.partial = None
            if screen is not None:
                # A message screen drawn from the start is opened again on the whole trace.
                again = self.screen is not screen and isinstance(
                    self.screen, (MessagesScreen, MessagesWaiting))
                while again and self.screen is not screen:
                    self.pop_screen()
                self._show_reloaded(worker.result, whole=True)
                if again and self.screen is screen:
                    screen.action_messages()
            if self.follow:
                self.set_interval(self.follow_interval, self._poll)
        elif event.state is WorkerState.ERROR:
            if screen is not None:
                screen.reading(f"the rest could not be read: {worker.error}")
            self.notify(f"reading the whole trace failed: {worker.error}", severity="error",
                        markup=False)

    # --- follow --------------------------------------------------------------------------
    def _poll(self) -> None:
        if not self._polling:
            self._polling = True
            self.run_worker(self._reload, thread=True, group="follow", exit_on_error=False)

    def _reload(self) -> None:
        try:
            trace, result = self.loader(lambda _: None)
            findings = result.findings if isinstance(result, Analysis) else result
            self.call_from_thread(self._checked)
            current = self.index
            if current is not None and (
                trace.event_count == current.trace.event_count
                and len(findings) == len(current.findings)
            ):
                return
            index = _index(trace, result)
            self.call_from_thread(self._show_reloaded, index)
        except Exception as exc:  # a torn write mid-poll: say so, keep the last good view
            self.call_from_thread(self.notify, f"reload failed: {exc}", severity="warning",
                                  markup=False)
        finally:
            self._polling = False

    def _checked(self) -> None:
        screen = self.main_screen
        if screen is not None:
            screen.checked()

    def _show_reloaded(self, index: TraceIndex, whole: bool = False) -> None:
        self.index = index
        screen = self.main_screen
        if screen is not None:
            screen.replace_index(index, whole=whole)

    @property
    def main_screen(self) -> MainScreen | None:
        """The main screen, wherever it is in the stack."""
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                return screen
        return None

    def on_export_written(self, message: ExportWritten) -> None:
        """Remember the last export (the screen says where in a notification)."""
        self.last_export = message.path

    # --- help, palette, theme ------------------------------------------------------------
    def binding_entries(self, screen: Screen[object] | None = None) -> list[Entry]:
        """The bindings of one screen (by default the one on top), from the app down to the
        screen's widgets, found by walking them: each screen's help and palette list its own
        keys, never another's."""
        if screen is None:
            screen = self.screen
        nodes: list[object] = [self, screen, *screen.walk_children(with_self=False)]
        return catalog(nodes)  # type: ignore[arg-type]

    def action_help(self) -> None:
        """Show the key bindings of the screen the user is on."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.binding_entries(self.screen)))

    def action_set_theme(self, name: str) -> None:
        """Switch to the light or the dark theme."""
        self.theme = THEMES[name]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Offer only the theme switch that changes something."""
        if action == "set_theme" and parameters:
            return (parameters[0] == "dark") == (not self.current_theme.dark)
        return True

    def watch_theme(self) -> None:
        self.refresh_bindings()  # the footer names the other theme now

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The command palette lists the screen's bindings' actions, then Textual's own commands
        (its screenshot replaced: Textual's saves to ~/Downloads, and fails where there is none)."""
        for entry in self.binding_entries(screen):
            key = self.get_key_display(entry.binding)
            yield SystemCommand(
                entry.binding.description,
                f"{entry.where} · key {key}",
                partial(self.run_action, entry.binding.action, entry.node),
            )
        for command in super().get_system_commands(screen):
            if command.title != "Screenshot":
                yield command
        yield SystemCommand("Screenshot", f"Save an SVG of the screen in {self.export_dir}",
                            lambda: self.set_timer(0.1, self.save_screen))

    def save_screen(self) -> Path | None:
        """Save an SVG of the screen in the export directory (the current one); say where."""
        try:
            name = self.save_screenshot(path=str(self.export_dir))
        except OSError as exc:
            self.notify(f"screenshot failed: {exc}", severity="error", markup=False)
            return None
        path = Path(name)
        self.last_export = path
        self.notify(f"screenshot saved to {path}", title="Screenshot", markup=False)
        return path


def _index(trace: Trace, result: Analysis | Sequence[Finding]) -> TraceIndex:
    """The index of a loaded trace, with the analyzer's pairs and its verdict on each."""
    if isinstance(result, Analysis):  # its trace is the one the findings were judged on
        return TraceIndex.build(result.trace, result.findings, pairs=result.pairs,
                                message_pairs=result.message_pairs,
                                broadcast_pairs=result.broadcast_pairs)
    return TraceIndex.build(trace, result)
