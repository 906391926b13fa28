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
same exception object (bare ``raise``), no device synchronisation (shapes, dtypes, devices,
element counts: no values; a fingerprint only when ``Config.fingerprint`` asks for it), and a
failure inside pptrace counted by the recorder (``internal_error``), never raised. A receive's
``begin`` is appended *before* the call blocks: the recorder thread writes it within a flush
interval while the engine waits, so a rank that hangs in a receive leaves in its trace what it
waited for and from whom.

The caller's thread builds one flat tuple of atoms per event (as the attach wrapper's raw
records): per value its key, its shape as a plain tuple, its dtype and device objects; the
recorder's thread builds the ``MessageEvent`` from it (names, byte counts, TP slices, kinds).
Nothing in the tuple keeps it on the garbage collector's lists while it waits (no
``torch.Size``, no enum member), so that a full buffer does not slow every collection.

Events wait in a second bounded buffer (``MessageLog``), beside the attach/extract one, and the
recorder's thread hands them to its sink's ``export_messages`` at each flush. A message that
finds the buffer full is dropped and counted (``MessageLog.dropped``); its ``seq`` is never
reused, so a reader sees the gap.

An output send carrying prefixed (auxiliary) keys gets ``carries_attach``: the ordinal, from 0, of
such sends on the process; SGLang sends each attached dict once, in attach order (its
``last_rank_comm_queue`` is FIFO), so ordinal ``n`` is the process's ``n``-th attach that
inserted keys. The prefix is the process's own (``Recorder.prefix``: the engine's, the one a
``--target ...@PREFIX`` gave, or the one the recorder learnt from the first attach or extract).
A learnt one is known only on the recorder's thread, after the send, so the caller's thread only
marks an output send as a candidate and the recorder's thread numbers the candidates in order as
it converts them; a candidate dropped on a full buffer keeps its keys aside
(``MessageLog.lost``) so that it still takes its number, as it did when numbered at the call.

    log = MessageLog(recorder)
    send = wrap_send(link.send, log, peer_of)           # peer_of(args, kwargs) -> Peer | None
    recv = wrap_recv(link.recv, log, peer_of)

An engine's own classes are patched by ``pptrace.record.message_patch`` (which methods: its
adapter in ``pptrace.engines``); asynchronous receives by ``pptrace.record.message_async``.
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

from pptrace import engines
from pptrace.model.messages import MSG_TYPE_KEY, MessageEvent, MessageOp
from pptrace.model.records import PREFIX, RankInfo, TensorMeta
from pptrace.record.convert import key_text, qualname
from pptrace.record.recorder import Recorder

__all__ = [
    "MessageLog",
    "Peer",
    "PeerOf",
    "wrap_recv",
    "wrap_send",
    "wrap_typed_recv",
]

_Tensor = torch.Tensor
_dict_items = dict.items
_dict_get = dict.get
# Plain strings in the raw records, not the enum: an enum member is an object the garbage
# collector tracks, and a record that holds one stays on its lists while it waits.
_SEND, _RECV = MessageOp.SEND.value, MessageOp.RECV.value
_FORWARDED = engines.forwarded_kinds()  # the engines' output kinds (SGLang's "output")
_here = threading.local()  # the typed receive in progress on this thread, if any

#: (peer global rank, peer PP stage or None, all-gather group size) of a call, from its
#: arguments; -1 when unknown.
Peer = tuple[int, int | None, int]
#: A call's ``Peer``, or None for a call that moves nothing (a group of one: not recorded).
PeerOf = Callable[[tuple[Any, ...], dict[str, Any]], Peer | None]


