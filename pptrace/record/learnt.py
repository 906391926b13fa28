"""The extract wrapper for a transport whose key prefix was not given: it records what it removed.

    attach, extract = wrap_learning(my_transport.attach_aux, my_transport.pop_aux, recorder)

A target without ``@PREFIX`` that is no engine's own transport (``pptrace.model.target``) has no
prefix to pick the auxiliary keys by before the call, and a process that only extracts (stage 0)
never sees the attach that inserted them. The contract says what an extract does with them on
success: it deletes exactly the auxiliary keys from the dict. So this wrapper holds the dict's
items (references, no metadata read) across the call, and records as the call's tensors the
values under the keys the call removed, in dict order; the recorder learns the process's prefix
from them (``pptrace.model.target.learn_prefix``), as from an attach's inserted keys. A call that
raised removed nothing: it records the values under the prefix learnt so far, if any.

The metadata of a removed value is read after the call (the value itself is held, so it is the
same tensor; only an observer that resized it in place would show its new shape). Everything else
is ``pptrace.record.wrapper``'s: the same entries, the same exception and return objects, and a
failure inside recording is counted and never reaches the engine. Python only (the native
reader's C wrapper picks keys by a prefix): a transport that wants it gives ``@PREFIX``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pptrace.model import raw as R
from pptrace.model.records import Direction
from pptrace.record import wrapper as W
from pptrace.record.binding import bind
from pptrace.record.convert import qualname
from pptrace.record.recorder import Recorder

__all__ = ["wrap_extract_learning", "wrap_learning"]

F = TypeVar("F", bound=Callable[..., Any])


def _removed(pairs: tuple[tuple[Any, Any], ...], after: tuple[Any, ...]) -> list[Any]:
    """The (key, value) pairs whose keys are gone from the dict, in dict order.

    Keys are compared by identity: the dict keeps its own key objects, and no user ``__eq__``
    or ``__hash__`` runs here."""
    kept = {id(k) for k in after}
    return [(k, v) for k, v in pairs if id(k) not in kept]


def _described(pairs: list[tuple[Any, Any]]) -> Any:
    """Plain tensors flat in one list, anything else in the general form (as the wrappers)."""
    items: list[Any] = []
    for k, v in pairs:
        if type(v) is not W._Tensor or type(k) is not str:
            return W._items(pairs)
        try:
            items += (k, v.shape, v.dtype, v.device, v.is_contiguous())
        except Exception:  # sparse or nested: the general form marks it
            return W._items(pairs)
    return items


def _under(pairs: tuple[tuple[Any, Any], ...], prefix: str | None) -> Any:
    """The items under ``prefix`` (none while it is not learnt)."""
    if not prefix:
        return ()
    return _described([(k, v) for k, v in pairs
                       if isinstance(k, str) and W._startswith(k, prefix)])


def wrap_extract_learning(fn: F, recorder: Recorder) -> F:
    """Wrap an extract function whose key prefix is to be learnt (see the module doc)."""
    fn = W.unwrap(fn)
    rec = recorder
    seq = rec.seq[Direction.EXTRACT]
    time_ns, mono_ns = time.time_ns, time.monotonic_ns
    extract = Direction.EXTRACT
    slots = bind(fn)
    exact = W._exact_names(fn)
    call = fn if exact else W._through

    def pptrace_extract_learning(tensors: Any, observer: Any) -> Any:
        if not rec.enabled:
            return call(tensors, observer)
        try:
            is_dict = isinstance(tensors, dict)
            pairs = tuple(W._dict_items(tensors)) if is_dict else ()
            before = tuple(k for k, _ in pairs)
        except Exception as exc:
            rec.internal_error("extract snapshot", exc)
            return call(tensors, observer)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = call(tensors, observer)
        except BaseException as exc:
            _failed(tensors, observer, before, pairs, wall, t0, mono_ns() - t0, exc)
            raise
        try:
            dur = mono_ns() - t0
            after = tuple(W._dict_keys(tensors)) if is_dict else ()
            gone = _removed(pairs, after)
            items = _described(gone)
            fps = W._fingerprints(rec, [v for _, v in gone]) if rec.fingerprint else None
            raw = R.make(direction=extract, seq=next(seq), wall_ns=wall, mono_ns=t0,
                         duration_ns=dur, thread=W._thread(), subject=type(observer),
                         keys_before=before, keys_after=after, items=items,
                         returned_none=result is None, error=None, dropped=rec.dropped,
                         fingerprints=fps)
            if rec.enabled:  # shutdown may have begun while fn ran
                rec.add(raw)
            if rec.rank_pending:
                rec.learn_rank()
        except Exception as inner:
            rec.internal_error("extract record", inner)
        return result

    def _failed(tensors: Any, observer: Any, before: tuple[Any, ...],
                pairs: tuple[tuple[Any, Any], ...], wall: int, t0: int, dur: int,
                exc: BaseException) -> None:
        """Record an extract the engine's function raised in (then the caller re-raises)."""
        try:
            items = _under(pairs, rec.prefix)
            rec.add(R.make(direction=extract, seq=next(seq), wall_ns=wall, mono_ns=t0,
                           duration_ns=dur, thread=W._thread(), subject=type(observer),
                           keys_before=before, keys_after=W._keys(tensors), items=items,
                           returned_none=True, error=(qualname(type(exc)), str(exc)),
                           dropped=rec.dropped, fingerprints=None))
            if rec.flight:
                rec.request_dump()
        except Exception as inner:
            rec.internal_error("extract record", inner)

    return W._entry(fn, slots, exact, pptrace_extract_learning, rec)  # type: ignore[no-any-return]


def wrap_learning(attach: F, extract: Callable[..., Any], recorder: Recorder) -> tuple[F, Any]:
    """Wrap an (attach, extract) pair whose key prefix the recorder learns: the attach as any
    (``wrap_attach`` records what it inserted), the extract by what it removed."""
    return W.wrap_attach(attach, recorder), wrap_extract_learning(extract, recorder)


# pptrace's own by identity (is_wrapped, unwrap): the body's code, as the wrapper module's.
W._OWN_CODES += [c for c in wrap_extract_learning.__code__.co_consts
                 if type(c) is type(wrap_extract_learning.__code__)
                 and c.co_name == "pptrace_extract_learning"]
