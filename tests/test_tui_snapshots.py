"""Snapshot stories: what a user sees at the moments that matter, compared as Textual SVGs.

Update the snapshots after an intended change with ``pytest tests/test_tui_snapshots.py
--snapshot-update`` and review the SVGs (``tests/__snapshots__/``) before committing.
"""

from __future__ import annotations

from typing import Any

from pptrace_tui.widgets.grid import GridView

from tests.helpers_tui import viewer, wait_main

SIZE = (140, 36)


async def opened(pilot: Any) -> None:
    """Wait for the main screen, then for the background ordering of events to finish."""
    screen = await wait_main(pilot)
    for _ in range(100):
        if screen.index.timeline_ready:  # type: ignore[attr-defined]
            break
        await pilot.pause(0.02)
    await pilot.pause()
    pilot.app.screen.query_one(GridView)  # the grid is up


def test_user_opens_a_trace_with_a_dtype_mismatch_and_lands_on_the_first_divergence(
    snap_compare: Any,
) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SIZE, run_before=opened)


def test_user_steps_through_findings_to_the_orphan_attach(snap_compare: Any) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SIZE, run_before=opened,
                        press=["right_square_bracket"] * 3)


def test_user_reads_the_engine_error_of_a_stage_without_an_observer(snap_compare: Any) -> None:
    async def to_the_error(pilot: Any) -> None:
        await opened(pilot)
        pilot.app.screen.query_one(GridView).goto(0, 3)
        await pilot.pause()

    assert snap_compare(viewer("engine-error"), terminal_size=SIZE, run_before=to_the_error)


def test_user_filters_to_errors_on_rank_1(snap_compare: Any) -> None:
    async def filtered(pilot: Any) -> None:
        await opened(pilot)
        await pilot.press("f")
        await pilot.click("#ranks")
        await pilot.press("1")
        await pilot.click("#errors")
        await pilot.click("#apply")
        await pilot.pause()

    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SIZE, run_before=filtered)


def test_user_opens_the_help_screen(snap_compare: Any) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SIZE, run_before=opened,
                        press=["question_mark"])


def test_user_switches_to_the_light_theme(snap_compare: Any) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SIZE, run_before=opened,
                        press=["t"])


# --- the same user at the sizes terminals come in (80x24 and 120x40: issue 14, item 2) -------
SMALL = (80, 24)
MEDIUM = (120, 40)


def test_user_at_80x24_sees_cells_and_the_first_divergence_on_the_first_screen(
    snap_compare: Any,
) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SMALL, run_before=opened)


def test_user_at_80x24_reads_the_engine_error_in_the_pair_detail(snap_compare: Any) -> None:
    async def to_the_error(pilot: Any) -> None:
        await opened(pilot)
        pilot.app.screen.query_one(GridView).goto(0, 3)
        await pilot.pause()

    assert snap_compare(viewer("engine-error"), terminal_size=SMALL, run_before=to_the_error)


def test_user_at_80x24_steps_to_the_orphan_attach(snap_compare: Any) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=SMALL, run_before=opened,
                        press=["right_square_bracket"] * 3)


def test_user_at_120x40_sees_the_findings_beside_the_pair(snap_compare: Any) -> None:
    assert snap_compare(viewer("dtype-mismatch"), terminal_size=MEDIUM, run_before=opened)


def test_user_at_120x40_reads_the_engine_error(snap_compare: Any) -> None:
    async def to_the_error(pilot: Any) -> None:
        await opened(pilot)
        pilot.app.screen.query_one(GridView).goto(0, 3)
        await pilot.pause()

    assert snap_compare(viewer("engine-error"), terminal_size=MEDIUM, run_before=to_the_error)
