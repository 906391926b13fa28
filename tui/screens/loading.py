"""Shown while the trace loads and is indexed (or, later, while the message screen's index is
built): a spinner, the current phase and the time spent."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Label, LoadingIndicator

__all__ = ["LoadingScreen"]


class LoadingScreen(Screen[None]):
    """Progress while a worker thread loads; the app swaps in the main screen when done."""

    def __init__(self, phase: str = "starting", title: str = "pptrace view") -> None:
        super().__init__()
        self.started = time.monotonic()
        self.phase = phase
        self.heading = title

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Label(self.heading, id="loading-title")
            yield LoadingIndicator()
            yield Label(self.phase, id="loading-phase")

    def on_mount(self) -> None:
        self.set_interval(0.2, self._tick)

    def set_phase(self, phase: str) -> None:
        """Show what the loader is doing now."""
        self.phase = phase
        self._tick()

    def _tick(self) -> None:
        elapsed = time.monotonic() - self.started
        self.query_one("#loading-phase", Label).update(Text(f"{self.phase}  ({elapsed:.1f} s)"))
