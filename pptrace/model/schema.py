"""The span schema: span names, attribute keys, the schema version, and the codec both ways.

This module is pptrace's contract with every reader (the loader, Jaeger, an OTLP collector):
``event_to_attributes`` and ``attributes_to_event`` are inverses, tested as a round trip.
Per-tensor detail travels as parallel array attributes (``pptrace.tensor.*``, one element per
tensor, in dict order) rather than span events, so that every backend shows it as plain tags.

    attrs = event_to_attributes(event)        # -> {"pptrace.direction": "attach", ...}
    event = attributes_to_event(attrs, ...)   # -> the same Event

Version 2 keeps the per-process constants on the resource (``resource_attributes``) and leaves
out of each span what its resource already says and what follows from the rest of the span
(``event_to_attributes`` lists what); version 3 (what the sinks write) is version 2 with its
string arrays joined (``pptrace.model.joined``):

    res = resource_attributes(rank, run_id, main_thread="MainThread")
    attrs = event_to_attributes(event, res)   # only what the resource does not say
    event = attributes_to_event(attrs, ..., resource=res)

It imports neither torch nor OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pptrace.model.derived import (
    ITEMSIZES,
    implied_devices,
    implied_keys_after,
    implied_nbytes,
    tensors_at,
)
from pptrace.model.errors import SchemaVersionError
from pptrace.model.joined import join, split
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.model.span_reader import SpanReader

__all__ = [
    "JOINED", "READ_VERSION", "RESOURCE_KEYS", "SCHEMA_VERSION", "SPAN_ATTACH", "SPAN_EXTRACT",
    "SPAN_STATS", "SPAN_NAMES", "ITEMSIZES", "AttributeValue", "attributes_to_event",
    "attributes_to_stats", "compact_against", "event_to_attributes", "implied_keys_after",
    "joins", "resource_attributes", "stats_to_attributes",
]

#: The version the sinks write (``PPTRACE_SCHEMA=1`` or ``2`` keeps writing that one); bumped
#: on any incompatible change; readers refuse versions above theirs.
SCHEMA_VERSION = 3
#: The newest version this pptrace reads (it reads every version from 1 up to it).
READ_VERSION = 3

SPAN_ATTACH = "pptrace.attach"
SPAN_EXTRACT = "pptrace.extract"
SPAN_STATS = "pptrace.recorder"
SPAN_NAMES = frozenset({SPAN_ATTACH, SPAN_EXTRACT, SPAN_STATS})

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int]

# --- attribute keys ------------------------------------------------------------------------
VERSION = "pptrace.schema_version"  # int
DIRECTION = "pptrace.direction"  # "attach" | "extract"
SEQ = "pptrace.seq"  # int, per process and direction
RUN_ID = "pptrace.run_id"  # str, one per pptrace run (all ranks share it)
RANK = "pptrace.rank"  # int, global rank (absent when unknown)
WORLD_SIZE = "pptrace.world_size"  # int
PP_RANK = "pp_rank"  # int, the engine's own name
PP_SIZE = "pptrace.pp_size"  # int
TP_RANK = "tp_rank"  # int, the engine's own name
TP_SIZE = "pptrace.tp_size"  # int
HOST = "pptrace.host"  # str
PID = "pptrace.pid"  # int
THREAD_ID = "pptrace.thread.id"  # int
THREAD_NAME = "pptrace.thread.name"  # str
MONO_NS = "pptrace.mono_ns"  # int, time.monotonic_ns at the call
DURATION_NS = "pptrace.duration_ns"  # int, exact call duration (span times are the same)
SUBJECT_TYPE = "pptrace.subject.type"  # str, output type (attach) or observer type (extract)
SUBJECT_PP = "pptrace.subject.pp_capable"  # bool, has to_pp_tensors / from_pp_tensors
T_NAMES = "pptrace.tensor.names"  # str[]
T_KEYS = "pptrace.tensor.keys"  # str[]
T_SHAPES = "pptrace.tensor.shapes"  # str[], "8,5"; "" for a 0-d tensor
T_DTYPES = "pptrace.tensor.dtypes"  # str[], "float32"
T_DEVICES = "pptrace.tensor.devices"  # str[], "cuda:0"
T_NBYTES = "pptrace.tensor.nbytes"  # int[]
T_CONTIG = "pptrace.tensor.contiguous"  # bool[]
T_IS_TENSOR = "pptrace.tensor.is_tensor"  # bool[]
T_FINGERPRINTS = "pptrace.tensor.fingerprints"  # str[], only when fingerprinting is on
TENSOR_COUNT = "pptrace.tensor.count"  # int
TOTAL_BYTES = "pptrace.tensor.total_bytes"  # int
KEYS_BEFORE = "pptrace.keys.before"  # str[]
KEYS_AFTER = "pptrace.keys.after"  # str[]
#: int, versions 2 and 3 only: ``KEYS_BEFORE`` lacks the tensor keys (``T_KEYS``, in order), which
#: stood in it from this index on (an extract's keys before hold the keys it extracts).
KEYS_TENSORS_AT = "pptrace.keys.tensors_at"
RETURNED_NONE = "pptrace.returned_none"  # bool
ERROR_TYPE = "pptrace.error.type"  # str, qualified exception type
ERROR_MESSAGE = "pptrace.error.message"  # str, exact str(exception)
INSERTED_BEFORE_ERROR = "pptrace.error.inserted_keys"  # str[]
DROPPED_BEFORE = "pptrace.dropped_before"  # int
EXTRA_PREFIX = "pptrace.extra."  # free-form tags: pptrace.extra.<name> = str
# Stats span only. Once ``S_FINAL``: recorded = exported + dropped + overwritten.
S_RECORDED = "pptrace.stats.recorded"  # int, events taken on the hot path
S_EXPORTED = "pptrace.stats.exported"  # int, events handed to the sinks
#: int, events no sink received (buffer full, a failed export call, exit): the trace file lacks
#: them too, so only these (and ``S_OVERWRITTEN``) may weaken conclusions drawn from the file.
S_DROPPED = "pptrace.stats.dropped"
S_OVERWRITTEN = "pptrace.stats.overwritten"  # int, flight mode: overwritten by the ring
S_INTERNAL = "pptrace.stats.internal_errors"  # int
S_EXPORT_ERRORS = "pptrace.stats.export_errors"  # int, failed exporter calls, any sink
S_MODE = "pptrace.stats.mode"  # "stream" | "flight"
S_TIME_NS = "pptrace.stats.time_ns"  # int
#: bool, true on the stats spans the recorder wrote once its counts were final (by its shutdown):
#: a process whose trace has none did not finish its exit flush (killed, or out of time).
S_FINAL = "pptrace.stats.final"
#: int, ``S_SINK_DROPPED.format(name)``: events the sink ``name`` (``otlp``) lost after taking
#: them. The other sinks (the trace file) still have them: never read as the file's own losses.
S_SINK_DROPPED = "pptrace.stats.sink.{}.dropped"
#: int, events deleted with the oldest segments of a rotated trace file (the trace lacks them
#: by design: the analyzer judges only the window every end still covers), and those segments.
S_ROTATED = "pptrace.stats.rotated"
S_ROTATED_SEGMENTS = "pptrace.stats.rotated_segments"  # int
#: int, the PP message layer's events (its own counts, apart from attach/extract): recorded by
#: its wrappers, handed to the sinks, lost. Only a process that recorded messages carries them.
S_MSG_RECORDED = "pptrace.stats.messages.recorded"
S_MSG_EXPORTED = "pptrace.stats.messages.exported"
S_MSG_DROPPED = "pptrace.stats.messages.dropped"
S_PREFIX = "pptrace.stats.prefix"  # str, the transport's key prefix; absent: PREFIX's
_SINK_HEAD, _SINK_TAIL = S_SINK_DROPPED.split("{}")
#: What ``attributes_to_stats`` reads where a version 3 stats span leaves a counter out.
_STATS_DEFAULTS = {k: (v, type(v)) for k, v in (
    (S_RECORDED, 0), (S_EXPORTED, 0), (S_DROPPED, 0), (S_OVERWRITTEN, 0), (S_INTERNAL, 0),
    (S_EXPORT_ERRORS, 0), (S_MODE, "stream"), (S_FINAL, False), (S_MSG_RECORDED, 0),
    (S_MSG_EXPORTED, 0), (S_MSG_DROPPED, 0))}
# Resource only. Version 2 writes the per-process constants on the resource alone (VERSION,
# RUN_ID, the ranks and sizes under their span keys; host and pid under OpenTelemetry's names),
# with the name of the process's first recording thread, which a span without THREAD_NAME takes.
R_HOST = "host.name"  # str
R_PID = "process.pid"  # int
#: str, each recorder's random id: tells apart processes of one host and pid (a restart, another
#: PID namespace); a trace without it (older) keys its processes by host and pid alone.
R_INSTANCE = "service.instance.id"
R_THREAD_MAIN_NAME = "pptrace.thread.main_name"  # str
R_THREAD_MAIN_ID = "pptrace.thread.main_id"  # int, that thread's id
#: str, the device of the first tensor the process recorded: a span without ``T_DEVICES`` has
#: it for every tensor ("" for a non-tensor).
R_MAIN_DEVICE = "pptrace.tensor.main_device"
#: str, the subject type of the process's first event (its output's or observer's class): a
#: span without ``SUBJECT_TYPE`` has it.
R_MAIN_SUBJECT = "pptrace.subject.main_type"
#: Where a reader finds what a span lacks: the span's key -> its key on the span's resource.
RESOURCE_KEYS: Mapping[str, str] = {
    VERSION: VERSION, RUN_ID: RUN_ID, RANK: RANK, WORLD_SIZE: WORLD_SIZE, PP_RANK: PP_RANK,
    PP_SIZE: PP_SIZE, TP_RANK: TP_RANK, TP_SIZE: TP_SIZE, HOST: R_HOST, PID: R_PID,
    THREAD_NAME: R_THREAD_MAIN_NAME, THREAD_ID: R_THREAD_MAIN_ID, SUBJECT_TYPE: R_MAIN_SUBJECT,
    R_INSTANCE: R_INSTANCE,  # on the resource only, in every version
}

#: The string arrays a version 3 span writes joined (``pptrace.model.joined``).
JOINED = frozenset({T_NAMES, T_KEYS, T_SHAPES, T_DTYPES, T_DEVICES, T_FINGERPRINTS, KEYS_BEFORE,
                    KEYS_AFTER, INSERTED_BEFORE_ERROR})

_NAMED = {SPAN_ATTACH: Direction.ATTACH, SPAN_EXTRACT: Direction.EXTRACT}


def span_name(direction: Direction) -> str:
    """Return the span name for a direction."""
    return SPAN_ATTACH if direction is Direction.ATTACH else SPAN_EXTRACT


def _rank_items(rank: RankInfo) -> tuple[tuple[str, int | None], ...]:
    return ((RANK, rank.rank), (WORLD_SIZE, rank.world_size), (PP_RANK, rank.pp_rank),
            (PP_SIZE, rank.pp_size), (TP_RANK, rank.tp_rank), (TP_SIZE, rank.tp_size))


def resource_attributes(rank: RankInfo, run_id: str, version: int = SCHEMA_VERSION,
                        main_thread: str | None = None, main_thread_id: int | None = None,
                        main_device: str | None = None,
                        main_subject: str | None = None) -> dict[str, AttributeValue]:
    """The attributes of a process's resource: in version 2 every per-process constant
    (``RESOURCE_KEYS``; the main thread's name and id, the main device and subject type, when
    known); in version 1 the host, pid, run id and ranks that it always named (its spans carry
    everything), and the instance id."""
    if version == 1:
        old: dict[str, AttributeValue] = {R_HOST: rank.host, R_PID: rank.pid, RUN_ID: run_id}
        if rank.instance:
            old[R_INSTANCE] = rank.instance
        for key, value in ((RANK, rank.rank), (PP_RANK, rank.pp_rank), (TP_RANK, rank.tp_rank)):
            if value is not None:
                old[key] = value
        return old
    out: dict[str, AttributeValue] = {VERSION: version, RUN_ID: run_id}
    for key, value in _rank_items(rank):
        if value is not None:
            out[key] = value
    out[R_HOST] = rank.host
    out[R_PID] = rank.pid
    known: tuple[tuple[str, AttributeValue | None], ...] = (
        (R_INSTANCE, rank.instance or None), (R_THREAD_MAIN_NAME, main_thread),
        (R_THREAD_MAIN_ID, main_thread_id), (R_MAIN_DEVICE, main_device),
        (R_MAIN_SUBJECT, main_subject))
    out.update((name, given) for name, given in known if given is not None)  # each when known
    return out


def _constants(rank: RankInfo, run_id: str, resource: Mapping[str, Any] | None,
               out: dict[str, AttributeValue]) -> None:
    """The process's constants on the span: all of them (version 1: no version-2 resource), or
    only those the resource does not say (a rank learnt after the resource was made)."""
    items: list[tuple[str, AttributeValue | None]] = [(RUN_ID, run_id), *_rank_items(rank),
                                                      (HOST, rank.host), (PID, rank.pid)]
    for key, value in items:
        if value is not None and (resource is None or resource.get(RESOURCE_KEYS[key]) != value):
            out[key] = value


def compact_against(resource: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The resource to compact against: one that says version 2 or 3, else None (version 1)."""
    return resource if resource is not None and resource.get(VERSION) in (2, 3) else None


