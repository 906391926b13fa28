"""The message screen's index is built off the UI thread, after the grid's first paint, so that
``M`` opens at once on a large trace; until it is built, ``M`` shows its progress and every key
is answered (Pilot, with a build held back by a gate the test opens)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pptrace_tui.app import PptraceViewer
from pptrace_tui.message_index import MessageIndex
from pptrace_tui.screens.help import HelpScreen
from pptrace_tui.screens.main import MainScreen
from pptrace_tui.screens.messages import MessagesScreen, MessagesWaiting

from pptrace.analyze.analyzer import analysis
from tests.helpers_tui import notes, screen_text, settle
from tests.test_tui_messages import pipeline

Build = Callable[..., MessageIndex]


class Gate:
    """``MessageIndex.build`` held until ``open()``: where it ran, and how many times."""

    def __init__(self, build: Build, fail: Exception | None = None) -> None:
        self.build, self.fail = build, fail
        self.opened = threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self, *args: Any, **kwargs: Any) -> MessageIndex:
        self.threads.append(threading.current_thread())
        if not self.opened.wait(30):  # bounded: a test that never opens it fails, not hangs
            raise TimeoutError("the test never opened the gate")
        if self.fail is not None:
            raise self.fail
        return self.build(*args, **kwargs)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    held = Gate(MessageIndex.build)
    monkeypatch.setattr(MessageIndex, "build", held)
    yield held
    held.opened.set()  # never leave a worker thread waiting on it


async def _painted(pilot: Any) -> MainScreen:
    for _ in range(500):
        screen = pilot.app.screen
        if isinstance(screen, MainScreen) and screen.painted_at is not None:
            return screen
        await pilot.pause(0.02)
    raise AssertionError(f"no painted grid (screen: {pilot.app.screen!r})")


async def _until(pilot: Any, done: Callable[[], bool], what: str) -> None:
    for _ in range(1500):  # 30 s at most
        if done():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"not within 30 s: {what}")


def _run(gate: Gate, steps: Callable[[Any, PptraceViewer], Any]) -> None:
    trace = pipeline(50)

    async def run() -> None:
        app = PptraceViewer.of(trace, analysis(trace))
        async with app.run_test(size=(120, 40)) as pilot:
            try:
                await steps(pilot, app)
            finally:  # a failed step leaves no worker waiting on the gate
                gate.opened.set()

    asyncio.run(run())


def test_the_message_index_is_built_after_first_paint_off_the_ui_thread(gate: Gate) -> None:
    async def steps(pilot: Any, app: PptraceViewer) -> None:
        main = await _painted(pilot)
        await _until(pilot, lambda: bool(gate.threads), "the build starts without M")
        assert not main.index.messages_ready  # held: the grid is up without it
        gate.opened.set()
        await settle(pilot)
        assert main.index.messages_ready
        assert gate.threads and all(t is not threading.main_thread() for t in gate.threads)
        await pilot.press("M")
        await pilot.pause()
        assert isinstance(app.screen, MessagesScreen)  # at once: no waiting screen between
        assert len(gate.threads) == 1  # built once, and M did not build it again

    _run(gate, steps)


def test_keys_are_answered_while_it_builds_and_m_shows_its_progress(gate: Gate) -> None:
    async def steps(pilot: Any, app: PptraceViewer) -> None:
        main = await _painted(pilot)
        count = sum(len(p.messages) for p in main.index.trace.processes)
        await pilot.press("M")
        await pilot.pause()
        assert isinstance(app.screen, MessagesWaiting)
        await _until(pilot, lambda: f"indexing {count:,} messages" in screen_text(app),
                     "the progress is on screen")
        await pilot.press("escape")  # back to the grid while it builds
        await pilot.pause()
        assert app.screen is main
        await pilot.press("z")  # the main screen answers its keys meanwhile
        await pilot.pause()
        assert main.maximized is not None
        await pilot.press("z")
        await pilot.pause()
        assert main.maximized is None
        await pilot.press("M")
        await pilot.pause()
        waiting = app.screen
        assert isinstance(waiting, MessagesWaiting)
        await pilot.press("question_mark")  # the help over the progress, as anywhere
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        gate.opened.set()
        await _until(pilot, lambda: main.index.messages_ready, "the build ends")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)  # the help stays until it is closed
        await pilot.press("escape")
        await _until(pilot, lambda: isinstance(app.screen, MessagesScreen),
                     "the message screen takes the progress's place")
        assert waiting not in app.screen_stack
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is main
        assert len(gate.threads) == 1
        await settle(pilot)

    _run(gate, steps)


def test_a_build_that_fails_says_why_and_goes_back_to_the_grid(gate: Gate) -> None:
    gate.fail = RuntimeError("the index broke")

    async def steps(pilot: Any, app: PptraceViewer) -> None:
        main = await _painted(pilot)
        await pilot.press("M")
        await pilot.pause()
        assert isinstance(app.screen, MessagesWaiting)
        gate.opened.set()
        await _until(pilot, lambda: app.screen is main, "back on the grid")
        await _until(pilot, lambda: "the message index failed: the index broke" in notes(app),
                     "the error said")
        await settle(pilot)

    _run(gate, steps)
