"""Reading the values of a tensor dict into a raw record's items, off the wrappers' inlined loops.

The wrappers' success paths read plain tensors inline (``pptrace.record.wrapper``); everything
else comes here: the general form of a record's items (any value, a tensor subclass, a sparse or
nested tensor), the flat form over pairs already held (an attach's inserted items on a cold path,
a learning extract's removed ones), and the pending content fingerprints. Only metadata is read
(shape, dtype, device, contiguity: no device sync, no tensor values), and no user code runs: a
subclass's ``__torch_function__`` is disabled while it is read.

    items = flat([(key, tensor), ...])    # [key, shape, dtype, device, contiguous, ...]
    items = general(pairs)                # ((key, meta), ...) for any values
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from pptrace.record.convert import Unreadable
from pptrace.record.recorder import Recorder

__all__ = ["fingerprints", "flat", "general", "inserted_items", "meta", "removed", "under"]

_Tensor = torch.Tensor
_dict_items = dict.items
_islice = itertools.islice
_no_torch_function = torch._C.DisableTorchFunctionSubclass
_startswith = str.startswith  # a str subclass key's own startswith is never called


def meta(v: Any) -> Any:
    """A value's metadata as a raw record holds it: (shape, dtype, device, contiguous) for a
    tensor, an ``Unreadable`` for one that cannot be read as strided, else the value's type."""
    if isinstance(v, _Tensor):
        try:
            if type(v) is _Tensor:
                return (v.shape, v.dtype, v.device, v.is_contiguous())
            # A tensor subclass's __torch_function__ is user code that the engine never calls.
            with _no_torch_function():
                return (v.shape, v.dtype, v.device, v.is_contiguous())
        except Exception:
            return _unreadable(v)
    return type(v)


def _unreadable(v: Any) -> Unreadable:
    """The marker of a tensor whose metadata cannot be read as a strided one's (sparse, nested):
    its event is then counted as lost, saying why (``pptrace.record.convert.Unreadable``)."""
    try:
        with _no_torch_function():
            layout, nested = v.layout, v.is_nested
        return Unreadable(f"{'nested, ' if nested else ''}layout {layout}")
    except Exception as exc:
        return Unreadable(f"its metadata cannot be read ({type(exc).__name__})")


def general(pairs: Iterable[tuple[Any, Any]]) -> tuple[tuple[Any, Any], ...]:
    """((key, meta), ...) for any values: the general form of a raw record's items."""
    return tuple([(k, meta(v)) for k, v in pairs])


def flat(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """Plain tensors flat in one list (the recorder thread makes the pairs: see
    ``pptrace.model.raw``), anything else in the general form."""
    items: list[Any] = []
    for k, v in pairs:
        if type(v) is not _Tensor:
            return general(pairs)
        try:
            items += (k, v.shape, v.dtype, v.device, v.is_contiguous())
        except Exception:  # a sparse or nested tensor: the general form marks it
            return general(pairs)
    return items


def inserted_items(tensors: dict[Any, Any], start: int) -> Any:
    """An attach's inserted items (the dict's from ``start`` on), in the flat form if it can."""
    return flat(list(_islice(_dict_items(tensors), start, None)))


def removed(pairs: Sequence[tuple[Any, Any]], after: Sequence[Any]) -> list[tuple[Any, Any]]:
    """The (key, value) pairs whose keys are gone from the dict, in dict order.

    Keys are compared by identity: the dict keeps its own key objects, and no user ``__eq__``
    or ``__hash__`` runs here."""
    kept = {id(k) for k in after}
    return [(k, v) for k, v in pairs if id(k) not in kept]


def under(pairs: Sequence[tuple[Any, Any]], prefix: str | None) -> Any:
    """The items of the pairs whose keys start with ``prefix`` (none while it is not learnt)."""
    if not prefix:
        return ()
    return flat([(k, v) for k, v in pairs if isinstance(k, str) and _startswith(k, prefix)])


def fingerprints(rec: Recorder, values: list[Any]) -> tuple[Any, ...]:
    """Pending content fingerprints of the values (None for a non-tensor or a failed one)."""
    from pptrace.record.fingerprint import start

    out = []
    for v in values:
        fp = None
        if isinstance(v, _Tensor):
            # One tensor that cannot be hashed costs its fingerprint, not the whole event.
            try:
                fp = start(v)
            except Exception as exc:
                rec.internal_error("fingerprint", exc)
        out.append(fp)
    return tuple(out)