def joins(resource: Mapping[str, Any] | None) -> bool:
    """Whether spans under ``resource`` join their string arrays (version 3)."""
    return resource is not None and resource.get(VERSION) == 3


def event_to_attributes(event: Event, resource: Mapping[str, Any] | None = None,
                        exact_times: bool = False) -> dict[str, AttributeValue]:
    """Encode an event as span attributes (the inverse of ``attributes_to_event``).

    Under a version 2 ``resource`` (``resource_attributes``) the span leaves out what the
    resource says (the process's constants; the thread's name and id, the subject's type, the
    devices when they are the main ones) and what follows from the rest: the tensor count and
    total bytes; ``T_KEYS`` when each key is ``PREFIX + name``; ``T_NBYTES`` when each is
    elements times ``ITEMSIZES``; ``T_CONTIG`` and ``T_IS_TENSOR`` when all true; the tensor
    keys in ``KEYS_BEFORE`` (``KEYS_TENSORS_AT`` says where); ``KEYS_AFTER`` when it is
    ``implied_keys_after``; ``RETURNED_NONE`` when true for an attach or a call that raised,
    false for an extract that returned; ``DROPPED_BEFORE`` when 0; with ``exact_times`` (a
    trace file: nanosecond times, names read with the spans; not Jaeger) ``DURATION_NS`` and
    ``DIRECTION``. Version 3 also joins string arrays (``JOINED``, ``pptrace.model.joined``).
    Without a resource it is a version 1 span, complete in itself.

    The attributes that change from one call to the next come first, in a fixed order, and
    everything that repeats from one microbatch to the next after them: a reader can then tell
    two spans of the same shape apart by their first few hundred bytes (``pptrace.load.fast``).
    Readers must not depend on the order; pptrace's own fast path falls back when it differs.
    """
    t = event.tensors
    res = compact_against(resource)
    out: dict[str, AttributeValue] = {SEQ: event.seq, MONO_NS: event.mono_ns}
    if res is None or not exact_times or event.duration_ns < 0:
        out[DURATION_NS] = event.duration_ns
    if res is None or event.dropped_before:
        out[DROPPED_BEFORE] = event.dropped_before
    if res is None or res.get(R_THREAD_MAIN_ID) != event.thread_id:
        out[THREAD_ID] = event.thread_id
    if res is None:
        out[VERSION] = 1
    if res is None or not exact_times:
        out[DIRECTION] = event.direction.value
    _constants(event.rank, event.run_id, res, out)
    if res is None or res.get(R_THREAD_MAIN_NAME) != event.thread_name:
        out[THREAD_NAME] = event.thread_name
    if res is None or res.get(R_MAIN_SUBJECT) != event.subject_type:
        out[SUBJECT_TYPE] = event.subject_type
    if res is None:
        out[TENSOR_COUNT] = len(t)
        out[TOTAL_BYTES] = sum(m.nbytes for m in t)
    out[T_NAMES] = [m.name for m in t]
    keys = [m.key for m in t]
    if res is None or any(m.key != PREFIX + m.name for m in t):
        out[T_KEYS] = keys
    out[T_SHAPES] = [",".join(map(str, m.shape)) for m in t]
    out[T_DTYPES] = [m.dtype for m in t]
    devices = [m.device for m in t]
    if res is None or implied_devices(res.get(R_MAIN_DEVICE), [m.is_tensor for m in t]) != devices:
        out[T_DEVICES] = devices
    if res is None or any(implied_nbytes(m.shape, m.dtype, m.is_tensor) != m.nbytes for m in t):
        out[T_NBYTES] = [m.nbytes for m in t]
    if res is None or not all(m.contiguous for m in t):
        out[T_CONTIG] = [m.contiguous for m in t]
    if res is None or not all(m.is_tensor for m in t):
        out[T_IS_TENSOR] = [m.is_tensor for m in t]
    before = list(event.keys_before)
    at = None if res is None else tensors_at(before, keys)
    if at is not None:
        del before[at:at + len(keys)]
    out[KEYS_BEFORE] = before
    if at is not None:
        out[KEYS_TENSORS_AT] = at
    if res is None or tuple(event.keys_after) != implied_keys_after(event):
        out[KEYS_AFTER] = list(event.keys_after)
    if res is None or event.returned_none != (event.direction is Direction.ATTACH
                                              or event.error_type is not None):
        out[RETURNED_NONE] = event.returned_none
    if event.subject_pp_capable is not None:
        out[SUBJECT_PP] = event.subject_pp_capable
    if any(m.fingerprint is not None for m in t):
        out[T_FINGERPRINTS] = [m.fingerprint or "" for m in t]
    if event.error_type is not None:
        out[ERROR_TYPE] = event.error_type
        out[ERROR_MESSAGE] = event.error_message or ""
        out[INSERTED_BEFORE_ERROR] = list(event.inserted_before_error)
    for name, value in event.extra:
        out[EXTRA_PREFIX + name] = value
    return join(out, JOINED) if joins(res) else out