class MessageLog:
    """One process's message events: a bounded buffer the recorder's thread flushes."""

    def __init__(self, recorder: Recorder, capacity: int | None = None) -> None:
        self.rec = recorder
        self.capacity = capacity if capacity is not None else recorder.config.buffer_size
        self._buf: collections.deque[tuple[Any, ...]] = collections.deque()
        self.seq = {_SEND: itertools.count(), _RECV: itertools.count()}
        # A broadcast's own numbers (``pptrace.record.message_broadcast``): taken from the
        # point-to-point counters, they would leave a channel's seqs not its own.
        self.bseq = {_SEND: itertools.count(), _RECV: itertools.count()}
        self._carry = 0  # the next carries_attach ordinal (numbered on the recorder's thread)
        #: Output sends dropped on a full buffer: (seq, keys), numbered at conversion in turn.
        self.lost: collections.deque[tuple[int, tuple[Any, ...]]] = collections.deque()
        self._lock = threading.Lock()
        self.exported = self.dropped = 0
        self._taken = 0  # taken by a flush, not yet exported or dropped
        #: The wrappers' checked append: ``(append if len(buffer) < capacity else full)(raw)``.
        self.append = self._buf.append
        recorder.messages = self  # the recorder's thread flushes us with its events

    @property
    def pending(self) -> int:
        """Events waiting to be written."""
        return len(self._buf)

    @property
    def recorded(self) -> int:
        """Events the wrappers made: each one is waiting, being written, written or dropped
        (derived, so that the wrappers keep no counter of their own)."""
        return len(self._buf) + self._taken + self.exported + self.dropped

    def add(self, raw: tuple[Any, ...]) -> None:
        """Buffer one raw message event; drop and count it when the buffer is full."""
        if len(self._buf) < self.capacity:
            self._buf.append(raw)
        else:
            self.full(raw)

    def full(self, raw: tuple[Any, ...]) -> None:
        """Drop and count ``raw``: the buffer is full."""
        with self._lock:
            self.dropped += 1
            if raw[0] == _SEND and raw[_CARRIES] is True:  # its number is still taken
                self.lost.append((raw[2], raw[_HEAD::4]))
        self.rec.warn("message buffer full",
                      f"more than {self.capacity} messages waiting; dropping new ones")

    def take(self) -> list[tuple[Any, ...]]:
        """Everything buffered now, oldest first (the recorder's thread)."""
        out = []
        pop = self._buf.popleft
        for _ in range(len(self._buf)):
            out.append(pop())
        with self._lock:
            self._taken += len(out)
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
            self._settle(len(raws), exported=0)
            self.rec.warn(f"message export failed ({type(exc).__name__})", str(exc))
            return 0
        self._settle(len(raws), exported=len(events))
        return len(events)

    def discard(self) -> None:
        """Count what is buffered as dropped (no sink to write it to)."""
        self._settle(len(self.take()), exported=0)

    def _settle(self, taken: int, exported: int) -> None:
        """``taken`` events of a flush are done: ``exported`` written, the rest dropped."""
        with self._lock:
            self._taken -= taken
            self.exported += exported
            self.dropped += taken - exported

    def carries(self, raw: tuple[Any, ...]) -> tuple[Any, ...]:
        """``raw`` with its ``carries`` slot numbered: an output send that holds keys under the
        process's prefix takes the next ordinal, after each such send dropped before it."""
        if raw[0] != _SEND or raw[_CARRIES] is not True:
            return raw
        prefix = self.rec.prefix
        with self._lock:
            while self.lost and self.lost[0][0] < raw[2]:
                self._carry += _prefixed(self.lost.popleft()[1], prefix)
            n = self._carry if _prefixed(raw[_HEAD::4], prefix) else None
            self._carry += n is not None
        return raw[:_CARRIES] + (n,) + raw[_CARRIES + 1:]

    def _convert(self, raw: tuple[Any, ...], rank: RankInfo) -> MessageEvent | None:
        try:
            return convert(self.carries(raw), rank, self.rec.resolve_fingerprint)
        except Exception as exc:  # counted as dropped by _settle
            self.rec.internal_error("message conversion", exc)
            return None


# --- the raw record and its conversion (on the recorder thread) ------------------------------
# One flat tuple per event, built on the caller's thread with no per-value tuple and nothing
# computed that the recorder's thread can compute (as pptrace.record.wrapper's raw records):
#   (op, phase, seq, wall_ns, mono_ns, duration_ns, thread_id, peer, peer_pp, gather,
#    expected, stashed, from_stash, carries, fingerprints, error, kind, group, *values)
# values: four slots per dict value, in dict order: (key, shape, dtype, device) for a tensor
# (the shape a plain tuple of ints, so that a record of atoms leaves the garbage collector's
# lists at its first collection),
# (key, None, type, None) for any other value. kind: the dict's __msg_type__ value (None when
# the call returned no dict, or the dict has none). group: a broadcast's group (global ranks),
# () for a point-to-point call.
_HEAD = 18
_CARRIES = 13  # True on the caller's thread for an output send; numbered by MessageLog.carries


