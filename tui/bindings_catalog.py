"""Every key binding the viewer has, gathered from the widgets themselves.

The help screen and the command palette are both generated from this list, so neither can drift
from the bindings that actually run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.binding import Binding, BindingType
from textual.dom import DOMNode

__all__ = ["Entry", "catalog"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One binding and the node whose action it runs."""

    node: DOMNode
    binding: Binding

    @property
    def where(self) -> str:
        """The part of the viewer the binding belongs to."""
        return getattr(self.node, "HELP_GROUP", type(self.node).__name__)


def _bindings(node: DOMNode) -> Iterable[Binding]:
    seen: set[str] = set()
    for cls in type(node).__mro__:
        raw: list[BindingType] = list(cls.__dict__.get("BINDINGS", ()))
        if cls.__module__.startswith("textual."):
            continue  # Textual's own inherited bindings are listed by the widget that uses them
        for item in raw:
            binding = item if isinstance(item, Binding) else Binding(*item)
            for b in Binding.make_bindings([binding]):
                if b.key not in seen:
                    seen.add(b.key)
                    yield b


def catalog(nodes: Iterable[DOMNode]) -> list[Entry]:
    """The bindings of these nodes (own classes only, not Textual's bases), in order."""
    out: list[Entry] = []
    for node in nodes:
        out.extend(Entry(node, b) for b in _bindings(node))
    return out