def _check_version(r: SpanReader) -> int:
    version = r.integer(VERSION)
    if version > READ_VERSION or version < 1:
        raise SchemaVersionError(f"{r.where}pptrace schema version {version!r:.20} is not "
                                 f"supported (this pptrace reads versions 1 to {READ_VERSION}; "
                                 "upgrade pptrace)")
    return version


def _rank_from(r: SpanReader) -> RankInfo:
    return RankInfo(
        rank=r.opt_integer(RANK), world_size=r.opt_integer(WORLD_SIZE),
        pp_rank=r.opt_integer(PP_RANK), pp_size=r.opt_integer(PP_SIZE),
        tp_rank=r.opt_integer(TP_RANK), tp_size=r.opt_integer(TP_SIZE),
        host=r.string(HOST, ""), pid=r.integer(PID, 0), instance=r.string(R_INSTANCE, ""))


def _devices(r: SpanReader, resource: Mapping[str, Any] | None,
             is_tensor: Sequence[bool]) -> list[str]:
    """A version 2 span's devices without ``T_DEVICES``: the resource's main device."""
    devices = implied_devices((resource or {}).get(R_MAIN_DEVICE), is_tensor)
    if devices is None:
        raise SchemaVersionError(f"{r.where}attribute {T_DEVICES!r} is missing and the "
                                 f"resource has no string {R_MAIN_DEVICE!r}")
    return devices


