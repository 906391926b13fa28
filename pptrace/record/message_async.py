"""Record an asynchronous receive of a tensor dict: it ends when the caller has waited for it.

An engine's asynchronous receive (vLLM's ``GroupCoordinator.irecv_tensor_dict``) returns
``(dict, handles, postprocess)`` before its tensors arrive: each handle's ``wait()`` lets a
tensor land, and each postprocess step re-assembles a TP-sliced one (an all-gather written back
into the dict). Recording the dict at return would record empty buffers and slices. So the
wrapper records a ``begin`` before the call (it blocks on the metadata), replaces each handle
and each postprocess step *inside the same lists* by a thin proxy (the tuple, the dict and the
lists stay the caller's objects), and records the ``end`` with what the dict holds once the
last handle has been waited and the last step run, on the caller's thread, at the moment the
caller itself waits: never earlier, and never blocking. A receive with no handle and no step
(metadata only) ends at once. One whose handles are never waited stays a ``begin``: what it
waited for and from whom, as a blocking receive that hangs.

    recv = wrap_irecv(coordinator.irecv_tensor_dict, log, peer_of)
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from pptrace.model.messages import MSG_TYPE_KEY
from pptrace.record.messages import (
    _RECV,
    MessageLog,
    PeerOf,
    _dict_get,
    _error,
    _fingerprints,
    _values,
)

__all__ = ["wrap_irecv"]


class _Pending:
    """One receive's outstanding handles and steps; ``done`` records its end once."""

    __slots__ = ("head", "left", "lock", "log", "result")

    def __init__(self, log: MessageLog, head: tuple[Any, ...], result: Any, left: int) -> None:
        self.log, self.head, self.result, self.left = log, head, result, left
        self.lock = threading.Lock()

    def done(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left != 0:
                return
        _end(self.log, self.head, self.result)


class _Handle:
    """A handle whose ``wait()`` counts towards its receive's end; everything else is the
    handle's own."""

    __slots__ = ("_handle", "_pending", "_waited")

    def __init__(self, handle: Any, pending: _Pending) -> None:
        self._handle, self._pending, self._waited = handle, pending, False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._handle.wait(*args, **kwargs)
        if not self._waited:
            self._waited = True
            try:
                self._pending.done()
            except Exception as exc:
                self._pending.log.rec.internal_error("message irecv wait", exc)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _step(fn: Callable[[], Any], pending: _Pending) -> Callable[[], Any]:
    ran = [False]

    @functools.wraps(fn)
    def pptrace_postprocess(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if not ran[0]:
            ran[0] = True
            try:
                pending.done()
            except Exception as exc:
                pending.log.rec.internal_error("message irecv postprocess", exc)
        return result

    return pptrace_postprocess


def _end(log: MessageLog, head: tuple[Any, ...], got: Any) -> None:
    n, wall, t0, tid, where = head
    kind = _dict_get(got, MSG_TYPE_KEY) if isinstance(got, dict) and MSG_TYPE_KEY else None
    log.add((_RECV, "end", n, wall, t0, time.monotonic_ns() - t0, tid, *where, "", False,
             False, None, _fingerprints(log, got) if log.rec.fingerprint else None, None, kind, (),
             *_values(got)))


def wrap_irecv(fn: Callable[..., Any], log: MessageLog, peer_of: PeerOf) -> Callable[..., Any]:
    """Wrap an asynchronous receive returning ``(dict, handles, postprocess)`` (see the module
    doc); anything else it returns is recorded as it is, at return."""
    rec = log.rec
    seq = log.seq[_RECV]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_irecv(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            where = peer_of(args, kwargs)
            if where is not None:
                n, wall, t0, tid = next(seq), time_ns(), mono_ns(), ident()
                log.add((_RECV, "begin", n, wall, t0, -1, tid, *where, "", False, False,
                         None, None, None, None, ()))
        except Exception as exc:
            rec.internal_error("message irecv begin", exc)
            where = None
        if where is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            try:
                log.add((_RECV, "end", n, wall, t0, mono_ns() - t0, tid, *where, "", False,
                         False, None, None, _error(exc), None, ()))
            except Exception as inner:
                rec.internal_error("message irecv record", inner)
            raise
        try:
            head = (n, wall, t0, tid, where)
            handles = result[1] if isinstance(result, tuple) and len(result) == 3 else None
            steps = result[2] if handles is not None else None
            if not isinstance(handles, list) or not isinstance(steps, list):
                _end(log, head, result)
                return result
            pending = _Pending(log, head, result[0], len(handles) + len(steps))
            if pending.left == 0:
                _end(log, head, result[0])
                return result
            # In place: the caller's lists, holding proxies (see the module doc).
            handles[:] = [_Handle(h, pending) for h in handles]
            steps[:] = [_step(s, pending) for s in steps]
        except Exception as exc:
            rec.internal_error("message irecv record", exc)
        return result

    return pptrace_irecv
