"""Every screen of the viewer, found by walking: each key of each screen is pressed at 80x24,
and the screens it leads to are walked in turn. On each one, help (``?``) and the command
palette list that screen's own keys (its class's bindings and those of the widgets on it) and
none that only another screen has; no key raises.

Nothing here names a screen class: the walk starts on the main screen and follows the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pptrace_tui.app import PptraceViewer
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widgets import Input

from tests.helpers_tui import screen_text, settle, sync, viewer, wait_main

SIZE = (80, 24)
#: Actions that end the app or leave files behind: never pressed by the walk.
_NOT_PRESSED = frozenset({"quit", "app.quit"})


def _own(node: DOMNode) -> list[Binding]:
    """The bindings a node's own (not Textual's) classes declare."""
    out: list[Binding] = []
    for cls in type(node).__mro__:
        if cls.__module__.startswith("textual"):
            continue
        for item in cls.__dict__.get("BINDINGS", ()):
            b = item if isinstance(item, Binding) else Binding(*item)
            out.extend(Binding.make_bindings([b]))
    return out


def _keys_of(app: PptraceViewer, screen: Screen[object]) -> list[Binding]:
    """What the user can press on this screen: the app's keys, the screen's, its widgets'."""
    nodes: list[DOMNode] = [app, screen, *screen.walk_children(with_self=False)]
    return [b for node in nodes for b in _own(node)]


@dataclass
class Found:
    path: tuple[str, ...]  # the keys that lead here from the first screen
    descriptions: set[str]  # the descriptions of the keys this screen offers
    helped: set[str] | None  # what ? listed here (None: ? opened nothing)
    palette: set[str]  # the palette's titles here


async def _reach(pilot, path: tuple[str, ...]) -> Screen[object]:  # type: ignore[no-untyped-def]
    await wait_main(pilot)
    for key in path:
        await pilot.press(key)
        await settle(pilot)
    return pilot.app.screen  # type: ignore[no-any-return]


async def _look(pilot, path: tuple[str, ...],  # type: ignore[no-untyped-def]
                screen: Screen[object]) -> Found:
    """What ``screen`` (reached by ``path``, on top) offers, and what ? and the palette list."""
    app = pilot.app
    descriptions = {b.description for b in _keys_of(app, screen) if b.description}
    palette = {c.title for c in app.get_system_commands(screen)}
    await pilot.press("question_mark")
    await settle(pilot)
    # What the help screen lists (its table scrolls past 24 lines: read its rows, not the
    # screen); none when ? opened nothing on top (on the help screen itself).
    listed = getattr(app.screen, "entries", None) if app.screen is not screen else None
    helped = {e.binding.description for e in listed} if listed is not None else None
    return Found(path, descriptions, helped, palette)


def _walk(tmp_path: Path, scenario: str) -> dict[str, Found]:
    """Every screen reachable by keys, by class name, with what it offered."""
    found: dict[str, Found] = {}
    todo: list[tuple[str, ...]] = [()]

    async def visit(path: tuple[str, ...]) -> None:
        app = viewer(scenario, export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = await _reach(pilot, path)
            name = type(screen).__name__
            if name in found:
                return
            keys = [b for b in _keys_of(app, screen) if b.action not in _NOT_PRESSED]
            found[name] = await _look(pilot, path, screen)  # this app ends with help on top
        # One app for as many keys as leave it on this screen with no text box focused
        # (a key that opens a screen, or the search box, starts a fresh one for the next).
        pending = list(keys)
        while pending:
            async with viewer(scenario, export_dir=tmp_path).run_test(size=SIZE) as pilot:
                before = await _reach(pilot, path)
                while pending:
                    key = pending.pop(0).key
                    await pilot.press(key)
                    await settle(pilot)
                    after = pilot.app.screen
                    lines = screen_text(pilot.app).splitlines()
                    assert len(lines) == SIZE[1], (name, key)
                    assert all(len(line) <= SIZE[0] for line in lines), (name, key)
                    if after is not before:
                        if type(after).__name__ not in found:
                            todo.append((*path, key))
                        break
                    if isinstance(after.focused, Input):
                        break

    while todo:
        sync(visit)(todo.pop(0))
    return found


@pytest.mark.slow  # walks every screen and key (about 40 s)
def test_each_screen_s_help_and_palette_list_its_own_keys(tmp_path: Path) -> None:
    found = _walk(tmp_path, "dtype-mismatch")
    # The walk went somewhere: the first screen and the screens its keys open.
    assert len(found) >= 4, sorted(found)
    for name, here in found.items():
        others = set().union(*(f.descriptions for n, f in found.items() if n != name))
        for d in here.descriptions:
            assert d in here.palette, (name, "palette lacks", d)
        foreign = others - here.descriptions
        assert not foreign & here.palette, (name, "palette lists", foreign & here.palette)
        if here.helped is None:
            continue
        assert here.helped == here.descriptions, (name, here.path,
                                                   here.helped ^ here.descriptions)


def test_settle_waits_for_a_late_palette_search(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """On a loaded machine the palette's search worker can still be running when the next key
    (or the test's exit) takes its screen away; it then fails with NoMatches: the walk's flake.
    Here the search waits on a gate opened 0.2 s after the key: a bare pause returns with it
    running, ``settle`` returns only once it has finished, and the app exits cleanly."""
    import asyncio

    from textual import work
    from textual.command import CommandPalette

    search = CommandPalette._gather_commands.__wrapped__  # type: ignore[attr-defined]
    gate = asyncio.Event()

    async def late(self: CommandPalette, value: str) -> None:
        await gate.wait()
        await search(self, value)

    monkeypatch.setattr(CommandPalette, "_gather_commands", work(
        exclusive=True, group=CommandPalette._GATHER_COMMANDS_GROUP)(late))

    async def run() -> tuple[bool, bool]:
        gate.clear()  # made in this test's loop: Event binds to the loop on first wait
        async with viewer("dtype-mismatch", export_dir=tmp_path).run_test(size=SIZE) as pilot:
            await wait_main(pilot)
            await pilot.press("ctrl+p")
            await pilot.pause()
            paused = all(w.is_finished for w in pilot.app.workers)
            asyncio.get_running_loop().call_later(0.2, gate.set)
            await settle(pilot)
            settled = all(w.is_finished for w in pilot.app.workers)
        return paused, settled

    assert sync(run)() == (False, True)
