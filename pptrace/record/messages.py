"""Record the PP message layer: every tensor dict a stage sends or receives, metadata only.

Which layer: SGLang's ``GroupCoordinator.send_tensor_dict`` / ``recv_tensor_dict`` see every
message (proxy and output, whoever calls), the peer (``dst``/``src`` in the PP group, hence its
global rank and PP stage) and the all-gather group that decides which tensors travel as TP slices;
the mixin's ``_pp_recv_typed_dict`` alone knows the kind a receive *expected*, that a message of
another kind was stashed, and that a receive was served from the stash with no wire traffic.
So both are wrapped: the typed receive sets what it expects for this thread, and each wire
receive inside it records expected vs arrived (and ``stashed`` when they differ); a typed receive
that returns without a wire receive is recorded as one ``from_stash`` receive.

The guarantees are the attach wrapper's (``pptrace.record.wrapper``): the same return object, the
same exception object (bare ``raise``), no device synchronisation (shapes, dtypes, device types,
element counts: no values; a fingerprint only when ``Config.fingerprint`` asks for it), and a
failure inside pptrace counted by the recorder (``internal_error``), never raised. A receive's
``begin`` is appended *before* the call blocks: the recorder thread writes it within a flush
interval while the engine waits, so a rank that hangs in a receive leaves in its trace what it
waited for and from whom.

Events wait in a second bounded buffer (``MessageLog``), beside the attach/extract one, and the
recorder's thread hands them to its sink's ``export_messages`` at each flush. A message that
finds the buffer full is dropped and counted (``MessageLog.dropped``); its ``seq`` is never
reused, so a reader sees the gap.

An output send carrying prefixed (auxiliary) keys gets ``carries_attach``: the ordinal, from 0, of
such sends on the process; SGLang sends each attached dict once, in attach order (its
``last_rank_comm_queue`` is FIFO), so ordinal ``n`` is the process's ``n``-th attach that
inserted keys.

    log = MessageLog(recorder)
    restore = patch_methods(GroupCoordinator, log)      # the wheel's class
    ...
    restore()                                           # the exact originals back
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from pptrace.model.messages import MSG_TYPE_KEY, MessageEvent, MessageOp, MessageTensor
from pptrace.model.records import PREFIX, RankInfo
from pptrace.record.convert import qualname
from pptrace.record.recorder import Recorder

__all__ = [
    "MessageLog",
    "Peer",
    "coordinator_recv_peer",
    "coordinator_send_peer",
    "patch_methods",
    "wrap_recv",
    "wrap_send",
    "wrap_typed_recv",
]

_Tensor = torch.Tensor
_dict_items = dict.items
_dict_get = dict.get
_SEND, _RECV = MessageOp.SEND, MessageOp.RECV
_here = threading.local()  # the typed receive in progress on this thread, if any

#: (peer global rank, peer PP stage or None, all-gather group size) of a call, from its
#: arguments; -1 when unknown.
Peer = tuple[int, int | None, int]
PeerOf = Callable[[tuple[Any, ...], dict[str, Any]], Peer]


class MessageLog:
    """One process's message events: a bounded buffer the recorder's thread flushes."""

    def __init__(self, recorder: Recorder, capacity: int | None = None) -> None:
        self.rec = recorder
        self.capacity = capacity if capacity is not None else recorder.config.buffer_size
        self._buf: collections.deque[tuple[Any, ...]] = collections.deque()
        self.seq = {_SEND: itertools.count(), _RECV: itertools.count()}
        self._carries = itertools.count()
        self._lock = threading.Lock()
        self.recorded = self.exported = self.dropped = 0
        recorder.messages = self  # the recorder's thread flushes us with its events

    @property
    def pending(self) -> int:
        """Events waiting to be written."""
        return len(self._buf)

    def add(self, raw: tuple[Any, ...]) -> None:
        """Buffer one raw message event; drop and count it when the buffer is full."""
        self.recorded += 1
        if len(self._buf) < self.capacity:
            self._buf.append(raw)
        else:
            with self._lock:
                self.dropped += 1
            self.rec.warn("message buffer full",
                          f"more than {self.capacity} messages waiting; dropping new ones")

    def take(self) -> list[tuple[Any, ...]]:
        """Everything buffered now, oldest first (the recorder's thread)."""
        out = []
        pop = self._buf.popleft
        for _ in range(len(self._buf)):
            out.append(pop())
        return out

    def flush(self, sink: Any, rank: RankInfo, run_id: str) -> int:
        """Convert what is buffered and hand it to ``sink.export_messages``; return how many
        were written (a sink without the method, or one that fails, loses them, counted)."""
        raws = self.take()
        if not raws:
            return 0
        events = [e for e in (self._convert(r, rank) for r in raws) if e is not None]
        export = getattr(sink, "export_messages", None)
        try:
            if export is None:
                raise TypeError(f"{type(sink).__name__} has no export_messages")
            export(events, rank, run_id)
        except Exception as exc:
            with self._lock:
                self.dropped += len(events)
            self.rec.warn(f"message export failed ({type(exc).__name__})", str(exc))
            return 0
        with self._lock:
            self.exported += len(events)
        return len(events)

    def discard(self) -> None:
        """Count what is buffered as dropped (no sink to write it to)."""
        lost = len(self.take())
        with self._lock:
            self.dropped += lost

    def _convert(self, raw: tuple[Any, ...], rank: RankInfo) -> MessageEvent | None:
        try:
            return convert(raw, rank, self.rec.resolve_fingerprint)
        except Exception as exc:
            self.rec.internal_error("message conversion", exc)
            with self._lock:
                self.dropped += 1
            return None


# --- the raw record and its conversion (on the recorder thread) ------------------------------
# raw: (op, phase, seq, wall_ns, mono_ns, duration_ns, thread_id, peer, peer_pp, gather,
#       expected, stashed, from_stash, carries, items, fingerprints, error)
# items: ((key, type, shape, dtype, device_type, numel, element_size, sliced), ...) in dict order,
#       or None for a call that returned no dict.


def convert(raw: tuple[Any, ...], rank: RankInfo,
            resolve: Callable[[Any], str | None]) -> MessageEvent:
    """A raw message record as a ``MessageEvent`` (the process's own TP rank is the peer's: a
    PP group joins the same TP rank of every stage)."""
    (op, phase, seq, wall, mono, dur, thread_id, peer, peer_pp, gather, expected, stashed,
     from_stash, carries, items, fps, error) = raw
    keys: list[str] = []
    tensors: list[MessageTensor] = []
    kind = ""
    for i, (key, tp, shape, dtype, device, numel, size, sliced) in enumerate(items or ()):
        name = key if type(key) is str else repr(key)
        keys.append(name)
        if name == MSG_TYPE_KEY:
            kind = shape if isinstance(shape, str) else ""
        if tp is None:
            fp = resolve(fps[i]) if fps is not None and fps[i] is not None else None
            tensors.append(MessageTensor(
                key=name, shape=tuple(int(d) for d in shape),
                dtype=str(dtype).removeprefix("torch."), device=device, nbytes=numel * size,
                sliced=sliced, is_tensor=True, fingerprint=fp))
        else:
            tensors.append(MessageTensor(key=name, dtype=qualname(tp), is_tensor=False))
    error_type, error_message = error if error is not None else (None, None)
    return MessageEvent(
        op=op, phase=phase, seq=seq, wall_ns=wall, mono_ns=mono, duration_ns=dur,
        thread_id=thread_id, peer=peer, peer_pp_rank=peer_pp,
        peer_tp_rank=rank.tp_rank if peer >= 0 else None, kind=kind, expected_kind=expected,
        stashed=stashed, from_stash=from_stash, gather_size=gather, carries_attach=carries,
        keys=tuple(keys), tensors=tuple(tensors), error_type=error_type,
        error_message=error_message)


# --- the hot path ------------------------------------------------------------------------------

def _items(d: Any, gather: int) -> tuple[tuple[Any, ...], ...] | None:
    """Each value's metadata, in dict order (``dict``'s own methods: a subclass sees no call)."""
    if not isinstance(d, dict):
        return None
    out: list[tuple[Any, ...]] = []
    for k, v in _dict_items(d):
        if isinstance(v, _Tensor):
            n = v.numel()
            out.append((k, None, v.shape, v.dtype, v.device.type, n, v.element_size(),
                        gather > 1 and n > 0 and n % gather == 0))
        elif k == MSG_TYPE_KEY and type(v) is str:
            out.append((k, str, v, None, "", 0, 0, False))  # the kind rides in the shape slot
        else:
            out.append((k, type(v), (), None, "", 0, 0, False))
    return tuple(out)


def _fingerprints(log: MessageLog, d: Any) -> tuple[Any, ...] | None:
    if not log.rec.fingerprint or not isinstance(d, dict):
        return None
    from pptrace.record.fingerprint import start

    out = []
    for v in d.values():
        fp = None
        if isinstance(v, _Tensor):
            try:
                fp = start(v)
            except Exception as exc:  # one tensor's fingerprint lost, not the event
                log.rec.internal_error("message fingerprint", exc)
        out.append(fp)
    return tuple(out)


def _carries(log: MessageLog, d: Any) -> int | None:
    if type(d) is not dict and not isinstance(d, dict):
        return None
    if _dict_get(d, MSG_TYPE_KEY) != "output":
        return None
    for k in d:
        if isinstance(k, str) and k.startswith(PREFIX):
            return next(log._carries)
    return None


def _error(exc: BaseException) -> tuple[str, str]:
    return qualname(type(exc)), str(exc)


def wrap_send(fn: Callable[..., Any], log: MessageLog, peer_of: PeerOf,
              dict_arg: int = 0, dict_name: str = "tensor_dict") -> Callable[..., Any]:
    """Wrap a send of a tensor dict; ``peer_of(args, kwargs)`` names its destination, and the
    dict is positional argument ``dict_arg`` (or keyword ``dict_name``)."""
    rec = log.rec
    seq = log.seq[_SEND]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_send(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            d = args[dict_arg] if len(args) > dict_arg else kwargs.get(dict_name)
            peer, peer_pp, gather = peer_of(args, kwargs)
            items = _items(d, gather)
            fps = _fingerprints(log, d)
            carries = _carries(log, d)
        except Exception as exc:
            rec.internal_error("message send snapshot", exc)
            return fn(*args, **kwargs)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _record(log, (_SEND, "end", next(seq), wall, t0, mono_ns() - t0, ident(), peer,
                          peer_pp, gather, "", False, False, carries, items, fps, _error(exc)))
            raise
        _record(log, (_SEND, "end", next(seq), wall, t0, mono_ns() - t0, ident(), peer, peer_pp,
                      gather, "", False, False, carries, items, fps, None))
        return result

    return pptrace_send


def _record(log: MessageLog, raw: tuple[Any, ...]) -> None:
    try:
        log.add(raw)
    except Exception as exc:
        log.rec.internal_error("message record", exc)


def wrap_recv(fn: Callable[..., Any], log: MessageLog, peer_of: PeerOf) -> Callable[..., Any]:
    """Wrap a receive of a tensor dict: a ``begin`` before it blocks, an ``end`` with what came
    (inside a typed receive: what it expected, and whether this one was stashed)."""
    rec = log.rec
    seq = log.seq[_RECV]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_recv(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            peer, peer_pp, gather = peer_of(args, kwargs)
            typed = getattr(_here, "typed", None)
            expected = typed[0] if typed is not None else ""
            if typed is not None:
                typed[1] = True  # the typed receive went to the wire
            n = next(seq)
            wall, t0, tid = time_ns(), mono_ns(), ident()
            log.add((_RECV, "begin", n, wall, t0, -1, tid, peer, peer_pp, gather, expected,
                     False, False, None, (), None, None))
        except Exception as exc:
            rec.internal_error("message recv begin", exc)
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _record(log, (_RECV, "end", n, wall, t0, mono_ns() - t0, tid, peer, peer_pp, gather,
                          expected, False, False, None, (), None, _error(exc)))
            raise
        try:
            dur = mono_ns() - t0
            kind = _dict_get(result, MSG_TYPE_KEY, "default") if isinstance(result, dict) else ""
            stashed = bool(expected) and kind != expected
            log.add((_RECV, "end", n, wall, t0, dur, tid, peer, peer_pp, gather, expected,
                     stashed, False, None, _items(result, gather), _fingerprints(log, result),
                     None))
        except Exception as exc:
            rec.internal_error("message recv record", exc)
        return result

    return pptrace_recv


def wrap_typed_recv(fn: Callable[..., Any], log: MessageLog,
                    expected_of: Callable[[tuple[Any, ...], dict[str, Any]], str],
                    peer_of: PeerOf | None = None) -> Callable[..., Any]:
    """Wrap a typed receive (SGLang's ``_pp_recv_typed_dict``): the wire receives inside it learn
    the kind expected; one served from the stash is recorded as a ``from_stash`` receive."""
    rec = log.rec
    seq = log.seq[_RECV]
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_typed_recv(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            expected = expected_of(args, kwargs)
            outer = getattr(_here, "typed", None)
            state = [expected, False]
            _here.typed = state
            wall, t0 = time_ns(), mono_ns()
        except Exception as exc:
            rec.internal_error("message typed recv", exc)
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        finally:
            _here.typed = outer
        if not state[1]:  # no wire receive: the stash served it
            try:
                got = result[0] if isinstance(result, tuple) and result else result
                peer, peer_pp, gather = peer_of(args, kwargs) if peer_of else (-1, None, 1)
                log.add((_RECV, "end", next(seq), wall, t0, mono_ns() - t0, ident(), peer,
                         peer_pp, gather, expected, False, True, None, _items(got, gather),
                         None, None))
            except Exception as exc:
                rec.internal_error("message typed recv record", exc)
        return result

    return pptrace_typed_recv


# --- SGLang's GroupCoordinator -----------------------------------------------------------------

def _gather_size(group: Any) -> int:
    return 1 if group is None else int(group.world_size)


def coordinator_send_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer:
    """``GroupCoordinator.send_tensor_dict(self, tensor_dict, dst=None, all_gather_group=None,
    async_send=False)``'s destination, as the method computes it."""
    group = args[0]
    dst = args[2] if len(args) > 2 else kwargs.get("dst")
    gather = args[3] if len(args) > 3 else kwargs.get("all_gather_group")
    if dst is None:
        dst = (group.rank_in_group + 1) % group.world_size
    peer = group.ranks[dst] if 0 <= dst < len(group.ranks) else -1
    return peer, dst, _gather_size(gather)


def coordinator_recv_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer:
    """``GroupCoordinator.recv_tensor_dict(self, src=None, all_gather_group=None)``'s source."""
    group = args[0]
    src = args[1] if len(args) > 1 else kwargs.get("src")
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    if src is None:
        src = (group.rank_in_group - 1) % group.world_size
    peer = group.ranks[src] if 0 <= src < len(group.ranks) else -1
    return peer, src, _gather_size(gather)


def _typed_expected(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``_pp_recv_typed_dict(self, expected_kind="default", all_gather_group=None)``'s kind."""
    return str(args[1] if len(args) > 1 else kwargs.get("expected_kind", "default"))


def _typed_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer:
    pp = getattr(args[0], "pp_group", None)
    if pp is None:
        return -1, None, 1
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    return coordinator_recv_peer((pp, None, gather), {})


def patch_methods(coordinator: type, log: MessageLog,
                  mixin: type | None = None) -> Callable[[], None]:
    """Wrap SGLang's ``GroupCoordinator`` send/receive (and the mixin's typed receive, when
    given) in place; return the function that puts the exact originals back (an inherited
    method is deleted again, so lookup finds the base class's)."""
    plan: list[tuple[type, str, Callable[..., Any]]] = [
        (coordinator, "send_tensor_dict",
         lambda f: wrap_send(f, log, coordinator_send_peer, dict_arg=1)),
        (coordinator, "recv_tensor_dict", lambda f: wrap_recv(f, log, coordinator_recv_peer)),
    ]
    if mixin is not None:
        plan.append((mixin, "_pp_recv_typed_dict",
                     lambda f: wrap_typed_recv(f, log, _typed_expected, _typed_peer)))
    saved: list[tuple[type, str, Any, bool]] = []
    for cls, name, make in plan:
        own = name in cls.__dict__
        original = cls.__dict__[name] if own else getattr(cls, name)
        saved.append((cls, name, original, own))
        setattr(cls, name, make(original))

    def restore() -> None:
        for cls, name, original, own in reversed(saved):
            if own:
                setattr(cls, name, original)
            else:
                delattr(cls, name)

    return restore


def iter_events(log: MessageLog, rank: RankInfo) -> Iterator[MessageEvent]:
    """What is buffered now, converted (tests and benchmarks; the buffer keeps it)."""
    for raw in list(log._buf):
        yield convert(raw, rank, log.rec.resolve_fingerprint)


def events_of(raws: Sequence[tuple[Any, ...]], rank: RankInfo) -> list[MessageEvent]:
    """Raw message records converted (fingerprints resolved on this thread)."""
    return [convert(r, rank, Recorder.resolve_fingerprint) for r in raws]
