"""Trace text shown literally: Rich ``Text`` objects, never markup strings built from trace data.

A tensor name or an engine error may contain ``[bold]``, ``[/]``, ``[link=...]``, escape
sequences or bidi overrides. Everything the viewer shows from a trace goes through ``literal``:
``pptrace.model.text.inert`` (the one escaper the reports use too) turns control, line-separator
and bidi characters into visible escapes (``\\x1b``, ``\\u202e``), and the result is a ``Text``
that no markup parser ever sees.

    label = literal(event.error_message or "", "bold red")
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from pptrace.model.text import inert

__all__ = ["counted", "literal"]


def literal(text: object, style: str | Style = "") -> Text:
    """Return ``text`` as a Rich ``Text`` shown exactly as typed (control characters escaped)."""
    return Text(inert(str(text)), style=style, end="")


def counted(n: int, noun: str) -> str:
    """``1 finding``, ``0 findings``, ``2,000 findings``: a count that reads right for any n."""
    return f"{n:,} {noun if n == 1 else noun + 's'}"
