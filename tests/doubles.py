"""The test doubles for the engine's user objects: one auxiliary output, one sampling observer.

    from tests.doubles import Observer, Output

    attach(tensors, Output(2))                    # t0, t1: two small float tensors
    attach(tensors, Output({"scores": scores}))   # exactly this mapping
    assert extract(tensors, Observer()) == {"t0": ..., "t1": ...}   # a rebuilt output
    assert extract(tensors, Observer(SENTINEL)) is SENTINEL

The transport calls ``to_pp_tensors`` on an output and ``from_pp_tensors`` on an observer; these
are the plain PP-capable versions every test shares. The call-logging doubles that side-by-side
parity runs compare live in ``tests/helpers_core.py`` (their qualified names are part of what the
span tests assert).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["REBUILD", "NotPP", "Observer", "Output", "RaisingObserver", "Rebuilt"]


class Output:
    """A PP-capable auxiliary output: ``to_pp_tensors`` hands back the same mapping every time.

    ``Output(n)`` holds ``n`` small float tensors named ``t0`` .. ``t{n-1}`` (``t{i}`` is full of
    ``i``); ``Output(mapping)`` holds that very mapping (not a copy).
    """

    def __init__(self, named: Mapping[Any, Any] | int = 2) -> None:
        if isinstance(named, int):
            named = {f"t{i}": torch.full((2, 3), float(i)) for i in range(named)}
        self.named = named

    def to_pp_tensors(self) -> Any:
        return self.named


class Rebuilt(dict):  # type: ignore[type-arg]
    """What an ``Observer()`` rebuilds: a plain copy of the tensors it received, and an output
    that can travel again (``named``, ``to_pp_tensors``), as the engine's observer rebuilds one."""

    @property
    def named(self) -> Rebuilt:
        return self

    def to_pp_tensors(self) -> Rebuilt:
        return self


REBUILD: Any = object()  # Observer's default: return a Rebuilt of what was received


class Observer:
    """A PP-capable observer returning ``result``: by default a ``Rebuilt`` of what it received
    (``None`` is a valid result). It keeps nothing, so leak and reference tests can use it."""

    def __init__(self, result: Any = REBUILD) -> None:
        self.result = result

    def from_pp_tensors(self, tensors: Any) -> Any:
        return Rebuilt(tensors) if self.result is REBUILD else self.result


class RaisingObserver:
    """An observer whose ``from_pp_tensors`` raises its own error."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def from_pp_tensors(self, tensors: Any) -> Any:
        raise self.exc


class NotPP:
    """Neither an auxiliary output nor an observer: no ``to_pp_tensors``, no ``from_pp_tensors``."""
