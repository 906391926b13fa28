"""Trace text shown literally: Rich ``Text`` objects, never markup strings built from trace data.

A tensor name or an engine error may contain ``[bold]``, ``[/]``, ``[link=...]`` or escape
sequences. Everything the viewer shows from a trace goes through ``literal``: control characters
become visible escapes (``\\x1b``) and the result is a ``Text`` that no markup parser ever sees.

    label = literal(event.error_message or "", "bold red")
"""

from __future__ import annotations

import re

from rich.style import Style
from rich.text import Text

__all__ = ["clean", "counted", "literal"]

# C0, DEL and C1 control characters: a terminal would act on them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """Replace every control character with a visible escape such as ``\\x1b``."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def literal(text: object, style: str | Style = "") -> Text:
    """Return ``text`` as a Rich ``Text`` shown exactly as typed (control characters escaped)."""
    return Text(clean(str(text)), style=style, end="")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 finding``, ``0 findings``, ``2,000 findings``: a count that reads right for any n."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
