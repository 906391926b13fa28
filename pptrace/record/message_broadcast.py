"""Record a broadcast of a tensor dict: one source, and a receive on every other member.

A broadcast (SGLang's and vLLM's ``GroupCoordinator.broadcast_tensor_dict``) is one call that
every member of a group makes: the source passes its dict, the others get the source's back.
Each call is recorded by what it is on that process: on the source a send to the whole group
(``peer`` -1, ``group`` its members' global ranks), on each other member a receive from the
source, its ``begin`` appended *before* the call blocks (so a member that hangs in a broadcast
leaves what it waited for, and from whom) and its ``end`` with what arrived. Broadcast sends
and receives are numbered by counters of their own (``MessageLog.bseq``), apart from the
process's point-to-point ones, so that a point-to-point channel's seqs stay the channel's own
(a cut channel is paired by them); the analyzer tells broadcasts apart by their ``group``
(``pptrace.analyze.broadcasts``).

The guarantees are ``pptrace.record.messages``' wrappers': the same return object, the same
exception object, no device synchronisation, a failure inside pptrace counted and contained.
A broadcast dict is never counted as carrying an attach (``carries_attach``): the dict that a
TP broadcast hands on is sent to the next stage too, and that send is the one that carries it.

A member's *asynchronous* receive of a broadcast (vLLM's V1 model runner posts the sampled-token
broadcast with ``async_op=True`` and keeps the work handle on itself, to wait it at the next
step's input preparation) is wrapped by ``wrap_broadcast_irecv``: after the call, a work handle
that was not there before is a receive posted, whose ``begin`` (at the call's start) is
appended then; the handle is replaced, on the same attribute, by a thin proxy whose ``wait``
appends the ``end`` with what the posted buffers hold once the wait returned (the caller's own
wait, on the caller's thread: pptrace never waits early). Everything else is the handle's own.
A call that posts nothing (the engine skipped the broadcast) records nothing.

    bcast = wrap_broadcast(link.broadcast_tensor_dict, log, group_of, dict_arg=0)
    post = wrap_broadcast_irecv(runner_cls.receive, log, group_of, "work", payload_of)
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from pptrace.engines.spec import GroupOf, Payload
from pptrace.model.messages import MSG_TYPE_KEY
from pptrace.record.messages import (
    _RECV,
    _SEND,
    MessageLog,
    _dict_get,
    _error,
    _fingerprints,
    _values,
)

__all__ = ["wrap_broadcast", "wrap_broadcast_irecv"]


def wrap_broadcast(fn: Callable[..., Any], log: MessageLog, group_of: GroupOf,
                   dict_arg: int = 1, dict_name: str = "tensor_dict",
                   payload_of: Payload | None = None) -> Callable[..., Any]:
    """Wrap a broadcast of a tensor dict; ``group_of(args, kwargs)`` names its group, the
    source and the caller (None: no wire traffic, not recorded); the source's dict is
    positional argument ``dict_arg`` (or keyword ``dict_name``), or what ``payload_of`` reads
    (a call on bare tensors)."""
    rec = log.rec
    sends, recvs = log.bseq[_SEND], log.bseq[_RECV]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_broadcast(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            found = group_of(args, kwargs)
            if found is not None:
                ranks, src, me = found
                group = tuple(int(r) for r in ranks)
                source = me == src
                wall, t0, tid = time_ns(), mono_ns(), ident()
                if source:
                    d = (payload_of(args, kwargs) if payload_of is not None else
                         args[dict_arg] if len(args) > dict_arg else kwargs.get(dict_name))
                    where = (-1, None, 1)
                    values = _values(d)
                    kind = _dict_get(d, MSG_TYPE_KEY) if isinstance(d, dict) else None
                    fps = _fingerprints(log, d) if rec.fingerprint else None
                else:
                    where = (group[src] if 0 <= src < len(group) else -1, None, 1)
                    n = next(recvs)
                    log.add((_RECV, "begin", n, wall, t0, -1, tid, *where, "", False, False,
                             None, None, None, None, group))
        except Exception as exc:
            rec.internal_error("message broadcast begin", exc)
            found = None
        if found is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            try:
                if source:
                    log.add((_SEND, "end", next(sends), wall, t0, mono_ns() - t0, tid, *where,
                             "", False, False, None, fps, _error(exc), kind, group, *values))
                else:
                    log.add((_RECV, "end", n, wall, t0, mono_ns() - t0, tid, *where, "", False,
                             False, None, None, _error(exc), None, group))
            except Exception as inner:
                rec.internal_error("message broadcast record", inner)
            raise
        try:
            dur = mono_ns() - t0
            if source:
                log.add((_SEND, "end", next(sends), wall, t0, dur, tid, *where, "", False,
                         False, None, fps, None, kind, group, *values))
            else:
                got = _dict_get(result, MSG_TYPE_KEY) if isinstance(result, dict) else None
                log.add((_RECV, "end", n, wall, t0, dur, tid, *where, "", False, False, None,
                         _fingerprints(log, result) if rec.fingerprint else None, None, got,
                         group, *_values(result)))
        except Exception as exc:
            rec.internal_error("message broadcast record", exc)
        return result

    return pptrace_broadcast


class _Work:
    """A posted receive's work handle: ``wait`` appends the receive's end once; everything else
    is the handle's own."""

    __slots__ = ("_done", "_work")

    def __init__(self, work: Any, done: Callable[[BaseException | None], None]) -> None:
        self._work = work
        self._done: Callable[[BaseException | None], None] | None = done

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException as exc:
            self._finish(exc)
            raise
        self._finish(None)
        return result

    def _finish(self, exc: BaseException | None) -> None:
        done, self._done = self._done, None
        if done is not None:
            done(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def wrap_broadcast_irecv(fn: Callable[..., Any], log: MessageLog, group_of: GroupOf,
                         work: str, payload_of: Payload) -> Callable[..., Any]:
    """Wrap a call that posts an asynchronous receive of a broadcast and leaves its work handle
    in ``args[0].<work>`` (see the module doc); ``payload_of(args, kwargs)``, read after the
    call, names the buffers it receives into."""
    rec = log.rec
    recvs = log.bseq[_RECV]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_broadcast_irecv(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            found = group_of(args, kwargs)
            owner = args[0]
            before = getattr(owner, work, None)
            wall, t0, tid = time_ns(), mono_ns(), ident()
        except Exception as exc:
            rec.internal_error("message broadcast irecv begin", exc)
            found = None
        if found is None:
            return fn(*args, **kwargs)
        result = fn(*args, **kwargs)  # it raised: nothing known posted, nothing recorded
        try:
            posted = getattr(owner, work, None)
            if posted is None or posted is before:  # the engine skipped the broadcast
                return result
            ranks, src, _ = found
            group = tuple(int(r) for r in ranks)
            where = (group[src] if 0 <= src < len(group) else -1, None, 1)
            d = payload_of(args, kwargs)
            n = next(recvs)
            log.add((_RECV, "begin", n, wall, t0, -1, tid, *where, "", False, False, None,
                     None, None, None, group))

            def done(exc: BaseException | None) -> None:
                try:
                    if exc is not None:
                        log.add((_RECV, "end", n, wall, t0, mono_ns() - t0, tid, *where, "",
                                 False, False, None, None, _error(exc), None, group))
                        return
                    log.add((_RECV, "end", n, wall, t0, mono_ns() - t0, tid, *where, "",
                             False, False, None,
                             _fingerprints(log, d) if rec.fingerprint else None, None, None,
                             group, *_values(d)))
                except Exception as inner:
                    rec.internal_error("message broadcast irecv record", inner)

            setattr(owner, work, _Work(posted, done))
        except Exception as exc:
            rec.internal_error("message broadcast irecv record", exc)
        return result

    return pptrace_broadcast_irecv