def _nbytes(r: SpanReader, shape: tuple[int, ...], dtype: str, is_tensor: bool) -> int:
    """A version 2 value's bytes without ``T_NBYTES``: elements times its dtype's size."""
    size = implied_nbytes(shape, dtype, is_tensor)
    if size is None:
        raise SchemaVersionError(f"{r.where}attribute {T_NBYTES!r} is missing and dtype "
                                 f"{dtype!r:.40} has no known element size")
    return size


def attributes_to_event(
    attrs: Mapping[str, Any],
    start_ns: int = 0,
    end_ns: int | None = None,
    where: str = "",
    resource: Mapping[str, Any] | None = None,
    name: str = "",
) -> Event:
    """Decode a pptrace event span's attributes (the inverse of ``event_to_attributes``).

    ``resource``: the attributes of the span's resource (its process tags in Jaeger), where
    version 2 keeps what every span of a process shares (``RESOURCE_KEYS``). What a version 2
    span leaves out (``event_to_attributes``) is rebuilt from the rest, and a version 3 span's
    joined arrays are split; a span without
    ``DURATION_NS`` lasted from ``start_ns`` to ``end_ns``, and one without ``DIRECTION`` is
    what its ``name`` says.
    """
    r = SpanReader(attrs, where, resource, RESOURCE_KEYS)
    version = _check_version(r)
    if version >= 3:
        attrs = split(attrs, JOINED)
        r = SpanReader(attrs, where, resource, RESOURCE_KEYS)
    v2 = version >= 2
    try:
        if v2 and DIRECTION not in attrs and name in _NAMED:
            direction = _NAMED[name]
        else:
            direction = Direction(r.string(DIRECTION))
    except ValueError:
        raise SchemaVersionError(f"{where}unknown direction {attrs.get(DIRECTION)!r:.40}") from None
    names = r.array(T_NAMES, str)
    n = len(names)
    if v2 and T_KEYS not in attrs:
        keys = [PREFIX + name for name in names]
    else:
        keys = r.array(T_KEYS, str, n)
    shapes = r.shapes(T_SHAPES, n)
    dtypes = r.array(T_DTYPES, str, n)
    every = [True] * n if v2 else None  # version 2 leaves out all-true lists
    contig = r.array(T_CONTIG, bool, n, every)
    is_tensor = r.array(T_IS_TENSOR, bool, n, every)
    if v2 and T_DEVICES not in attrs:
        devices = _devices(r, resource, is_tensor)
    else:
        devices = r.array(T_DEVICES, str, n)
    if v2 and T_NBYTES not in attrs:
        nbytes = [_nbytes(r, shapes[i], dtypes[i], is_tensor[i]) for i in range(n)]
    else:
        nbytes = r.array(T_NBYTES, int, n)
    fps: list[str | None] = [None] * n
    if T_FINGERPRINTS in attrs:
        fps = [f or None for f in r.array(T_FINGERPRINTS, str, n)]
    tensors = tuple(
        TensorMeta(name=names[i], key=keys[i], shape=shapes[i], dtype=dtypes[i],
                   device=devices[i], nbytes=nbytes[i], contiguous=contig[i],
                   is_tensor=is_tensor[i], fingerprint=fps[i])
        for i in range(n))
    before = r.array(KEYS_BEFORE, str)
    if v2 and KEYS_TENSORS_AT in attrs:
        at = r.integer(KEYS_TENSORS_AT)
        if not 0 <= at <= len(before):
            raise SchemaVersionError(f"{where}attribute {KEYS_TENSORS_AT!r} is {at}, outside "
                                     f"the {len(before)} keys before")
        before[at:at] = keys
    duration = r.integer(DURATION_NS, 0)
    if DURATION_NS not in attrs and end_ns is not None:
        duration = max(0, end_ns - start_ns)
    error_type = r.string(ERROR_TYPE) if ERROR_TYPE in attrs else None
    extra = tuple(sorted((k[len(EXTRA_PREFIX):], str(v)) for k, v in attrs.items()
                         if k.startswith(EXTRA_PREFIX)))
    event = Event(
        direction=direction,
        seq=r.integer(SEQ),
        rank=_rank_from(r),
        start_ns=start_ns,
        mono_ns=r.integer(MONO_NS, 0),
        duration_ns=duration,
        thread_id=r.integer(THREAD_ID, 0),
        thread_name=r.string(THREAD_NAME, ""),
        subject_type=r.string(SUBJECT_TYPE, ""),
        subject_pp_capable=r.boolean(SUBJECT_PP) if SUBJECT_PP in attrs else None,
        tensors=tensors,
        keys_before=tuple(before),
        keys_after=tuple(r.array(KEYS_AFTER, str)),
        returned_none=r.boolean(RETURNED_NONE, not v2 or direction is Direction.ATTACH
                                or error_type is not None),
        error_type=error_type,
        error_message=r.string(ERROR_MESSAGE, "") if error_type is not None else None,
        inserted_before_error=tuple(r.array(INSERTED_BEFORE_ERROR, str)),
        dropped_before=r.integer(DROPPED_BEFORE, 0),
        run_id=r.string(RUN_ID, ""),
        extra=extra,
    )
    if v2 and KEYS_AFTER not in attrs:
        return event._replace(keys_after=implied_keys_after(event))
    return event