def convert(raw: tuple[Any, ...], rank: RankInfo,
            resolve: Callable[[Any], str | None]) -> MessageEvent:
    """A raw message record as a ``MessageEvent`` (the process's own TP rank is the peer's: a
    PP group joins the same TP rank of every stage)."""
    (op, phase, seq, wall, mono, dur, thread_id, peer, peer_pp, gather, expected, stashed,
     from_stash, carries, fps, error, kind, group) = raw[:_HEAD]
    keys: list[str] = []
    tensors: list[TensorMeta] = []
    for i, at in enumerate(range(_HEAD, len(raw), 4)):
        key, shape, dtype, device = raw[at:at + 4]
        name = key_text(key)  # never a user __repr__ on the recorder thread
        keys.append(name)
        if shape is None:
            tensors.append(TensorMeta.of_key(key=name, dtype=qualname(dtype), is_tensor=False))
            continue
        numel = 1
        for d in shape:
            numel *= int(d)
        fp = resolve(fps[i]) if fps is not None and fps[i] is not None else None
        tensors.append(TensorMeta.of_key(
            key=name, shape=tuple(int(d) for d in shape),
            dtype=str(dtype).removeprefix("torch."), device=str(device),
            nbytes=numel * int(dtype.itemsize),
            sliced=gather > 1 and numel > 0 and numel % gather == 0, is_tensor=True,
            fingerprint=fp))
    error_type, error_message = error if error is not None else (None, None)
    return MessageEvent(
        op=MessageOp(op), phase=phase, seq=seq, wall_ns=wall, mono_ns=mono, duration_ns=dur,
        thread_id=thread_id, peer=peer, peer_pp_rank=peer_pp,
        peer_tp_rank=rank.tp_rank if peer >= 0 and not group else None,
        kind=kind if type(kind) is str else "", expected_kind=expected, stashed=stashed,
        from_stash=from_stash, gather_size=gather, carries_attach=carries, keys=tuple(keys),
        tensors=tuple(tensors), error_type=error_type, error_message=error_message,
        group=tuple(group))


# --- the hot path ------------------------------------------------------------------------------

def _values(d: Any) -> tuple[Any, ...]:
    """Each value's four slots, flat, in dict order (``dict``'s own ``items``: a subclass sees
    no call); nothing for a call that returned no dict. A shape is kept as a plain tuple, not
    the tensor's ``torch.Size``: a tuple subclass stays tracked by the garbage collector, and
    so would the whole record while it waits, which made every collection walk the buffer
    (10 µs a message with 20,000 waiting, against 1.4 µs)."""
    out: tuple[Any, ...] = ()
    if isinstance(d, dict):
        for k, v in _dict_items(d):
            if isinstance(v, _Tensor):
                out += (k, tuple(v.shape), v.dtype, v.device)
            else:
                out += (k, None, type(v), None)
    return out


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


def _prefixed(keys: Sequence[Any], prefix: str | None) -> bool:
    """Whether a key is under ``prefix`` (None: not known, so none is)."""
    if not prefix:
        return False
    return any(type(k) is str and k.startswith(prefix) for k in keys)


def _error(exc: BaseException) -> tuple[str, str]:
    return qualname(type(exc)), str(exc)


