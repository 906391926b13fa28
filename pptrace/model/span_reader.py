"""Typed access to one span's attributes, with what the span lacks taken from its resource.

The schema's decoders (``pptrace.model.schema``) read every attribute through a ``SpanReader``:
a value of the wrong type is one ``SchemaVersionError`` line that names the attribute (or the
resource attribute it came from), never a ``KeyError`` or a traceback. It imports the standard
library only.

    r = SpanReader(attrs, "rank0.jsonl:3: ", resource, {"pptrace.pid": "process.pid"})
    r.integer("pptrace.pid")       # the span's, else the resource's ``process.pid``
    r.shapes("pptrace.tensor.shapes", 2)   # [(8, 5), ()]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pptrace.model.errors import SchemaVersionError

__all__ = ["SpanReader"]


class SpanReader:
    """Typed access to one span's attributes; every mismatch is a one-line SchemaVersionError.

    What the span lacks of ``fill`` (span key -> resource key) comes from ``resource``.
    """

    def __init__(self, attrs: Mapping[str, Any], where: str,
                 resource: Mapping[str, Any] | None = None,
                 fill: Mapping[str, str] | None = None) -> None:
        self.attrs = attrs
        self.where = where
        self.taken: dict[str, str] = {}  # span key -> the resource key it was taken from
        if resource and fill:
            merged = None
            for key, res_key in fill.items():
                if key not in attrs and res_key in resource:
                    if merged is None:
                        merged = dict(attrs)
                    merged[key] = resource[res_key]
                    self.taken[key] = res_key
            if merged is not None:
                self.attrs = merged

    def bad(self, key: str, want: str) -> SchemaVersionError:
        """The one-line error for ``key`` not being ``want``."""
        got = type(self.attrs.get(key)).__name__
        res_key = self.taken.get(key)
        what = f"attribute {key!r}" if res_key is None else f"resource attribute {res_key!r}"
        return SchemaVersionError(f"{self.where}{what} should be {want}, found {got}")

    def integer(self, key: str, default: int | None = None) -> int:
        """An int attribute (a bool is not one)."""
        value = self.attrs.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        """An int attribute, or None when absent."""
        return None if key not in self.attrs else self.integer(key)

    def string(self, key: str, default: str | None = None) -> str:
        """A str attribute."""
        value = self.attrs.get(key, default)
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def boolean(self, key: str, default: bool | None = None) -> bool:
        """A bool attribute."""
        value = self.attrs.get(key, default)
        if not isinstance(value, bool):
            raise self.bad(key, "a boolean")
        return value

    def array(self, key: str, kind: type, n: int | None = None,
              default: list[Any] | None = None) -> list[Any]:
        """A list attribute of ``kind`` items (``n`` of them, when given); ``default`` (else
        empty) when absent."""
        value = self.attrs.get(key, [] if default is None else default)
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, kind) and not (kind is int and isinstance(v, bool)) for v in value
        ):
            raise self.bad(key, f"a list of {kind.__name__}")
        if n is not None and len(value) != n:
            raise SchemaVersionError(
                f"{self.where}attribute {key!r} has {len(value)} items, expected {n}"
            )
        return list(value)

    def shapes(self, key: str, n: int) -> list[tuple[int, ...]]:
        """A list of ``n`` tensor shapes, each written as ``"8,5"`` (``""`` for a 0-d tensor)."""
        out = []
        for text in self.array(key, str, n):
            try:
                out.append(tuple(int(p) for p in text.split(",")) if text else ())
            except ValueError:
                raise SchemaVersionError(f"{self.where}bad tensor shape {text!r:.40}") from None
        return out
