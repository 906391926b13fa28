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
    seen: set[tuple[str, str]] = set()
    for cls in type(node).__mro__:
        raw: list[BindingType] = list(cls.__dict__.get("BINDINGS", ()))
        if cls.__module__.startswith("textual."):
            continue  # Textual's own inherited bindings are listed by the widget that uses them
        for item in raw:
            binding = item if isinstance(item, Binding) else Binding(*item)
            for b in Binding.make_bindings([binding]):
                if (b.key, b.action) not in seen:  # one key may carry two actions (check_action)
                    seen.add((b.key, b.action))
                    yield b


def catalog(nodes: Iterable[DOMNode]) -> list[Entry]:
    """The bindings of these nodes (own classes only, not Textual's bases), in order."""
    out: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for node in nodes:
        for b in _bindings(node):
            if (b.key, b.description) not in seen:  # a screen may repeat an app key for its footer
                seen.add((b.key, b.description))
                out.append(Entry(node, b))
    return out
