"""Where a transport's two traced arguments are in a call, worked out once when it is wrapped.

    slots = bind(fn)                        # at patch time: one inspect.signature
    tensors, subject = slots.pick(args, kwargs)   # per unusual call: a few comparisons

For a transport that is not a plain two-parameter function, pptrace's wrapper takes ``*args,
**kwargs`` and hands them to the transport exactly as the caller passed them (positional,
keyword, extra parameters, omitted defaults), so it behaves the same wrapped and bare, whatever
its signature (``pptrace.record.wrapper``). To record, a wrapper needs only two of those
arguments: the tensor dict (the transport's first parameter) and the output or observer (its
second). A call made the common way, two positional arguments, has them in place; any other call
goes through ``Slots.pick``, which reads them where Python would bind them, without calling
``inspect`` again.

A call that does not bind the two (one missing, or given twice) gets ``None`` from ``pick``: the
wrapper then only calls the transport, which raises its own ``TypeError`` as bare, and records
nothing (there is no dict to describe). A call that binds the two but that the transport refuses
for another argument is recorded as the failed call it is, with the transport's ``TypeError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MISSING", "Slot", "Slots", "bind"]

#: No default: the caller must pass the argument.
MISSING: Any = object()

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True, slots=True)
class Slot:
    """One traced parameter: its position (None: keyword-only), its name (None: positional
    only) and its default (``MISSING``: none)."""

    index: int | None
    name: str | None
    default: Any = MISSING

    def read(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The argument bound to this parameter in the call, else its default (or MISSING)."""
        if self.index is not None and self.index < len(args):
            if self.name is not None and self.name in kwargs:
                return MISSING  # given twice: the transport raises its own TypeError
            return args[self.index]
        if self.name is not None and self.name in kwargs:
            return kwargs[self.name]
        return self.default


@dataclass(frozen=True, slots=True)
class Slots:
    """The transport's tensor-dict parameter and its output/observer parameter."""

    tensors: Slot
    subject: Slot

    @property
    def standard(self) -> bool:
        """True when two positional arguments are (tensors, subject): the C wrapper's case."""
        return self.tensors.index == 0 and self.subject.index == 1

    def pick(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """(tensors, subject) as the call binds them, or None when the call cannot bind."""
        tensors = self.tensors.read(args, kwargs)
        subject = self.subject.read(args, kwargs)
        if tensors is MISSING or subject is MISSING:
            return None
        return tensors, subject


#: A transport whose signature cannot be read (a builtin): its first two positional arguments.
POSITIONAL = Slots(Slot(0, None), Slot(1, None))


def bind(fn: Callable[..., Any]) -> Slots:
    """The slots of ``fn``'s first two parameters (``POSITIONAL`` when its signature is
    unreadable); never raises."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return POSITIONAL
    found: list[Slot] = []
    position = 0
    for p in params:
        if len(found) == 2:
            break
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            break
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            # What is left of the two arrives in *args, by position only.
            found += [Slot(position + i, None) for i in range(2 - len(found))]
            break
        index = position if p.kind in _POSITIONAL else None
        name = p.name if p.kind in _NAMED else None
        default = MISSING if p.default is inspect.Parameter.empty else p.default
        found.append(Slot(index, name, default))
        if index is not None:
            position += 1
    if len(found) < 2:
        # Fewer than two parameters: no call binds both, so none is recorded.
        found += [Slot(None, None)] * (2 - len(found))
    return Slots(found[0], found[1])
