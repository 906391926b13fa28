"""The transparent wrapper: record every attach and extract, change nothing the engine sees.

    attach, extract = wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                                     engine.pop_auxiliary_output_from_pp_tensors, recorder)

The wrapped functions return the identical object and re-raise the identical exception object
(bare ``raise``). On the caller's thread they only read metadata (keys, shapes, dtypes, devices,
contiguity: no device sync, no tensor values) and append one tuple to the recorder. A failure
inside recording is counted by the recorder and never reaches the engine.

Dict snapshots go through ``dict``'s own methods so that a dict subclass sees no extra calls. A
container that is not a dict is never read (any call into it could have effects the engine would
see): its events carry no keys and no tensors.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from pptrace.record import PREFIX, Direction
from pptrace.recorder import Recorder, _qualname

__all__ = ["is_wrapped", "unwrap", "wrap_attach", "wrap_extract", "wrap_transport"]

F = TypeVar("F", bound=Callable[..., Any])
WRAPPED_ATTR = "__pptrace_wrapped__"

_Tensor = torch.Tensor
_dict_keys = dict.keys
_dict_items = dict.items
_dict_get = dict.__getitem__
_islice = itertools.islice
_no_torch_function = torch._C.DisableTorchFunctionSubclass
_startswith = str.startswith  # a str subclass key's own startswith is never called


def _keys(d: Any) -> tuple[Any, ...]:
    return tuple(_dict_keys(d)) if isinstance(d, dict) else ()


def _meta(v: Any) -> Any:
    if isinstance(v, _Tensor):
        if type(v) is _Tensor:
            return (v.shape, v.dtype, v.device, v.is_contiguous())
        # A tensor subclass's __torch_function__ is user code that the engine never calls.
        with _no_torch_function():
            return (v.shape, v.dtype, v.device, v.is_contiguous())
    return type(v)


def _fingerprints(rec: Recorder, values: list[Any]) -> tuple[Any, ...]:
    from pptrace.fingerprint import start

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


def is_wrapped(fn: Any) -> bool:
    """True when ``fn`` is a pptrace wrapper."""
    return hasattr(fn, WRAPPED_ATTR)


def unwrap(fn: F) -> F:
    """Return the function a pptrace wrapper wraps (``fn`` itself when not wrapped)."""
    while hasattr(fn, WRAPPED_ATTR):
        fn = getattr(fn, WRAPPED_ATTR)
    return fn


def wrap_attach(fn: F, recorder: Recorder) -> F:
    """Wrap an attach function (``add_auxiliary_output_to_pp_tensors``)."""
    fn = unwrap(fn)  # never double-wrap
    rec = recorder
    seq = rec.seq[Direction.ATTACH]
    append = rec.append
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.current_thread
    attach = Direction.ATTACH

    @functools.wraps(fn)
    def pptrace_attach(tensors: Any, output: Any) -> Any:
        if not rec.enabled:
            return fn(tensors, output)
        try:
            before = _keys(tensors)
        except Exception as exc:
            rec.internal_error("attach snapshot", exc)
            return fn(tensors, output)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = fn(tensors, output)
        except BaseException as exc:
            try:
                dur = mono_ns() - t0
                after = _keys(tensors)
                new = after[len(before):]
                values = [_dict_get(tensors, k) for k in new]
                items = tuple((k, _meta(v)) for k, v in zip(new, values, strict=True))
                append((attach, next(seq), wall, t0, dur, ident(), type(output), before, after,
                        items, True, (_qualname(type(exc)), str(exc)), rec.dropped, None))
                if rec.flight:
                    rec.request_dump()
            except Exception as inner:
                rec.internal_error("attach record", inner)
            raise
        try:
            dur = mono_ns() - t0
            after = _keys(tensors)
            # One pass over the inserted items, with _meta inlined for plain tensors: on this
            # path a Python call or list per tensor costs about as much as reading its
            # metadata (benchmarks/bench_hotpath.py). A non-dict container gave no keys.
            items = tuple([(k, (v.shape, v.dtype, v.device, v.is_contiguous())
                            if type(v) is _Tensor else _meta(v))
                           for k, v in _islice(_dict_items(tensors), len(before), None)]
                          ) if after else ()
            fps = _fingerprints(rec, [_dict_get(tensors, k) for k, _ in items]
                                ) if rec.fingerprint else None
            append((attach, next(seq), wall, t0, dur, ident(), type(output), before, after,
                    items, result is None, None, rec.dropped, fps))
            if rec.rank_pending:  # the first calls only: the engine's process group is up now
                rec.learn_rank()
        except Exception as inner:
            rec.internal_error("attach record", inner)
        return result

    setattr(pptrace_attach, WRAPPED_ATTR, fn)
    return pptrace_attach  # type: ignore[return-value]


def wrap_extract(fn: F, recorder: Recorder, prefix: str = PREFIX) -> F:
    """Wrap an extract function (``pop_auxiliary_output_from_pp_tensors``)."""
    fn = unwrap(fn)
    rec = recorder
    seq = rec.seq[Direction.EXTRACT]
    append = rec.append
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.current_thread
    extract = Direction.EXTRACT

    @functools.wraps(fn)
    def pptrace_extract(tensors: Any, observer: Any) -> Any:
        if not rec.enabled:
            return fn(tensors, observer)
        try:
            if isinstance(tensors, dict):
                items = tuple([(k, (v.shape, v.dtype, v.device, v.is_contiguous())
                                if type(v) is _Tensor else _meta(v))
                               for k, v in _dict_items(tensors)
                               if isinstance(k, str) and _startswith(k, prefix)])
                before = tuple(_dict_keys(tensors))
            else:
                items, before = (), ()
            fps = _fingerprints(rec, [v for k, v in _dict_items(tensors)
                                      if isinstance(k, str) and _startswith(k, prefix)]
                                ) if rec.fingerprint and items else None
        except Exception as exc:
            rec.internal_error("extract snapshot", exc)
            return fn(tensors, observer)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = fn(tensors, observer)
        except BaseException as exc:
            try:
                dur = mono_ns() - t0
                append((extract, next(seq), wall, t0, dur, ident(), type(observer), before,
                        _keys(tensors), items, True, (_qualname(type(exc)), str(exc)),
                        rec.dropped, fps))
                if rec.flight:
                    rec.request_dump()
            except Exception as inner:
                rec.internal_error("extract record", inner)
            raise
        try:
            dur = mono_ns() - t0
            append((extract, next(seq), wall, t0, dur, ident(), type(observer), before,
                    _keys(tensors), items, result is None, None, rec.dropped, fps))
            if rec.rank_pending:  # the first calls only: the engine's process group is up now
                rec.learn_rank()
        except Exception as inner:
            rec.internal_error("extract record", inner)
        return result

    setattr(pptrace_extract, WRAPPED_ATTR, fn)
    return pptrace_extract  # type: ignore[return-value]


def wrap_transport(attach: F, extract: Callable[..., Any], recorder: Recorder) -> tuple[F, Any]:
    """Wrap an (attach, extract) pair with one recorder."""
    return wrap_attach(attach, recorder), wrap_extract(extract, recorder)
