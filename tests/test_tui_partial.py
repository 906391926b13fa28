"""A large trace's start drawn first (``PptraceViewer(partial=...)``, what ``pptrace view`` does
over ``PPTRACE_VIEW_START_MB``): the header says it is a start and how far the reading of the
rest is; exports wait for the whole trace; the whole trace then takes its place, at its first
divergence unless the user moved, and a message screen drawn from the start opens again on the
whole. The loader's second call (the whole trace) waits on the test, so every state is seen."""

from __future__ import annotations

import threading
from pathlib import Path

from pptrace_tui.app import PptraceViewer
from pptrace_tui.screens.messages import MessagesScreen

from pptrace.analyze.analyzer import Analysis, analysis
from pptrace.model.trace import Trace
from tests.helpers_tui import notes, pipeline, scenario, settle, sync, wait_main
from tests.test_load_head import healthy

SIZE = (140, 40)
PARTIAL = "the first 5% of 2.0 GB of trace files"


class TwoLoads:
    """A loader: the trace's start first, then (when the test releases it) the whole."""

    def __init__(self, start: tuple[Trace, object], whole: tuple[Trace, object]) -> None:
        self.start, self.whole = start, whole
        self.release = threading.Event()
        self.calls = 0
        self.early: list[int] = []

    def __call__(self, status):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            return self.start
        if self.calls > 2 and not self.release.is_set():
            self.early.append(self.calls)  # a --follow poll while the whole trace was read
        status("reading 40% of the trace files")
        assert self.release.wait(30), "the test never released the whole trace"
        return self.whole


async def until(pilot, condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"never: {what}")


def analysed(trace: Trace) -> tuple[Trace, Analysis]:
    result = analysis(trace)
    return result.trace, result


@sync
async def test_the_start_is_marked_then_the_whole_takes_its_place(tmp_path: Path) -> None:
    whole = scenario("dtype-mismatch")
    loads = TwoLoads((pipeline(3), []), whole)
    app = PptraceViewer(loads, partial=PARTIAL, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_main(pilot)
        await until(pilot, lambda: "reading 40%" in str(screen.sub_title), "the reading shown")
        assert str(screen.sub_title).startswith(
            f"◐ {PARTIAL}, reading 40% of the trace files · ")
        assert screen.index.trace is loads.start[0]
        # An export says what the trace holds: not while only its start is shown.
        await pilot.press("e")
        await pilot.pause()
        assert list(tmp_path.iterdir()) == []
        assert "the whole trace is still being read" in notes(app)
        # No divergence in the start is no claim about the trace.
        await pilot.press("d")
        await pilot.pause()
        assert "no divergence in the part read so far" in notes(app)
        loads.release.set()
        await until(pilot, lambda: screen.index.trace is whole[0], "the whole trace shown")
        await settle(pilot)
        assert "◐" not in str(screen.sub_title) and screen.partial is None
        # The cursor had not moved: it goes where a fresh start would have put it.
        cell = screen.index.first_divergence_cell
        assert cell is not None and screen.grid.cursor == cell
        await pilot.press("e")
        await settle(pilot)
        assert len(list(tmp_path.iterdir())) == 1
        assert loads.calls == 2


@sync
async def test_a_cursor_the_user_moved_stays_when_the_whole_arrives() -> None:
    loads = TwoLoads((pipeline(6), []), scenario("dtype-mismatch"))
    app = PptraceViewer(loads, partial=PARTIAL)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_main(pilot)
        await pilot.press("right", "right")
        moved = screen.grid.cursor
        assert moved == (0, 2)
        loads.release.set()
        await until(pilot, lambda: screen.partial is None, "the whole trace shown")
        await settle(pilot)
        assert screen.grid.cursor == moved != screen.index.first_divergence_cell


@sync
async def test_a_message_screen_of_the_start_opens_again_on_the_whole() -> None:
    start, whole = analysed(healthy(steps=4).trace()), analysed(healthy(steps=12).trace())
    loads = TwoLoads(start, whole)
    app = PptraceViewer(loads, partial=PARTIAL)
    async with app.run_test(size=SIZE) as pilot:
        await wait_main(pilot)
        await pilot.press("M")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the message screen")
        first = app.screen
        assert isinstance(first, MessagesScreen)
        assert str(first.sub_title).startswith(f"◐ {PARTIAL}, the rest being read · ")
        loads.release.set()
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen)
                    and app.screen is not first, "the message screen of the whole trace")
        again = app.screen
        assert isinstance(again, MessagesScreen) and again.partial is None
        assert "◐" not in str(again.sub_title)
        assert again.index.width > first.index.width
        await settle(pilot)


@sync
async def test_a_whole_trace_that_cannot_be_read_leaves_the_start_marked() -> None:
    calls = [0]

    def loader(status):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 1:
            return pipeline(3), []
        raise OSError("rank3.jsonl vanished")

    app = PptraceViewer(loader, partial=PARTIAL)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_main(pilot)
        await until(pilot, lambda: "could not be read" in str(screen.sub_title), "the failure")
        assert str(screen.sub_title).startswith(
            f"◐ {PARTIAL}, the rest could not be read: rank3.jsonl vanished")
        assert "reading the whole trace failed: rank3.jsonl vanished" in notes(app)


@sync
async def test_follow_starts_polling_once_the_whole_trace_is_read() -> None:
    loads = TwoLoads((pipeline(3), []), (pipeline(6), []))
    app = PptraceViewer(loads, partial=PARTIAL, follow=True, follow_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_main(pilot)
        await until(pilot, lambda: loads.calls == 2, "the whole trace being read")
        loads.release.set()
        await until(pilot, lambda: loads.calls >= 4, "polls after the whole trace")
        assert loads.early == []  # polling began once the whole trace was read
        assert screen.partial is None and screen.index.width == 6
        assert str(screen.sub_title).startswith("● live")
