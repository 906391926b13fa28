"""The PP message layer: every tensor dict sent or received between stages, and its spans.

The auxiliary tensors that attach and extract move are one part of a larger message. In SGLang
the last stage sends an **output** message to stage 0 (sampled token ids, logprob fields, then the
auxiliary tensors), hidden states travel stage to stage as **proxy** messages, and each receiver
demultiplexes on ``__msg_type__``. A ``MessageEvent`` is one send or one receive of such a dict:

- a send is one event (``phase`` ``"end"``), recorded when the send call returns;
- a receive is two: ``"begin"`` recorded *before* the call blocks (so a rank that hangs in a
  receive leaves evidence of what it waited for, and from whom), then ``"end"`` with what
  arrived. Both carry the same ``seq``, and the begin is the end's call before anything
  arrived (``begin_of``);
- a broadcast (one source, every other member of a group receives) is a send on the source
  (``peer`` -1: no single peer) and a receive on each other member (``peer``: the source), each
  carrying ``group``, the group's global ranks in group order. A point-to-point event has an
  empty ``group``, so files written before broadcasts were recorded read as they always did.
  A process numbers its broadcasts apart from its point-to-point messages (a broadcast send
  counter and a broadcast receive counter of their own), so a channel's seqs stay its own
  whatever the process broadcasts; ``pptrace.model.findings.MessageId`` tells the two apart.

Every value of the dict is described by a ``TensorMeta`` (``pptrace.model.records``: the one
tensor record of every layer, named by its key here), with whether it travelled whole or as
this TP rank's slice (re-assembled by an all-gather on the receiver). The
span codec below is the one place these records become span attributes and back, as
``pptrace.model.schema`` is for attach/extract events.

    >>> ev = MessageEvent(op=MessageOp.SEND, phase="end", seq=0, kind="output", peer=0)
    >>> from_attributes(to_attributes(ev), SPAN_SEND) == ev
    True

A trace file's spans (schema version 2 and 3, ``to_attributes(ev, resource)``) leave out what
their name, times and resource say and what follows from the rest, by the rules of
``pptrace.model.derived`` (version 3 also the peer's ranks its layout implies, and what a
receive expected when it got it), and version 3 joins string arrays; ``from_attributes``
rebuilds it all, given the same name, times and resource. OTLP spans (Jaeger) are written
whole: Jaeger keeps microseconds, and its tag search wants every attribute.

A receive in a trace file is one span when it can be (``fold_begins``): a flush that holds both
a receive's begin and its end (same process: a flush is one process's; op ``recv``, same
``seq``) writes the end alone, marked ``WITH_BEGIN``, and the begin is left out, for the end
gives it back (``begin_of``: same seq, call start, thread, peer and expectation; nothing
arrived yet). A begin whose end is not in its flush (the receive blocked across it, or never
returned) is written alone, as it always was: that is the hang evidence. The rule a reader
follows is local to one span: an end marked ``WITH_BEGIN`` stands for two events, its begin and
itself; every other span for one. Nothing depends on read order, on which file or segment a
span is in, or on another span being read: a begin and its marked end are in one write, so no
rotation parts them, and a line read twice gives the same pair twice, which the loader keeps
once, as it keeps any event read twice. Files written before the marker have none, so they
read as they always did, a begin being an event only where its span is. OTLP spans are never
folded (a Jaeger user sees both spans).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pptrace import engines
from pptrace.model.derived import ITEMSIZES, implied_devices, implied_nbytes
from pptrace.model.joined import join, split
from pptrace.model.records import TensorMeta
from pptrace.model.schema import R_MAIN_DEVICE, R_THREAD_MAIN_ID, TP_SIZE, compact_against, joins

__all__ = [
    "JOINED", "MSG_TYPE_KEY", "SPAN_NAMES", "SPAN_RECV", "SPAN_RECV_BEGIN", "SPAN_SEND",
    "UNKNOWN_RANK", "WITH_BEGIN", "MessageEvent", "MessageOp", "begin_of", "fold_begins",
    "from_attributes", "implied_peer", "implies_begin", "span_name", "span_times",
    "to_attributes",
]

#: The key an engine's receivers demultiplex on (SGLang's ``__msg_type__``: ``"output"``,
#: ``"proxy"``...), as its adapter declares it (pptrace.engines); "" when no engine has one.
MSG_TYPE_KEY = next(iter(engines.kind_keys()), "")

SPAN_SEND = "pptrace.send"
SPAN_RECV = "pptrace.recv"  # a receive that returned (or raised)
SPAN_RECV_BEGIN = "pptrace.recv.begin"  # a receive that has started: written before it returns
SPAN_NAMES = frozenset({SPAN_SEND, SPAN_RECV, SPAN_RECV_BEGIN})

# Attribute keys (the rank, host, pid, run id and schema version are the ones of
# pptrace.model.schema, on the span or the resource as for attach/extract spans).
OP = "pptrace.msg.op"  # "send" | "recv"
PHASE = "pptrace.msg.phase"  # "begin" | "end"
#: int, per process and op, from 0, broadcasts numbered apart from point-to-point messages; a
#: receive's begin and end share it
SEQ = "pptrace.msg.seq"
WALL_NS = "pptrace.msg.wall_ns"  # int, when the call started (wall clock)
MONO_NS = "pptrace.msg.mono_ns"  # int, time.monotonic_ns at the call
DURATION_NS = "pptrace.msg.duration_ns"  # int, -1 for a begin
THREAD_ID = "pptrace.msg.thread.id"  # int
PEER = "pptrace.msg.peer"  # int, the other end's global rank (dst of a send, src of a receive)
PEER_PP = "pptrace.msg.peer.pp_rank"  # int, absent when unknown
PEER_TP = "pptrace.msg.peer.tp_rank"  # int, absent when unknown
KIND = "pptrace.msg.kind"  # str, the dict's __msg_type__ ("" when it has none)
EXPECTED = "pptrace.msg.expected_kind"  # str, what a typed receive asked for ("" untyped)
STASHED = "pptrace.msg.stashed"  # bool, a typed receive kept this message for later
FROM_STASH = "pptrace.msg.from_stash"  # bool, a typed receive was served from its stash
GATHER = "pptrace.msg.gather_size"  # int, the all-gather group's size for TP slices (1: none)
GROUP = "pptrace.msg.group"  # int[], a broadcast's group (global ranks); absent: point-to-point
CARRIES = "pptrace.msg.carries_attach"  # int, the seq of the attach whose output this carried
KEYS = "pptrace.msg.keys"  # str[], the dict's keys in order
T_KEYS = "pptrace.msg.tensor.keys"  # str[], per tensor (and per non-tensor value) below
T_SHAPES = "pptrace.msg.tensor.shapes"  # str[], "8,5"
T_DTYPES = "pptrace.msg.tensor.dtypes"  # str[], "float32"; a non-tensor's type name
T_DEVICES = "pptrace.msg.tensor.devices"  # str[], device type ("cuda"), as the engine sends it
T_NBYTES = "pptrace.msg.tensor.nbytes"  # int[], of the whole tensor
T_SLICED = "pptrace.msg.tensor.sliced"  # bool[], travelled as this TP rank's slice
T_IS_TENSOR = "pptrace.msg.tensor.is_tensor"  # bool[]
T_FINGERPRINTS = "pptrace.msg.tensor.fingerprints"  # str[], only when fingerprinting is on
ERROR_TYPE = "pptrace.msg.error.type"  # str, only when the call raised
ERROR_MESSAGE = "pptrace.msg.error.message"  # str
#: bool, only ever true: this end span stands for its receive's begin too (``fold_begins``)
WITH_BEGIN = "pptrace.msg.with_begin"

#: The string arrays a version 3 span writes joined (``pptrace.model.joined``).
JOINED = frozenset({KEYS, T_KEYS, T_SHAPES, T_DTYPES, T_DEVICES, T_FINGERPRINTS})
#: Version 3: a peer's PP or TP rank written as this is unknown (where the layout implies one).
UNKNOWN_RANK = -1

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int]


class MessageOp(str, enum.Enum):
    """Which end of a message a call is."""

    SEND = "send"
    RECV = "recv"


class MessageEvent(NamedTuple):
    """One send, or one phase of one receive, of a PP tensor dict (see the module docstring)."""

    op: MessageOp
    phase: str  # "begin" (a receive that has started) | "end"
    seq: int
    wall_ns: int = 0
    mono_ns: int = 0
    duration_ns: int = -1
    thread_id: int = 0
    peer: int = -1  # the other end's global rank; -1 when unknown
    peer_pp_rank: int | None = None
    peer_tp_rank: int | None = None
    kind: str = ""
    expected_kind: str = ""
    stashed: bool = False
    from_stash: bool = False
    gather_size: int = 1
    carries_attach: int | None = None
    keys: tuple[str, ...] = ()
    tensors: tuple[TensorMeta, ...] = ()
    error_type: str | None = None
    error_message: str | None = None
    #: A broadcast's group, its members' global ranks in group order (empty: point-to-point).
    group: tuple[int, ...] = ()

    @property
    def broadcast(self) -> bool:
        """The event is one end of a broadcast (a source's send, or a member's receive)."""
        return bool(self.group)

    @property
    def ok(self) -> bool:
        """The call returned."""
        return self.error_type is None

    @property
    def total_bytes(self) -> int:
        """Bytes of every tensor of the message (whole tensors)."""
        return sum(t.nbytes for t in self.tensors)


def span_name(event: MessageEvent) -> str:
    """The span a message event becomes."""
    if event.op is MessageOp.SEND:
        return SPAN_SEND
    return SPAN_RECV_BEGIN if event.phase == "begin" else SPAN_RECV


def span_times(event: MessageEvent) -> tuple[int, int]:
    """The span's start and end: the call's wall-clock start, and its end (a begin: the start)."""
    return event.wall_ns, event.wall_ns + max(event.duration_ns, 0)


def begin_of(end: MessageEvent) -> MessageEvent:
    """The begin a receive's wrapper recorded before the call whose ``end`` this is."""
    return MessageEvent(
        op=MessageOp.RECV, phase="begin", seq=end.seq, wall_ns=end.wall_ns, mono_ns=end.mono_ns,
        duration_ns=-1, thread_id=end.thread_id, peer=end.peer, peer_pp_rank=end.peer_pp_rank,
        peer_tp_rank=end.peer_tp_rank, expected_kind=end.expected_kind,
        gather_size=end.gather_size, group=end.group)


