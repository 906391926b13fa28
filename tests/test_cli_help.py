"""``--help`` reads on an 80-column terminal: prose wrapped, tables folded, examples whole."""

from __future__ import annotations

import argparse

import pytest

from pptrace.cli.help import HelpFormatter
from pptrace.cli.main import COMMANDS, build_parser


def help_text(command: str | None, columns: int, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    parser = build_parser()
    if command is None:
        return parser.format_help()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_fits_an_80_column_terminal(command: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    long = [line for line in help_text(command, 80, monkeypatch).splitlines() if len(line) > 80]
    assert long == []


def test_prose_wraps_and_examples_and_tables_keep_their_shape() -> None:
    text = ("A description that is one long line of prose, far wider than the terminal it is "
            "printed on, as argparse's raw formatter would leave it.\n\nexamples:\n"
            "  pptrace demo --fault duplicate   # a comment\n\n"
            "  PPTRACE_MODE    stream (every event exported) or flight (a ring dumped on error, "
            "on a signal and at exit)\n")
    out = HelpFormatter("prog", width=60)._fill_text(text, 60, "")
    assert out.splitlines() == [
        "A description that is one long line of prose, far wider than",
        "the terminal it is printed on, as argparse's raw formatter",
        "would leave it.",
        "",
        "examples:",
        "  pptrace demo --fault duplicate   # a comment",
        "",
        "  PPTRACE_MODE    stream (every event exported) or flight (a",
        "                  ring dumped on error, on a signal and at",
        "                  exit)",
    ]