def wrap_send(fn: Callable[..., Any], log: MessageLog, peer_of: PeerOf,
              dict_arg: int = 0, dict_name: str = "tensor_dict") -> Callable[..., Any]:
    """Wrap a send of a tensor dict; ``peer_of(args, kwargs)`` names its destination (None: no
    wire traffic, not recorded), and the dict is positional argument ``dict_arg`` (or keyword
    ``dict_name``)."""
    rec = log.rec
    seq, buf, cap, append, full = log.seq[_SEND], log._buf, log.capacity, log.append, log.full
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_send(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            d = args[dict_arg] if len(args) > dict_arg else kwargs.get(dict_name)
            where = peer_of(args, kwargs)
            if where is not None:
                values = _values(d)
                kind = _dict_get(d, MSG_TYPE_KEY) if isinstance(d, dict) else None
                carries = True if kind in _FORWARDED else None  # numbered at conversion
                fps = _fingerprints(log, d) if rec.fingerprint else None
        except Exception as exc:
            rec.internal_error("message send snapshot", exc)
            where = None
        if where is None:
            return fn(*args, **kwargs)
        wall, t0 = time_ns(), mono_ns()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            try:
                (append if len(buf) < cap else full)((
                    _SEND, "end", next(seq), wall, t0, mono_ns() - t0, ident(), *where, "",
                    False, False, carries, fps, _error(exc), kind, (), *values))
            except Exception as inner:
                rec.internal_error("message send record", inner)
            raise
        try:
            (append if len(buf) < cap else full)((
                _SEND, "end", next(seq), wall, t0, mono_ns() - t0, ident(), *where, "", False,
                False, carries, fps, None, kind, (), *values))
        except Exception as exc:
            rec.internal_error("message send record", exc)
        return result

    return pptrace_send


def wrap_recv(fn: Callable[..., Any], log: MessageLog, peer_of: PeerOf) -> Callable[..., Any]:
    """Wrap a receive of a tensor dict: a ``begin`` before it blocks, an ``end`` with what came
    (inside a typed receive: what it expected, and whether this one was stashed)."""
    rec = log.rec
    seq, buf, cap, append, full = log.seq[_RECV], log._buf, log.capacity, log.append, log.full
    time_ns, mono_ns, ident = time.time_ns, time.monotonic_ns, threading.get_ident

    @functools.wraps(fn)
    def pptrace_recv(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return fn(*args, **kwargs)
        try:
            where = peer_of(args, kwargs)
            if where is not None:
                typed = getattr(_here, "typed", None)
                expected = ""
                if typed is not None:
                    expected = typed[0]
                    typed[1] = True  # the typed receive went to the wire
                n = next(seq)
                wall, t0, tid = time_ns(), mono_ns(), ident()
                (append if len(buf) < cap else full)((
                    _RECV, "begin", n, wall, t0, -1, tid, *where, expected, False, False,
                    None, None, None, None, ()))
        except Exception as exc:
            rec.internal_error("message recv begin", exc)
            where = None
        if where is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            try:
                (append if len(buf) < cap else full)((
                    _RECV, "end", n, wall, t0, mono_ns() - t0, tid, *where, expected, False,
                    False, None, None, _error(exc), None, ()))
            except Exception as inner:
                rec.internal_error("message recv record", inner)
            raise
        try:
            dur = mono_ns() - t0
            kind = _dict_get(result, MSG_TYPE_KEY) if isinstance(result, dict) else None
            stashed = bool(expected) and (kind if kind is not None else "default") != expected
            (append if len(buf) < cap else full)((
                _RECV, "end", n, wall, t0, dur, tid, *where, expected, stashed, False, None,
                _fingerprints(log, result) if rec.fingerprint else None, None, kind, (),
                *_values(result)))
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
                where = (peer_of(args, kwargs) if peer_of else None) or (-1, None, 1)
                kind = _dict_get(got, MSG_TYPE_KEY) if isinstance(got, dict) else None
                log.add((_RECV, "end", next(seq), wall, t0, mono_ns() - t0, ident(), *where,
                         expected, False, True, None, None, None, kind, (), *_values(got)))
            except Exception as exc:
                rec.internal_error("message typed recv record", exc)
        return result

    return pptrace_typed_recv


def iter_events(log: MessageLog, rank: RankInfo) -> Iterator[MessageEvent]:
    """What is buffered now, converted (tests and benchmarks; the buffer keeps it)."""
    carry, lost = log._carry, list(log.lost)  # numbered here as a flush would, then put back
    try:
        events = [convert(log.carries(raw), rank, log.rec.resolve_fingerprint)
                  for raw in list(log._buf)]
    finally:
        log._carry, log.lost = carry, collections.deque(lost)
    yield from events


def events_of(raws: Sequence[tuple[Any, ...]], rank: RankInfo,
              prefix: str | None = PREFIX) -> list[MessageEvent]:
    """Raw message records converted (fingerprints resolved on this thread; output sends
    numbered under ``prefix``)."""
    out, carry = [], 0
    for r in raws:
        if r[0] == _SEND and r[_CARRIES] is True:
            n = carry if _prefixed(r[_HEAD::4], prefix) else None
            carry += n is not None
            r = r[:_CARRIES] + (n,) + r[_CARRIES + 1:]
        out.append(convert(r, rank, Recorder.resolve_fingerprint))
    return out
