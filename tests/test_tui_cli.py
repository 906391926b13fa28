"""``pptrace view``: it needs a terminal (else exit 2 at once, naming ``pptrace analyze``), its
inputs (``./pptrace-traces`` by default; ``--follow`` waits for traces), the viewer entry point,
and what the app's loader does (the first call hands over what the command loaded; ``--follow``
calls re-read the files)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.cli import main as cli
from pptrace.cli import view as cli_view
from pptrace.load.loader import load_paths
from tests.helpers_analyze import write_otlp_lines
from tests.helpers_tui import pipeline

VIEW = [sys.executable, "-m", "pptrace", "view"]


def write(directory: Path, microbatches: int) -> None:
    for proc in pipeline(microbatches).processes:
        write_otlp_lines(str(directory / f"rank{proc.rank.rank}.otlp.jsonl"), proc.events)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if stdin and stdout were a terminal (pytest's are not)."""
    monkeypatch.setattr(cli_view, "has_terminal", lambda: True)


@pytest.fixture
def fake_viewer(monkeypatch: pytest.MonkeyPatch, terminal: None) -> list[Any]:
    """The viewer replaced by one that calls its loader once and records the trace it got."""
    got: list[Any] = []

    def viewer(loader: Callable[..., Any], *, follow: bool, theme: str) -> None:
        trace, _ = loader(lambda phase: None)
        got.append(trace)
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: viewer)
    return got


def test_the_viewer_is_found_through_its_entry_point() -> None:
    from pptrace_tui.launch import open_viewer

    assert cli_view._viewer() is open_viewer


@pytest.mark.parametrize(("stdin", "stdout"), [("devnull", "file"), ("devnull", "pipe"),
                                               ("terminal", "pipe"), ("devnull", "terminal")])
def test_without_a_terminal_view_exits_2_at_once_naming_analyze(
    tmp_path: Path, stdin: str, stdout: str
) -> None:
    # </dev/null >file; `pptrace view DIR | head`; and each of stdin, stdout alone a terminal.
    import pty

    write(tmp_path, 2)
    out = tmp_path / "out.txt"
    leader, follower = pty.openpty()
    try:
        with open(os.devnull) as devnull, out.open("w") as sink:
            t0 = time.monotonic()
            done = subprocess.run(
                [*VIEW, str(tmp_path)],
                stdin=follower if stdin == "terminal" else devnull,
                stdout={"file": sink, "pipe": subprocess.PIPE, "terminal": follower}[stdout],
                stderr=subprocess.PIPE, text=True, timeout=60)
            elapsed = time.monotonic() - t0
    finally:
        os.close(leader)
        os.close(follower)
    assert done.returncode == 2
    assert done.stderr == (
        "pptrace: error: pptrace view needs a terminal on stdin and stdout; for a report "
        f"instead, run: pptrace analyze {tmp_path}\n")
    assert out.read_text() == "" and not done.stdout  # no screen drawn anywhere
    assert elapsed < 30  # at once (the old hang ran until its timeout)


def test_view_without_input_or_default_directory_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    terminal: None
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["view"]) == 2
    err = capsys.readouterr().err
    assert err == ("pptrace: error: no input: give trace files, directories or glob patterns, "
                   "or --jaeger URL (./pptrace-traces, read by default, does not exist here)\n")


def test_view_reads_pptrace_traces_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_viewer: list[Any]
) -> None:
    write(tmp_path / "pptrace-traces", 3)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["view"]) == 0
    assert fake_viewer[0].event_count == 6


def test_the_viewer_runs_with_the_loaded_trace_out_of_the_collectors_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    seen: list[tuple[int, bool]] = []

    def viewer(loader: Callable[..., Any], *, follow: bool, theme: str) -> None:
        trace, _ = loader(lambda phase: None)
        tracked = {id(o) for o in gc.get_objects()}  # (the frozen are in no generation)
        seen.append((gc.get_freeze_count(), id(trace.processes) in tracked))
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: viewer)
    write(tmp_path, 3)
    try:
        assert cli.main(["view", str(tmp_path)]) == 0
        [(frozen, trace_tracked)] = seen
        assert frozen > 0 and not trace_tracked
        assert gc.get_freeze_count() == 0  # thawed when the viewer closed
    finally:
        gc.unfreeze()


def test_view_on_a_missing_path_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], terminal: None
) -> None:
    assert cli.main(["view", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pptrace: error: ") and err.count("\n") == 1 and "nope.jsonl" in err


@pytest.mark.parametrize("where", ["empty", "missing", "default, missing"])
def test_follow_waits_for_traces_that_are_not_there_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: None, where: str
) -> None:
    directory = tmp_path / ("pptrace-traces" if where.startswith("default") else "run")
    if where == "empty":
        directory.mkdir()
    monkeypatch.chdir(tmp_path)
    seen: list[int] = []

    def viewer(loader: Callable[..., Any], *, follow: bool, theme: str) -> None:
        first, result = loader(lambda phase: None)
        assert (first.processes, first.sources) == ((), ())
        assert (result.findings, result.channels) == ((), ())
        write(directory, 2)  # the engine starts and writes
        second, _ = loader(lambda phase: None)
        seen.extend((first.event_count, second.event_count))
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: viewer)
    argv = ["view", "--follow"] + ([] if where.startswith("default") else [str(directory)])
    assert cli.main(argv) == 0
    assert seen == [0, 4]


