"""The real app in a real terminal: ``pptrace view`` on trace files, in tmux, driven by keys.

tmux runs on its own socket (``-L``) so the test never touches anyone's sessions, and the server
is killed at the end whatever happens. Three terminals: 140x40 (every interaction), 80x24 (what
a default terminal shows on the first screen) and the light theme (the colours tmux received).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers_analyze import write_otlp_lines
from tests.helpers_tui import scenario

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


class Terminal:
    """One tmux server and session of a fixed size."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        # -f /dev/null: no user configuration changes the session's size or keys.
        command = ["tmux", "-L", self.socket, "-f", "/dev/null", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=20)
        if done.returncode and args[:1] == ("new-session",):
            # Starting a server once failed in CI with no reason kept: start it afresh, once.
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                           timeout=20)
            done = subprocess.run(command, capture_output=True, text=True, timeout=20)
        if done.returncode:
            raise AssertionError(f"{' '.join(command[:6])} ... failed ({done.returncode}): "
                                 f"{done.stderr.strip()}")
        return done.stdout

    def screen(self, colours: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if colours else []), "-t", "view")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "view", *keys)

    def wait_for(self, text: str, timeout: float = 40.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")


Open = Callable[..., Terminal]


@pytest.fixture
def open_view(tmp_path: Path) -> Iterator[Open]:
    trace, _ = scenario("dtype-mismatch")
    for proc in trace.processes:
        write_otlp_lines(str(tmp_path / f"rank{proc.rank.rank}.otlp.jsonl"), proc.events)
    opened: list[Terminal] = []

    def start(width: int = 140, height: int = 40, *options: str) -> Terminal:
        term = Terminal(f"pptrace-test-{os.getpid()}-{len(opened)}")
        # COLUMNS/LINES from the test runner would override the terminal's real size.
        command = (f"env -u COLUMNS -u LINES {sys.executable} -m pptrace view {tmp_path} "
                   f"{' '.join(options)}; sleep 30")
        # Started outside the source tree, as a user would: the installed package.
        term.tmux("new-session", "-d", "-s", "view", "-x", str(width), "-y", str(height),
                  "-c", str(tmp_path), command)
        opened.append(term)
        return term

    try:
        yield start
    finally:
        for term in opened:
            subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True,
                           timeout=20)


def test_pptrace_view_in_a_real_terminal(open_view: Open) -> None:
    terminal = open_view(140, 40)
    terminal.wait_for("rank / dir")
    screen = terminal.wait_for("float32 → float16")  # the pair detail at the first divergence
    # The overview: both rows, their states, the first divergence, the findings by kind.
    assert "pp0 tp0 extract" in screen and "pp1 tp0 attach" in screen
    # mb 9's mismatch is summarised into mb 5's finding by the analyzer; the viewer finds it
    # by comparing both sides after first paint.
    screen = terminal.wait_for("= = = = = ≠ = = = ≠ = = ·")
    assert "= = = = = ◆ = = = ≠ = = ?" in screen
    assert "dtype-mismatch (1 finding)" in screen and "orphan-attach (1 finding)" in screen
    # Jump through the findings (in the report's order) to the orphan: no extract side.
    for _ in range(6):
        terminal.keys("]")
        time.sleep(0.5)
        if "extract: no counterpart" in terminal.screen():
            break
    screen = terminal.wait_for("extract: no counterpart")
    assert "attach: rank 1 (pp 1/2, tp 0)  #12" in screen
    # The help screen lists the bindings; Escape closes it.
    terminal.keys("?")
    screen = terminal.wait_for("Key bindings")
    assert "Next finding" in screen and "Export Markdown" in screen
    terminal.keys("Escape")
    terminal.wait_for("rank / dir")
    # q quits back to the shell command (the session stays for the `sleep`).
    terminal.keys("q")
    deadline = time.monotonic() + 20
    while "rank / dir" in terminal.screen() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "rank / dir" not in terminal.screen()