def stats_to_attributes(stats: RecorderStats,
                        resource: Mapping[str, Any] | None = None) -> dict[str, AttributeValue]:
    """Encode recorder counters as the stats span's attributes (under a version 2 or 3
    ``resource``, without what it says, as ``event_to_attributes``; version 3 also without the
    counters that are the reader's defaults)."""
    res = compact_against(resource)
    out: dict[str, AttributeValue] = {} if res is not None else {VERSION: 1}
    _constants(stats.rank, stats.run_id, res, out)
    out.update({
        S_TIME_NS: stats.time_ns, S_RECORDED: stats.recorded, S_EXPORTED: stats.exported,
        S_DROPPED: stats.dropped, S_OVERWRITTEN: stats.overwritten,
        S_INTERNAL: stats.internal_errors, S_EXPORT_ERRORS: stats.export_errors,
        S_MODE: stats.mode, S_FINAL: stats.final,
    })
    if stats.rotated or stats.rotated_segments:  # only a rotated file's spans carry them
        out[S_ROTATED] = stats.rotated
        out[S_ROTATED_SEGMENTS] = stats.rotated_segments
    if stats.messages_recorded or stats.messages_exported or stats.messages_dropped:
        out[S_MSG_RECORDED] = stats.messages_recorded
        out[S_MSG_EXPORTED] = stats.messages_exported
        out[S_MSG_DROPPED] = stats.messages_dropped
    out.update({S_PREFIX: stats.prefix} if stats.prefix is not None else {})
    for sink, dropped in stats.sink_dropped:
        out[S_SINK_DROPPED.format(sink)] = dropped
    if joins(res):  # version 3: a count of 0, the stream mode and not final are the defaults
        return {k: v for k, v in out.items()
                if k not in _STATS_DEFAULTS or (v, type(v)) != _STATS_DEFAULTS[k]}
    return out