def fold_begins(events: Sequence[MessageEvent]) -> list[tuple[MessageEvent, bool]]:
    """One flush's events as spans to write: (event, whether it stands for its begin too).

    A receive's begin is left out when its end comes after it in ``events`` and gives it back
    exactly (``begin_of``); everything else is kept as it is, in order.
    """
    begins: dict[int, int] = {}  # seq -> the index of its receive's begin
    for i, ev in enumerate(events):
        if ev.phase == "begin" and ev.op is MessageOp.RECV:
            begins.setdefault(ev.seq, i)
    left_out: set[int] = set()
    marked: set[int] = set()
    if begins:
        for j, ev in enumerate(events):
            if ev.phase != "end" or ev.op is not MessageOp.RECV:
                continue
            at = begins.get(ev.seq)
            if at is not None and at < j and at not in left_out and begin_of(ev) == events[at]:
                left_out.add(at)
                marked.add(j)
    return [(ev, j in marked) for j, ev in enumerate(events) if j not in left_out]


def _implied_duration(phase: object, start_ns: int, end_ns: int) -> int:
    """A compact span's duration: -1 for a begin, its span's length for an end."""
    return -1 if phase == "begin" else end_ns - start_ns


def implied_peer(peer: int, group: Sequence[int],
                 resource: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The peer's PP and TP ranks a version 3 span leaves out: in the usual layout (TP innermost,
    global rank = PP rank * TP size + TP rank) from the peer's global rank and the resource's
    TP size; (None, None) for a broadcast, or an unknown peer or TP size."""
    size = resource.get(TP_SIZE)
    if peer < 0 or group or type(size) is not int or size < 1:
        return None, None
    return divmod(peer, size)


def _is_tensor(dtype: str) -> bool:
    """Whether a value of this dtype is a tensor, as compact spans imply it: a dtype of
    ``ITEMSIZES`` is a tensor's, anything else a non-tensor's type name."""
    return dtype in ITEMSIZES


def to_attributes(event: MessageEvent, resource: Mapping[str, Any] | None = None,
                  with_begin: bool = False) -> dict[str, AttributeValue]:
    """A message event as span attributes (the inverse of ``from_attributes``); ``with_begin``:
    a receive's end that stands for its begin too (``fold_begins``), marked ``WITH_BEGIN``.

    Under a version 2 ``resource`` (a trace file's, whose span times are exact nanoseconds and
    whose span names are read back) the span leaves out: ``OP`` and ``PHASE`` (the span name
    says them); ``WALL_NS`` and ``DURATION_NS`` when ``span_times`` gives them back (the start;
    the length for an end, -1 for a begin); ``THREAD_ID`` when it is the resource's main
    thread; ``T_KEYS`` when it is ``KEYS``; ``T_DEVICES`` when every tensor is on the
    resource's main device; ``T_NBYTES`` when each is elements times ``ITEMSIZES`` (0 for a
    non-tensor); ``T_SLICED`` when none is; ``T_IS_TENSOR`` when a value is a tensor exactly
    when its dtype is in ``ITEMSIZES``. A value is left out only when its rule gives it back.
    Version 3 also leaves out ``PEER_PP`` and ``PEER_TP`` when ``implied_peer`` gives them
    back (an unknown one it implies is written ``UNKNOWN_RANK``) and a receive end's
    ``EXPECTED`` when it is its ``KIND``, and joins its string arrays (``JOINED``).
    """
    res = compact_against(resource)
    out: dict[str, AttributeValue] = {}
    if res is None:
        out[OP], out[PHASE] = event.op.value, event.phase
    out[SEQ] = event.seq
    if res is None:
        out[WALL_NS] = event.wall_ns
    out[MONO_NS] = event.mono_ns
    start, end = span_times(event)
    if res is None or event.duration_ns != _implied_duration(event.phase, start, end):
        out[DURATION_NS] = event.duration_ns
    if res is None or res.get(R_THREAD_MAIN_ID) != event.thread_id:
        out[THREAD_ID] = event.thread_id
    out[PEER], out[KIND], out[KEYS] = event.peer, event.kind, list(event.keys)
    v3 = joins(res)
    ranks = (None, None) if not v3 or res is None else implied_peer(event.peer, event.group, res)
    for key, value, given in ((PEER_PP, event.peer_pp_rank, ranks[0]),
                              (PEER_TP, event.peer_tp_rank, ranks[1])):
        if value != given:
            out[key] = UNKNOWN_RANK if value is None else value
    if v3 and event.op is MessageOp.RECV and event.phase == "end":
        if event.expected_kind != event.kind:  # a receive's end: left out, it is its kind
            out[EXPECTED] = event.expected_kind
    elif event.expected_kind:
        out[EXPECTED] = event.expected_kind
    if event.stashed:
        out[STASHED] = True
    if event.from_stash:
        out[FROM_STASH] = True
    if event.gather_size != 1:
        out[GATHER] = event.gather_size
    if event.carries_attach is not None:
        out[CARRIES] = event.carries_attach
    if event.group:
        out[GROUP] = list(event.group)
    ts = event.tensors
    keys = [t.key for t in ts]
    if (ts and res is None) or (res is not None and keys != list(event.keys)):
        out[T_KEYS] = keys  # compact: an empty list where the dict's values are not described
    if ts:
        out[T_SHAPES] = [",".join(map(str, t.shape)) for t in ts]
        out[T_DTYPES] = [t.dtype for t in ts]
        implied = None if res is None else implied_devices(
            res.get(R_MAIN_DEVICE), [t.is_tensor for t in ts])
        if implied != [t.device for t in ts]:
            out[T_DEVICES] = [t.device for t in ts]
        if res is None or any(implied_nbytes(t.shape, t.dtype, t.is_tensor) != t.nbytes
                              for t in ts):
            out[T_NBYTES] = [t.nbytes for t in ts]
        if res is None or any(t.sliced for t in ts):
            out[T_SLICED] = [t.sliced for t in ts]
        if res is None or any(t.is_tensor != _is_tensor(t.dtype) for t in ts):
            out[T_IS_TENSOR] = [t.is_tensor for t in ts]
        if any(t.fingerprint is not None for t in ts):
            out[T_FINGERPRINTS] = [t.fingerprint or "" for t in ts]
    if event.error_type is not None:
        out[ERROR_TYPE] = event.error_type
        out[ERROR_MESSAGE] = event.error_message or ""
    if with_begin:
        if event.op is not MessageOp.RECV or event.phase != "end":
            raise ValueError(f"only a receive's end stands for its begin, not a {event.op.value} "
                             f"{event.phase}")
        out[WITH_BEGIN] = True
    return join(out, JOINED) if v3 else out


def implies_begin(attrs: Mapping[str, object], name: str) -> bool:
    """Whether a message span stands for its receive's begin too (``BadMessageSpan`` when its
    ``WITH_BEGIN`` is not ``true`` on a ``pptrace.recv``)."""
    value = attrs.get(WITH_BEGIN)
    if value is None:
        return False
    if value is not True or name != SPAN_RECV:
        raise BadMessageSpan(f"{WITH_BEGIN}: {value!r:.20} on a {name} span (only true, and only "
                             f"on a {SPAN_RECV})")
    return True


class BadMessageSpan(ValueError):
    """A message span whose attributes cannot be a ``MessageEvent`` (names what is wrong)."""


def _int(attrs: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = attrs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None and default is not None:
            return default
        raise BadMessageSpan(f"{key}: expected an integer, got {value!r:.60}")
    return value


def _opt_int(attrs: Mapping[str, object], key: str) -> int | None:
    return None if attrs.get(key) is None else _int(attrs, key)


def _strs(attrs: Mapping[str, object], key: str, n: int | None = None) -> list[str]:
    value = attrs.get(key, [] if n is None else [""] * n)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise BadMessageSpan(f"{key}: expected a list of strings")
    if n is not None and len(value) != n:
        raise BadMessageSpan(f"{key}: {len(value)} entries for {n} tensors")
    return list(value)


def _ints(attrs: Mapping[str, object], key: str, n: int) -> list[int]:
    value = attrs.get(key)
    if not isinstance(value, (list, tuple)) or len(value) != n or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BadMessageSpan(f"{key}: expected {n} integers")
    return [int(v) for v in value]


def _bools(attrs: Mapping[str, object], key: str, n: int) -> list[bool]:
    value = attrs.get(key)
    if not isinstance(value, (list, tuple)) or len(value) != n or not all(
            isinstance(v, bool) for v in value):
        raise BadMessageSpan(f"{key}: expected {n} booleans")
    return [bool(v) for v in value]


def _group(attrs: Mapping[str, object]) -> tuple[int, ...]:
    value = attrs.get(GROUP, ())
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise BadMessageSpan(f"{GROUP}: expected a list of global ranks")
    return tuple(int(v) for v in value)


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(",")) if text else ()
    except ValueError:
        raise BadMessageSpan(f"{T_SHAPES}: {text!r:.60} is not a shape") from None


def _span_of(name: str) -> tuple[MessageOp, str]:
    """The op and phase a span's name says."""
    if name == SPAN_SEND:
        return MessageOp.SEND, "end"
    return MessageOp.RECV, "begin" if name == SPAN_RECV_BEGIN else "end"


