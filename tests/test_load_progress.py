"""Progress (``pptrace.cli.progress.Status``): a self-rewriting line on a terminal, one line per
stage of a second or more elsewhere, nothing with ``--no-progress``; the same for every command."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from pptrace.cli import progress as progress_module
from pptrace.cli.main import main
from pptrace.cli.progress import Status

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    """``time.monotonic`` for the progress module, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", fake)
    return fake


def test_on_a_terminal_loading_rewrites_one_line_and_erases_it(clock: _Clock) -> None:
    out = _Tty()
    load = Status(out).loading()
    load(5_000_000, 20_000_000, "/x/rank3.jsonl")
    clock.now += 0.01
    load(6_000_000, 20_000_000, "/x/rank3.jsonl")  # within 1/8 s: not drawn
    clock.now += 1
    load(20_000_000, 20_000_000, "/x/rank3.jsonl")
    text = out.getvalue()
    assert "\n" not in text
    assert "pptrace: loading  25.0%  5.0 MB of 20.0 MB  rank3.jsonl" in text
    assert " 30.0%" not in text
    assert "pptrace: loaded 20.0 MB" in text


def test_on_a_terminal_a_stage_ends_erased_or_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = _Tty()
    status = Status(out)
    status.stage("pptrace: analyzing 12 events")
    status.end()
    assert out.getvalue().endswith("\r" + " " * 79 + "\r")
    out = _Tty()
    status = Status(out)
    status.stage("steps r0 0/4")
    status.end("steps r0 4/4", keep=True)
    assert out.getvalue().endswith("\rsteps r0 4/4".ljust(80) + "\n")


@pytest.mark.parametrize("columns", [40, 80, 132])
def test_the_status_line_never_fills_the_terminal_s_width(monkeypatch: pytest.MonkeyPatch,
                                                          columns: int) -> None:
    # A line as wide as the terminal (or wider) wraps, and "\r" then returns to the start of
    # its last row only: at 80 columns the 100-column line left a row behind on every redraw.
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _Tty()
    status = Status(out)
    status.stage("pptrace: loading  25.0%  5.0 MB of 20.0 MB  " + "a-long-file-name" * 8)
    status.end("steps r0 4/4 " + "r1 4/4 " * 30, keep=True)
    drawn = [part for line in out.getvalue().split("\n") for part in line.split("\r")]
    assert drawn and all(len(part) < columns for part in drawn), [len(p) for p in drawn]


def test_off_a_terminal_only_a_long_stage_writes_one_line(clock: _Clock) -> None:
    out = io.StringIO()
    status = Status(out)
    load = status.loading()
    load(1_000_000, 2_000_000, "a.jsonl")
    load(2_000_000, 2_000_000, "b.jsonl")
    status.end()  # quick: nothing
    assert out.getvalue() == ""
    status.stage("pptrace: analyzing 5 events")
    clock.now += 2.5
    status.update("pptrace: analyzing 5 events, half done")
    status.end()
    assert out.getvalue() == "pptrace: analyzing 5 events, half done (2.5s)\n"


def test_no_progress_writes_nothing(clock: _Clock) -> None:
    status = Status(None)
    status.stage("pptrace: analyzing")
    clock.now += 10
    status.end("done", keep=True)
    status.loading()(1, 1, "x")
    status.end()  # (nothing to write to: it must not fail either)


@pytest.mark.parametrize(
    ("tty", "flag", "shown"),
    [(True, (), True), (True, ("--no-progress",), False), (False, (), False)],
)
@pytest.mark.parametrize("command", [["analyze", str(GOLDEN)],
                                     ["diff", str(GOLDEN), str(GOLDEN)]])
def test_commands_show_progress_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, command: list[str], tty: bool, flag: tuple[str, ...],
    shown: bool
) -> None:
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main([*command, *flag]) in (0, 1)
    assert ("pptrace: loading" in err.getvalue()) is shown
    assert ("pptrace: analyzing" in err.getvalue()) is shown
    if not shown:
        assert err.getvalue() == ""


def test_a_small_analysis_leaves_stderr_empty_in_a_pipe() -> None:
    done = subprocess.run([sys.executable, "-m", "pptrace", "analyze", str(GOLDEN)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "orphan" in done.stdout.lower()
    assert done.stderr == ""
