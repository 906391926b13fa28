"""Text that pptrace prints: the one escaper for trace text, plurals, and a cap on length.

Trace files are input from anywhere: a tensor name or an error message may hold an escape
sequence, a carriage return, a newline or a bidi override. Everything that shows trace text to a
person (the text reports, error lines, the viewer and its exports) passes it through ``inert``,
so that it can neither act on the terminal nor break the one-line promise, nor stop the
output: a lone surrogate (U+D800, which JSON's ``\\ud800`` escape decodes to) cannot be
encoded as UTF-8, and is shown as its escape too (``json_safe`` does only that, for the JSON
reports, whose encoder escapes the rest itself). Counted nouns go through ``plural`` so that
sentences read right for 0, 1 and many; ``clip`` bounds what one finding or message may print
and says what it cut; ``clip_name`` is the one clip for a name from a trace (a tensor, a run
id, a host) wherever a report shows one.

    inert("rtl\u202eexe")            # 'rtl\\u202eexe'
    plural(1, "finding")             # '1 finding'
    plural(3, "key", "prefixed")     # '3 prefixed keys'
    clip("x" * 10_000, 100)          # 'xxx... (9,938 more characters cut)'
    clip_name("r" * 300_000)         # 'rrr... (299,840 more characters cut)'
    json_safe({"n": "a\\ud800"})     # {'n': 'a\\\\ud800'}

Stdlib only.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

_T = TypeVar("_T")

__all__ = ["INERT_CHARACTERS", "MESSAGE_LIMIT", "NAME_LIMIT", "clip", "clip_name", "inert",
           "json_safe", "plural"]

# A character shown as an escape: C0 controls (ESC, BEL, CR, LF...), DEL and the C1 controls
# (a terminal acts on each: CSI is 0x9b); the Unicode line and paragraph separators (they break
# a line as LF does); the bidi embeddings, overrides and isolates, and the marks that reorder
# text around them (U+202E turns "exe.txt" into "txt.exe" on screen); the surrogates (alone,
# they cannot be written as UTF-8: printing one raised UnicodeEncodeError).
_SURROGATES = range(0xD800, 0xE000)
INERT_CHARACTERS: frozenset[int] = frozenset(
    (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
     *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C, *_SURROGATES)
)
_TABLE = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in INERT_CHARACTERS}
_SURROGATE_TABLE = {c: _TABLE[c] for c in _SURROGATES}

#: The most characters one finding's message, or one quoted message, prints in a text report.
MESSAGE_LIMIT = 2_000
#: The most characters of one name from a trace (tensor, key, run id, host) a report shows.
NAME_LIMIT = 200


def inert(text: str) -> str:
    """``text`` with control, line-separator and bidi characters shown as escapes."""
    return text.translate(_TABLE)


def json_safe(value: _T) -> _T:
    """``value`` (JSON data) with every lone surrogate in its strings, keys too, shown as its
    escape: what a strict JSON reader accepts, and what the text report shows (tuples become
    lists, as JSON writes them)."""
    out: Any = value
    if isinstance(value, str):
        out = value.translate(_SURROGATE_TABLE)
    elif isinstance(value, dict):
        out = {json_safe(k): json_safe(v) for k, v in value.items()}
    elif isinstance(value, (list, tuple)):
        out = [json_safe(v) for v in value]
    return cast(_T, out)


def clip_name(text: str) -> str:
    """A name from a trace as a report shows it: cut to ``NAME_LIMIT``, saying how much."""
    return clip(text, NAME_LIMIT)


def plural(n: int, noun: str, adjective: str = "", *, many: str | None = None) -> str:
    """``1 finding``, ``0 findings``, ``2 prefixed keys``; ``many`` spells an irregular plural."""
    if n == 1:
        word = noun
    elif many is not None:
        word = many
    elif noun.endswith(("s", "x", "ch", "sh")):
        word = noun + "es"
    else:
        word = noun + "s"
    return f"{n} {adjective} {word}" if adjective else f"{n} {word}"


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to about ``limit`` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)
    return f"{text[:keep]}... ({len(text) - keep:,} more characters cut)"
