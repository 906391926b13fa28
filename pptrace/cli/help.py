"""One help layout for every command: paragraphs wrapped to the terminal, examples and tables kept.

argparse either wraps everything (and mangles example blocks and variable tables) or nothing
(and a description becomes one 300-character line). ``HelpFormatter`` wraps prose paragraphs,
keeps indented lines as they are, and folds a long table row under its own second column:

    PPTRACE_MODE          stream (every event exported) or flight (ring dumped on
                          error/signal/exit)
"""

from __future__ import annotations

import argparse
import re
import textwrap

__all__ = ["HelpFormatter"]

_ROW = re.compile(r"^(\s*\S+(?: \S+)*?\s{2,})(\S.*)$")  # "  NAME   text": a table row


def _fold_row(line: str, width: int) -> list[str]:
    """A long indented line: a table row wraps under its text; anything else stays whole."""
    if len(line) <= width:
        return [line]
    row = _ROW.match(line)
    if row is None or len(row.group(1)) > width // 2:
        return [line]  # an example command: never broken inside
    hang = " " * len(row.group(1))
    return textwrap.wrap(row.group(2), width, initial_indent=row.group(1),
                         subsequent_indent=hang, break_on_hyphens=False) or [line]


def _join_continuations(lines: list[str]) -> list[str]:
    """Put a row's continuation lines (indented to its text column) back on the row."""
    joined: list[str] = []
    hang = -1
    for line in lines:
        lead = len(line) - len(line.lstrip())
        if joined and hang > 0 and lead == hang and _ROW.match(line) is None:
            joined[-1] += " " + line.strip()
            continue
        row = _ROW.match(line)
        hang = len(row.group(1)) if row else -1
        joined.append(line)
    return joined


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wrap prose, keep examples and tables (see the module docstring)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for block in re.split(r"\n\s*\n", text.strip("\n")):
            lines = block.splitlines()
            if any(line[:1].isspace() for line in lines[1:]) or lines[0][:1].isspace():
                for line in _join_continuations(lines):
                    out += _fold_row(indent + line, width)
            else:
                # A heading ("examples:") keeps its own line; the prose after it is one paragraph.
                head = [lines.pop(0)] if len(lines) > 1 and lines[0].endswith(":") else []
                out += [indent + h for h in head]
                if lines:
                    out += textwrap.wrap(" ".join(x.strip() for x in lines), width,
                                         initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False)
            out.append("")
        return "\n".join(out).rstrip("\n")