def test_the_loader_hands_over_the_first_load_then_rereads_for_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    write(tmp_path, 3)
    seen: dict[str, Any] = {}

    def fake_viewer(loader: Callable[..., Any], *, follow: bool, theme: str) -> None:
        phases: list[str] = []
        first, _ = loader(phases.append)
        write(tmp_path, 5)  # the engine wrote more
        second, second_result = loader(phases.append)
        seen.update(first=first.event_count, second=second.event_count, follow=follow,
                    theme=theme, phases=phases, result=second_result)
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: fake_viewer)
    assert cli.main(["view", str(tmp_path), "--follow", "--theme", "light"]) == 0
    assert seen["first"] == 6 and seen["second"] == 10
    assert seen["follow"] is True and seen["theme"] == "light"
    assert seen["phases"] == ["reading 1 input(s)", "reading 50% of the trace files",
                              "reading 100% of the trace files", "analyzing 10 events"]
    # The analyzer's analysis of what it re-read: its findings, and the channels the grid
    # pairs on.
    assert seen["result"] == analysis(load_paths([str(tmp_path)]))


def test_a_load_error_inside_the_app_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    terminal: None
) -> None:
    write(tmp_path, 2)
    monkeypatch.setattr(cli_view, "_viewer", lambda: lambda loader, **kw: "rank0.jsonl:3: bad")
    assert cli.main(["view", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith("pptrace: error: rank0.jsonl:3: bad\n")


# A child interpreter in which ``import textual`` fails as it does where the ``view`` extra is
# not installed (a meta-path finder ahead of every other refuses it), and which has a terminal
# as far as ``pptrace view`` can tell.
_WITHOUT_TEXTUAL = """
import sys
from importlib.abc import MetaPathFinder

class NoTextual(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "textual" or name.startswith("textual."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTextual())
from pptrace.cli import main, view
view.has_terminal = lambda: True
sys.exit(main.main(["view", sys.argv[1]]))
"""


def test_view_without_textual_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    write(tmp_path, 3)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TEXTUAL, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "textual" in lines[0] and "pip install 'pptrace[view]'" in lines[0]
    assert done.stdout == ""


def test_a_large_trace_is_handed_over_as_its_start_then_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    from tests.test_load_head import healthy, write_flushed

    directory = write_flushed(healthy().trace(), tmp_path / "t")
    monkeypatch.setenv("PPTRACE_VIEW_START_MB", "0.5")  # the trace is about 4 MB
    seen: dict[str, Any] = {}

    def fake_viewer(loader: Callable[..., Any], *, follow: bool, theme: str,
                    partial: str) -> None:
        first, first_result = loader(lambda phase: None)
        phases: list[str] = []
        second, _ = loader(phases.append)
        # The whole trace lives as long as the viewer, as the first load does: out of the
        # collector's passes (its indexes are built next, with the collector on).
        seen["kept"] = id(second) not in {id(o) for o in gc.get_objects()}
        seen.update(first=first, first_result=first_result, second=second, partial=partial,
                    phases=phases)
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: fake_viewer)
    assert cli.main(["view", str(directory)]) == 0
    whole = load_paths([str(directory)])
    assert 0 < seen["first"].event_count < whole.event_count == seen["second"].event_count
    assert seen["kept"]
    assert seen["partial"].startswith("the first ") and seen["partial"].endswith(
        " of 4 MB of trace files")
    # The start's analysis is of the start (what the grid draws first).
    assert seen["first_result"] == analysis(seen["first"])
    # Reading the whole trace says how far it is.
    assert seen["phases"][0] == "reading 1 input(s)"
    assert "reading 100% of the trace files" in seen["phases"]
    assert seen["phases"][-1] == f"analyzing {whole.event_count:,} events"


@pytest.mark.parametrize("value", ["0", "5000"])
def test_a_trace_under_the_size_or_with_the_start_off_is_read_whole_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_viewer: list[Any], value: str
) -> None:
    from tests.test_load_head import healthy, write_flushed

    directory = write_flushed(healthy().trace(), tmp_path / "t")
    monkeypatch.setenv("PPTRACE_VIEW_START_MB", value)
    assert cli.main(["view", str(directory)]) == 0  # (the fake viewer takes no ``partial``)
    assert fake_viewer[0].event_count == load_paths([str(directory)]).event_count


def test_a_bad_start_size_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    fake_viewer: list[Any]
) -> None:
    write(tmp_path, 2)
    monkeypatch.setenv("PPTRACE_VIEW_START_MB", "lots")
    assert cli.main(["view", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PPTRACE_VIEW_START_MB='lots'" in err
    assert fake_viewer == []
