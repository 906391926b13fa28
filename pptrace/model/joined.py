"""Schema version 3's joined string arrays: a list of strings written as one string.

In OTLP/JSON every element of a string array costs ``{"stringValue":...}`` around it (17
characters), more than most of pptrace's values (``4,4``, ``int64``, a key): a trace file of
version 3 writes such an array as one string, its elements joined by ``SEPARATOR``, wherever
that gives the list back exactly (``joinable``: at least one element, none holding the
separator). A reader splits a string it finds under a joined key back into the list; an array
under that key is read as it is, so a list that could not be joined reads the same. Spans sent
to a collector are never joined (version 1): they keep their arrays, as Jaeger shows them.

    attrs = join(attrs, KEYS)         # {"pptrace.tensor.dtypes": "float32 int64", ...}
    attrs = split(attrs, KEYS)        # {"pptrace.tensor.dtypes": ["float32", "int64"], ...}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SEPARATOR", "join", "joinable", "split"]

#: What joins a list's elements: one character JSON writes as it is, and found in none of the
#: usual values (shapes ``8,5``, dtypes, devices, fingerprints, tensor dict keys).
SEPARATOR = " "


def joinable(values: Sequence[Any]) -> bool:
    """Whether ``values`` is a list of strings that one joined string gives back exactly."""
    return bool(values) and all(type(v) is str and SEPARATOR not in v for v in values)


def join(attrs: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """``attrs`` with each joinable list under one of ``keys`` written as one string (in
    place)."""
    for key in keys.intersection(attrs):
        value = attrs[key]
        if type(value) is list and joinable(value):
            attrs[key] = SEPARATOR.join(value)
    return attrs


def split(attrs: Mapping[str, Any], keys: frozenset[str]) -> Mapping[str, Any]:
    """``attrs`` with each string under one of ``keys`` split back into its list (a copy, or
    ``attrs`` itself when nothing is joined)."""
    found = [key for key in keys.intersection(attrs) if type(attrs[key]) is str]
    if not found:
        return attrs
    out = dict(attrs)
    for key in found:
        out[key] = out[key].split(SEPARATOR)
    return out
