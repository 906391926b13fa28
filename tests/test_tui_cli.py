"""``pptrace view``: argument handling, the viewer entry point, and what the app's loader does
(the first call hands over what the command loaded; ``--follow`` calls re-read the files)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pptrace.cli import main as cli
from pptrace.cli import view as cli_view
from tests.helpers_analyze import write_otlp_lines
from tests.helpers_tui import pipeline


def write(directory: Path, microbatches: int) -> None:
    for proc in pipeline(microbatches).processes:
        write_otlp_lines(str(directory / f"rank{proc.rank.rank}.otlp.jsonl"), proc.events)


def test_the_viewer_is_found_through_its_entry_point() -> None:
    from pptrace_tui.launch import open_viewer

    assert cli_view._viewer() is open_viewer


def test_view_without_input_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["view"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pptrace: error: no input: give trace files") and err.count("\n") == 1


def test_view_on_a_missing_path_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["view", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pptrace: error: ") and err.count("\n") == 1 and "nope.jsonl" in err


def test_the_loader_hands_over_the_first_load_then_rereads_for_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, 3)
    seen: dict[str, Any] = {}

    def fake_viewer(loader: Callable[..., Any], *, follow: bool, theme: str) -> None:
        phases: list[str] = []
        first, _ = loader(phases.append)
        write(tmp_path, 5)  # the engine wrote more
        second, second_findings = loader(phases.append)
        seen.update(first=first.event_count, second=second.event_count, follow=follow,
                    theme=theme, phases=phases, findings=second_findings)
        return None

    monkeypatch.setattr(cli_view, "_viewer", lambda: fake_viewer)
    assert cli.main(["view", str(tmp_path), "--follow", "--theme", "light"]) == 0
    assert seen["first"] == 6 and seen["second"] == 10
    assert seen["follow"] is True and seen["theme"] == "light"
    assert seen["phases"] == ["reading 1 input(s)", "analyzing 10 events"]
    assert seen["findings"] == []


def test_a_load_error_inside_the_app_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 2)
    monkeypatch.setattr(cli_view, "_viewer", lambda: lambda loader, **kw: "rank0.jsonl:3: bad")
    assert cli.main(["view", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith("pptrace: error: rank0.jsonl:3: bad\n")
