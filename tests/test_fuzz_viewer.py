"""Hostile traces in the viewer: it opens, moves, shows details and help without crashing, and
shows trace text literally (no escape sequence reaches the screen, markup stays text).

The viewer engineer's tests cover markup in every widget; these drive the whole app, headless,
on traces loaded from hostile files and on a few arbitrary schema-valid traces.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptrace.analyze.analyzer import analyze
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from pptrace.model.records import Event
from tests.helpers_analyze import write_otlp_lines
from tests.helpers_reliability import EVIL, events, write_hostile_traces

SIZE = (140, 40)
KEYS = ["down", "right", "enter", "tab", "end", "home", "question_mark", "escape"]
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _screen_text(app: Any) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text for strip in strips)


async def _drive(trace: Any, findings: Any, seen_index: list[Any] | None = None) -> str:
    from pptrace_tui.app import PptraceViewer
    from pptrace_tui.screens.main import MainScreen

    app = PptraceViewer.of(trace, findings)
    seen = []
    async with app.run_test(size=SIZE) as pilot:
        # Wait for the main screen itself (generously: other test runs share the machine).
        for _ in range(3000):
            if isinstance(app.screen, MainScreen):
                break
            await pilot.pause(0.02)
        assert isinstance(app.screen, MainScreen), app.screen
        if seen_index is not None:
            seen_index.append(app.screen.index)
        await pilot.pause()
        seen.append(_screen_text(app))
        for key in KEYS:
            await pilot.press(key)
            await pilot.pause()
            seen.append(_screen_text(app))
    return "\n".join(seen)


def test_viewer_on_names_with_escapes_and_markup(tmp_path: Path) -> None:
    write_hostile_traces(tmp_path)
    trace = load_paths([str(tmp_path)])
    findings = analyze(trace)
    assert findings
    text = asyncio.run(_drive(trace, findings))
    assert not RAW.search(text), repr(RAW.search(text))
    # Markup in a name is shown as text somewhere on screen, not applied.
    assert "[bold magenta]markup" in text or "markup[/bold magenta]" in text, EVIL


@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(per_process=st.lists(st.lists(events(), min_size=1, max_size=6), min_size=1, max_size=3))
def test_viewer_on_arbitrary_schema_valid_traces(per_process: list[list[Event]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for i, evs in enumerate(per_process):
            write_otlp_lines(os.path.join(d, f"p{i}.jsonl"), evs, per_line=4)
        try:
            trace = load_paths([d])
        except TraceInputError:
            return
    text = asyncio.run(_drive(trace, analyze(trace)))
    assert not RAW.search(text), repr(RAW.search(text))


@pytest.mark.parametrize("seq", [2**40, -5, -1, 2**63 - 1])
def test_viewer_on_a_corrupt_sequence_number(tmp_path: Path, seq: int) -> None:
    from pptrace.model.records import Direction, RankInfo, TensorMeta

    first = RankInfo(rank=0, pp_rank=0, pp_size=2, tp_rank=0, tp_size=1, host="h", pid=1)
    last = RankInfo(rank=1, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h", pid=2)
    t = (TensorMeta(name="a", key="__sampling_observer_output__.a", shape=(2,), nbytes=8),)
    write_otlp_lines(str(tmp_path / "first.jsonl"), [
        Event(Direction.EXTRACT, 0, first, 100, 100, 1, tensors=t, returned_none=False),
        Event(Direction.EXTRACT, seq, first, 300, 300, 1, tensors=t, returned_none=False)])
    write_otlp_lines(str(tmp_path / "last.jsonl"), [
        Event(Direction.ATTACH, 0, last, 50, 50, 1, tensors=t),
        Event(Direction.ATTACH, 1, last, 250, 250, 1, tensors=t)])
    trace = load_paths([str(tmp_path)])
    indexes: list[Any] = []
    text = asyncio.run(_drive(trace, analyze(trace), indexes))
    # The corrupt event gets no cell (one per number below it would exhaust memory); the other
    # events keep theirs, and the screen says that one event was not drawn.
    (index,) = indexes
    extract_row = next(r for r in index.rows if r.direction is Direction.EXTRACT)
    assert [ev.seq for ev in extract_row.events if ev is not None] == [0]
    assert sum(extract_row.counts.values()) == 1
    assert index.unplaced == 1
    assert "1 event with an impossible sequence number not drawn" in text
    assert "pp0 tp0 extract" in text and "pp1 tp0 attach" in text