def test_at_80x24_the_first_screen_shows_cells_the_divergence_and_whole_findings(
    open_view: Open,
) -> None:
    terminal = open_view(80, 24)
    terminal.wait_for("float32 → float16")
    screen = terminal.wait_for("q Quit")  # the footer is drawn last
    lines = screen.rstrip("\n").splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    # The grid shows cells, the first divergence among them, on the first screen.
    assert any("pp1 tp0 attach" in line and "= = = = = ◆" in line for line in lines), screen
    # A finding is shown whole (wrapped), not cut behind a horizontal scrollbar.
    assert "rank 1 attached `scores` float32[8, 5]; rank 0 extracted float16[8, 5]" in screen
    # The pair detail is one line per name, both sides readable at this width.
    assert re.search(r"scores\s+\[8, 5\]\s+float32 → float16\s+cpu\s+160 → 80", screen), screen
    # The footer still offers help and quit; help works at this size too.
    assert "? Help" in lines[-1] and "q Quit" in lines[-1]
    terminal.keys("?")
    terminal.wait_for("Key bindings")


def _colour(index: int) -> tuple[int, int, int]:
    """The RGB of an xterm 256-colour index."""
    if index >= 232:
        v = 8 + 10 * (index - 232)
        return v, v, v
    if index >= 16:
        i = index - 16
        return tuple(0 if c == 0 else 55 + 40 * c for c in (i // 36, i // 6 % 6, i % 6))  # type: ignore[return-value]
    basic = [(0, 0, 0), (128, 0, 0), (0, 128, 0), (128, 128, 0), (0, 0, 128), (128, 0, 128),
             (0, 128, 128), (192, 192, 192), (128, 128, 128), (255, 0, 0), (0, 255, 0),
             (255, 255, 0), (0, 0, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255)]
    return basic[index]


def _colours_at(screen: str, needle: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (foreground, background) RGB the terminal draws ``needle`` in: the SGR state is
    followed through the whole capture, since tmux sets a colour once for many lines."""
    fg: tuple[int, ...] = (255, 255, 255)
    bg: tuple[int, ...] = (0, 0, 0)
    text = screen
    at = text.index(needle)
    for match in re.finditer(r"\x1b\[([0-9;]*)m", text[:at]):
        codes = [int(c) if c else 0 for c in match.group(1).split(";")]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code == 0:
                fg, bg = (255, 255, 255), (0, 0, 0)
            elif code in (38, 48) and codes[i + 1 : i + 2] == [5]:
                colour = _colour(codes[i + 2])
                fg, bg = (colour, bg) if code == 38 else (fg, colour)
                i += 2
            elif code in (38, 48) and codes[i + 1 : i + 2] == [2]:
                colour = tuple(codes[i + 2 : i + 5])
                fg, bg = (colour, bg) if code == 38 else (fg, colour)
                i += 4
            i += 1
    return fg, bg


def _light(rgb: tuple[int, ...]) -> float:
    return sum(rgb) / 3


def test_the_light_theme_reaches_the_grid(open_view: Open) -> None:
    # Issue 14, item 7: the grid kept a black background with white labels in the light theme.
    terminal = open_view(120, 30, "--theme", "light")
    terminal.wait_for("float32 → float16")
    terminal.wait_for("t Dark theme")  # the footer names the theme the key switches to
    fg, bg = _colours_at(terminal.screen(colours=True), "pp0 tp0 extract")
    assert _light(bg) > 180 and _light(fg) < 100, (fg, bg)  # dark text on a light ground
    fg, bg = _colours_at(terminal.screen(colours=True), "· ")  # an empty cell stays visible
    assert abs(_light(fg) - _light(bg)) > 20, (fg, bg)
    # Switching back: the grid follows, and the footer names the other theme.
    terminal.keys("t")
    screen = terminal.wait_for("t Light theme")
    fg, bg = _colours_at(terminal.screen(colours=True), "pp0 tp0 extract")
    assert _light(bg) < 80 and _light(fg) > 150, (fg, bg, screen)