def from_attributes(attrs: Mapping[str, object], name: str,
                    resource: Mapping[str, Any] | None = None, start_ns: int = 0,
                    end_ns: int | None = None) -> MessageEvent:
    """Rebuild a message event from a span's name and attributes; ``BadMessageSpan`` if not one.

    ``resource``, ``start_ns`` and ``end_ns``: the span's resource and times, from which a
    version 2 span's left-out values are rebuilt (``to_attributes``).
    """
    if name not in SPAN_NAMES:
        raise BadMessageSpan(f"{name!r:.60} is not a message span")
    # A compact span is one without OP, under a version 2 or 3 resource (a whole span has it).
    res = compact_against(resource) if OP not in attrs else None
    v3 = joins(res)
    if v3:
        attrs = split(attrs, JOINED)
    phase: object
    if res is not None and PHASE not in attrs:
        op, phase = _span_of(name)
    else:
        try:
            op = MessageOp(attrs.get(OP))
        except ValueError:
            raise BadMessageSpan(f"{OP}: {attrs.get(OP)!r:.60} is not send or recv") from None
        phase = attrs.get(PHASE)
        if phase not in ("begin", "end") or (phase == "begin") != (name == SPAN_RECV_BEGIN):
            raise BadMessageSpan(f"{PHASE}: {phase!r:.60} does not fit the span {name}")
    all_keys = _strs(attrs, KEYS)
    keys = all_keys if res is not None and T_KEYS not in attrs else _strs(attrs, T_KEYS)
    n = len(keys)
    tensors: tuple[TensorMeta, ...] = ()
    if n:
        fps = _strs(attrs, T_FINGERPRINTS, n) if T_FINGERPRINTS in attrs else [""] * n
        shapes = [_shape(s) for s in _strs(attrs, T_SHAPES, n)]
        dtypes = _strs(attrs, T_DTYPES, n)
        compact = res is not None
        if compact and T_IS_TENSOR not in attrs:
            is_tensor = [_is_tensor(d) for d in dtypes]
        else:
            is_tensor = _bools(attrs, T_IS_TENSOR, n)
        if res is not None and T_DEVICES not in attrs:
            implied = implied_devices(res.get(R_MAIN_DEVICE), is_tensor)
            if implied is None:
                raise BadMessageSpan(f"{T_DEVICES}: missing, and the resource has no string "
                                     f"{R_MAIN_DEVICE!r}")
            devices = implied
        else:
            devices = _strs(attrs, T_DEVICES, n)
        if compact and T_NBYTES not in attrs:
            nbytes = []
            for shape, dtype, it in zip(shapes, dtypes, is_tensor, strict=True):
                size = implied_nbytes(shape, dtype, it)
                if size is None:
                    raise BadMessageSpan(f"{T_NBYTES}: missing, and dtype {dtype!r:.40} has no "
                                         "known element size")
                nbytes.append(size)
        else:
            nbytes = _ints(attrs, T_NBYTES, n)
        sliced = ([False] * n if compact and T_SLICED not in attrs
                  else _bools(attrs, T_SLICED, n))
        tensors = tuple(
            TensorMeta.of_key(key=k, shape=sh, dtype=d, device=dev, nbytes=b, sliced=sl,
                          is_tensor=it, fingerprint=fp or None)
            for k, sh, d, dev, b, sl, it, fp in zip(
                keys, shapes, dtypes, devices, nbytes, sliced, is_tensor, fps, strict=True))
    error_type = attrs.get(ERROR_TYPE)
    if error_type is not None and not isinstance(error_type, str):
        raise BadMessageSpan(f"{ERROR_TYPE}: expected a string")
    message = attrs.get(ERROR_MESSAGE)
    kind = attrs.get(KIND, "")
    got = v3 and op is MessageOp.RECV and phase == "end"  # version 3: expected what it got
    expected = attrs.get(EXPECTED, kind if got else "")
    if not isinstance(kind, str) or not isinstance(expected, str):
        raise BadMessageSpan(f"{KIND} and {EXPECTED}: expected strings")
    if res is not None:  # what a compact span's times and resource say
        wall = _int(attrs, WALL_NS, start_ns)
        end = start_ns if end_ns is None else end_ns
        duration = _int(attrs, DURATION_NS, _implied_duration(phase, start_ns, end))
        thread = _int(attrs, THREAD_ID, _int(res, R_THREAD_MAIN_ID, 0))
    else:
        wall, duration = _int(attrs, WALL_NS, 0), _int(attrs, DURATION_NS, -1)
        thread = _int(attrs, THREAD_ID, 0)
    peer, group = _int(attrs, PEER, -1), _group(attrs)
    pp, tp = _opt_int(attrs, PEER_PP), _opt_int(attrs, PEER_TP)
    if v3 and res is not None:  # left out: what the layout implies; UNKNOWN_RANK: None
        ranks = implied_peer(peer, group, res)
        pp = ranks[0] if PEER_PP not in attrs else None if pp == UNKNOWN_RANK else pp
        tp = ranks[1] if PEER_TP not in attrs else None if tp == UNKNOWN_RANK else tp
    return MessageEvent(
        op=op, phase=str(phase), seq=_int(attrs, SEQ), wall_ns=wall,
        mono_ns=_int(attrs, MONO_NS, 0), duration_ns=duration,
        thread_id=thread, peer=peer, peer_pp_rank=pp, peer_tp_rank=tp,
        kind=kind, expected_kind=expected, stashed=attrs.get(STASHED) is True,
        from_stash=attrs.get(FROM_STASH) is True, gather_size=_int(attrs, GATHER, 1),
        carries_attach=_opt_int(attrs, CARRIES), keys=tuple(all_keys),
        tensors=tensors, error_type=error_type,
        error_message=message if isinstance(message, str) else None, group=group,
    )
