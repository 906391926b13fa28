"""Text from traces is shown as typed: Rich markup and escape sequences in a tensor name, an
engine error or a finding message are never interpreted."""

from __future__ import annotations

from pptrace_tui.widgets.findings_panel import FindingsPanel
from textual.content import Content

from tests.helpers_tui import screen_text, sync, viewer, wait_main

EVIL_NAME = "[bold red]pwned[/] [link=https://evil.example]x[/link]"


def segments_with(app, needle: str) -> list:  # type: ignore[no-untyped-def, type-arg]
    """Every drawn segment whose text contains ``needle``."""
    strips = app.screen._compositor.render_strips()
    return [seg for strip in strips for seg in strip if needle in seg.text]


@sync
async def test_markup_and_escapes_from_a_trace_are_shown_literally() -> None:
    app = viewer("markup")
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await wait_main(pilot)
        screen.grid.goto(0, 1)  # the extract that raised, with the evil name and error
        await pilot.pause()
        text = screen_text(app)
        # The pair detail shows the name exactly as typed (it wraps at the space).
        assert "__sampling_observer_output__.[bold red]pwned[/]" in text
        assert "[link=https://evil.example]x[/link]" in text
        assert "[/]boom [b]not bold[/b] \\x1b[31mred?\\x1b[0m" in text
        assert "\x1b" not in text
        # Nothing from the trace became a link or bold red through markup.
        drawn = segments_with(app, "pwned")
        assert drawn, "the name is on screen"
        assert all(seg.style is None or seg.style.link is None for seg in drawn)
        panel = screen.query_one(FindingsPanel)
        leaf = panel.get_option_at_index(1).prompt  # the first finding, under its kind
        assert isinstance(leaf, Content)
        at = leaf.plain.index(EVIL_NAME)  # shown as typed, and no style reaches into it
        assert all(span.end <= at for span in leaf.spans), leaf.spans


@sync
async def test_markup_typed_into_the_search_box_stays_literal() -> None:
    app = viewer("markup")
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await wait_main(pilot)
        await pilot.press("slash", *"[bold", "right_square_bracket")
        await pilot.press("enter")
        assert screen.spec.text == "[bold]"
        assert "overview · filter: search '[bold]'" in screen_text(app)
