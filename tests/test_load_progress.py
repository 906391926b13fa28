"""Loading progress: shown on a terminal (stderr), never when stderr is a file or a pipe."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from pptrace.cli.inputs import add_input_arguments, load_from_args
from pptrace.model.progress import TerminalProgress

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_input_arguments(parser)
    return parser.parse_args(list(argv))


def test_terminal_progress_rewrites_one_line_and_erases_it() -> None:
    out = _Tty()
    progress = TerminalProgress(out, hz=1000.0)
    progress(5_000_000, 20_000_000, "/x/rank3.jsonl")
    progress(20_000_000, 20_000_000, "/x/rank3.jsonl")
    progress.close()
    text = out.getvalue()
    assert "\n" not in text
    assert "pptrace: loading  25.0%  5.0 MB of 20.0 MB  rank3.jsonl" in text
    assert "100.0%" in text
    assert text.endswith("\r" + " " * 100 + "\r")


@pytest.mark.parametrize(
    ("tty", "flag", "shown"),
    [(True, (), True), (True, ("--no-progress",), False), (False, (), False)],
)
def test_progress_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tty: bool, flag: tuple[str, ...], shown: bool
) -> None:
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    trace = load_from_args(_args(str(GOLDEN), *flag))
    assert trace.event_count == 12
    assert ("pptrace: loading" in err.getvalue()) is shown
