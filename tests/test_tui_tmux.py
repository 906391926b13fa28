"""The real app in a real terminal: ``pptrace view`` on trace files, in tmux, driven by keys.

tmux runs on its own socket (``-L``) so the test never touches anyone's sessions, and the server
is killed at the end whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
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
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=20, check=True)
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "view")

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


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    trace, _ = scenario("dtype-mismatch")
    for proc in trace.processes:
        write_otlp_lines(str(tmp_path / f"rank{proc.rank.rank}.otlp.jsonl"), proc.events)
    term = Terminal(f"pptrace-test-{os.getpid()}")
    # COLUMNS/LINES from the test runner would override the terminal's real size.
    command = f"env -u COLUMNS -u LINES {sys.executable} -m pptrace view {tmp_path}; sleep 30"
    # Started outside the source tree, as a user would: the installed package, its entry points.
    term.tmux("new-session", "-d", "-s", "view", "-x", "140", "-y", "40", "-c", str(tmp_path),
              command)
    try:
        yield term
    finally:
        subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True,
                       timeout=20)


def test_pptrace_view_in_a_real_terminal(terminal: Terminal) -> None:
    terminal.wait_for("rank / dir")
    screen = terminal.wait_for("float16")  # the pair detail at the first divergence
    # The overview: both rows, their states, the first divergence, the findings by kind.
    assert "pp0 tp0 extract" in screen and "pp1 tp0 attach" in screen
    # mb 9's mismatch is summarised into mb 5's finding by the analyzer; the viewer finds it
    # by comparing both sides after first paint.
    screen = terminal.wait_for("= = = = = ≠ = = = ≠ = = ·")
    assert "= = = = = ◆ = = = ≠ = = ?" in screen
    assert "dtype-mismatch (1)" in screen and "orphan-attach (1)" in screen
    assert "float32" in screen
    # Jump through the findings to the orphan: its pair has no extract side.
    terminal.keys("]")
    terminal.keys("]")
    screen = terminal.wait_for("extract: no counterpart")
    assert "attach #12" in screen
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