def attributes_to_stats(attrs: Mapping[str, Any], where: str = "",
                        resource: Mapping[str, Any] | None = None) -> RecorderStats:
    """Decode the stats span's attributes (the inverse of ``stats_to_attributes``); what the
    span lacks of ``RESOURCE_KEYS`` comes from ``resource``, as for ``attributes_to_event``."""
    r = SpanReader(attrs, where, resource, RESOURCE_KEYS)
    _check_version(r)
    return RecorderStats(
        rank=_rank_from(r),
        time_ns=r.integer(S_TIME_NS, 0),
        recorded=r.integer(S_RECORDED, 0),
        exported=r.integer(S_EXPORTED, 0),
        dropped=r.integer(S_DROPPED, 0),
        overwritten=r.integer(S_OVERWRITTEN, 0),
        internal_errors=r.integer(S_INTERNAL, 0),
        export_errors=r.integer(S_EXPORT_ERRORS, 0),
        mode=r.string(S_MODE, "stream"),
        run_id=r.string(RUN_ID, ""),
        final=r.boolean(S_FINAL, False),
        rotated=r.integer(S_ROTATED, 0),
        rotated_segments=r.integer(S_ROTATED_SEGMENTS, 0),
        messages_recorded=r.integer(S_MSG_RECORDED, 0),
        messages_exported=r.integer(S_MSG_EXPORTED, 0),
        messages_dropped=r.integer(S_MSG_DROPPED, 0),
        prefix=r.string(S_PREFIX) if S_PREFIX in attrs else None,
        sink_dropped=tuple(sorted(
            (key[len(_SINK_HEAD):-len(_SINK_TAIL)], r.integer(key)) for key in attrs
            if isinstance(key, str) and key.startswith(_SINK_HEAD) and key.endswith(_SINK_TAIL)
            and len(key) > len(_SINK_HEAD) + len(_SINK_TAIL))),
    )
