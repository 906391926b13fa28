"""Typed, frozen records: what pptrace knows about one tensor, one rank and one transport call.

Everything after the hot path speaks these records: the span encoder turns an ``Event`` into
span attributes and back (``pptrace.model.schema``), the loader returns them, the analyzer reads
them.
This module imports neither torch nor OpenTelemetry, so loading traces never pays for either.

    >>> meta = TensorMeta(name="scores", key=PREFIX + "scores", shape=(8, 5), dtype="float32",
    ...                   device="cpu", nbytes=160)
    >>> meta.device_type
    'cpu'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from pptrace.engines import DEFAULT_TRANSPORT

__all__ = [
    "PREFIX",
    "Direction",
    "Event",
    "RankInfo",
    "RecorderStats",
    "TensorMeta",
]

#: The default transport's reserved key prefix (its engine adapter's: pptrace.engines).
PREFIX = DEFAULT_TRANSPORT.prefix


class Direction(str, enum.Enum):
    """Which side of the transport a call is on."""

    ATTACH = "attach"  # add_auxiliary_output_to_pp_tensors, on the last PP stage
    EXTRACT = "extract"  # pop_auxiliary_output_from_pp_tensors, on PP stage 0


class TensorMeta(NamedTuple):
    """One value a transfer carried, as it sat in the dict: metadata, never its contents.

    The one tensor record of every layer: an attach's or extract's auxiliary value (``name`` is
    its key minus the transport's prefix) and a PP message's value (``name`` is its key: a
    message has no namespace of its own; ``TensorMeta.of_key`` builds one). Both layers
    compare, describe and encode it by the same rules (``pptrace.analyze.payload``).

    A ``NamedTuple``, as ``Event`` is: a loader builds millions of them from templates, and a
    tuple costs about a quarter of a frozen dataclass to build and half to hash.
    """

    name: str  # the name within its layer (see above); repr() of a non-str name
    key: str  # the full dict key; repr() of a non-str key
    shape: tuple[int, ...] = ()
    dtype: str = ""  # "float32"; for a non-tensor the value's type name
    device: str = ""  # as recorded: "cuda:1" (attach/extract), "cuda" (messages); "" non-tensor
    nbytes: int = 0  # of the whole tensor, also when it travelled as a TP slice
    contiguous: bool = True
    is_tensor: bool = True
    fingerprint: str | None = None  # content hash, only when fingerprinting is on
    sliced: bool = False  # travelled as this TP rank's slice, re-assembled by an all-gather

    @classmethod
    def of_key(cls, key: str, shape: tuple[int, ...] = (), dtype: str = "", device: str = "",
               nbytes: int = 0, sliced: bool = False, is_tensor: bool = True,
               fingerprint: str | None = None) -> TensorMeta:
        """A PP message's value: named by its key."""
        return cls(key, key, shape, dtype, device, nbytes, True, is_tensor, fingerprint, sliced)

    @property
    def device_type(self) -> str:
        """The device without its index: ``cuda:1`` -> ``cuda`` (``cuda`` stays ``cuda``)."""
        return self.device.split(":", 1)[0]

    def describe(self) -> str:
        """``float32[8, 5]`` (``/tp`` when it travelled as a TP slice), or a non-tensor's type."""
        if not self.is_tensor:
            return f"non-tensor {self.dtype}"
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]{'/tp' if self.sliced else ''}"


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Who recorded an event. Fields the recorder could not learn are None."""

    rank: int | None = None  # global rank
    world_size: int | None = None
    pp_rank: int | None = None
    pp_size: int | None = None
    tp_rank: int | None = None
    tp_size: int | None = None
    host: str = ""
    pid: int = 0
    #: The recorder's own id for its process (a random hex string drawn at start, the
    #: resource's ``service.instance.id``): a restarted container reuses host and pid, never
    #: this. "" in traces written before it existed, which are keyed by host and pid alone.
    instance: str = ""

    @property
    def is_last_stage(self) -> bool:
        """True on the last PP stage (when the PP layout is known)."""
        return self.pp_rank is not None and self.pp_size is not None and (
            self.pp_rank == self.pp_size - 1
        )

    def layout_order(self) -> tuple[int, int, int]:
        """(PP stage, TP rank, global rank), each unknown one last: the one order in which
        every display (the grid, the message screen, Perfetto's tracks) lists processes."""
        unknown = 1 << 30
        return (unknown if self.pp_rank is None else self.pp_rank,
                unknown if self.tp_rank is None else self.tp_rank,
                unknown if self.rank is None else self.rank)

    def label(self) -> str:
        """A short human name: ``rank 3 (pp 3/4, tp 0)``."""
        parts = []
        if self.pp_rank is not None:
            size = f"/{self.pp_size}" if self.pp_size is not None else ""
            parts.append(f"pp {self.pp_rank}{size}")
        if self.tp_rank is not None:
            parts.append(f"tp {self.tp_rank}")
        head = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{head} ({', '.join(parts)})" if parts else head


class Event(NamedTuple):
    """One call of attach or extract, as recorded on one rank.

    A ``NamedTuple`` rather than a frozen dataclass, unlike the other records: a trace holds
    millions of events, and building a 20-field frozen dataclass costs about 3.8 us in CPython
    3.11 (one ``object.__setattr__`` per field) against about 0.5 us for a tuple. It is just as
    immutable and typed; ``ev._replace(...)`` takes the place of ``dataclasses.replace``.
    """

    direction: Direction
    seq: int  # per process and direction, from 0, in call order
    rank: RankInfo
    start_ns: int  # wall clock (time.time_ns) at the call
    mono_ns: int  # time.monotonic_ns at the call, for ordering within a process
    duration_ns: int
    thread_id: int = 0
    thread_name: str = ""
    subject_type: str = ""  # qualified type name of the output (attach) or observer (extract)
    subject_pp_capable: bool | None = None  # has to_pp_tensors / from_pp_tensors
    tensors: tuple[TensorMeta, ...] = ()  # attach: inserted; extract: the prefixed values found
    keys_before: tuple[str, ...] = ()
    keys_after: tuple[str, ...] = ()
    returned_none: bool = True  # the call returned None (attach always does on success)
    error_type: str | None = None  # qualified exception type when the call raised
    error_message: str | None = None
    inserted_before_error: tuple[str, ...] = ()  # keys the call left behind when it raised
    dropped_before: int = 0  # events this process had dropped when this one was recorded
    run_id: str = ""
    extra: tuple[tuple[str, str], ...] = ()  # free-form tags, sorted

    @property
    def ok(self) -> bool:
        """The call returned normally."""
        return self.error_type is None

    @property
    def names(self) -> tuple[str, ...]:
        """Auxiliary tensor names, in dict order."""
        return tuple(t.name for t in self.tensors)

    @property
    def end_ns(self) -> int:
        """Wall-clock end of the call."""
        return self.start_ns + self.duration_ns


@dataclass(frozen=True, slots=True)
class RecorderStats:
    """A process's recorder counters, written as a stats span at each flush and at exit.

    ``recorded = exported + dropped + overwritten`` once ``final``. ``dropped`` is what no sink
    received (so a trace file lacks it too); ``sink_dropped`` is what one sink lost while the
    other sinks have the events (the OTLP exporter's failed batches; the trace file's failed
    writes when OTLP took the batch).
    """

    rank: RankInfo
    time_ns: int
    recorded: int = 0  # events taken on the hot path
    exported: int = 0  # events handed to the sinks
    dropped: int = 0  # events no sink received (buffer full, export call failed, exit), counted
    overwritten: int = 0  # flight mode: events the ring overwrote before a dump
    internal_errors: int = 0  # failures inside pptrace, contained
    export_errors: int = 0  # exporter calls that failed
    mode: str = "stream"
    run_id: str = ""
    final: bool = False  # the recorder's last word: written by its shutdown, counts complete
    sink_dropped: tuple[tuple[str, int], ...] = ()  # (sink name, events it alone lost), sorted
    rotated: int = 0  # events deleted with the oldest segments of a rotated trace file
    rotated_segments: int = 0  # the segments deleted
    # The PP message layer's events (pptrace.model.messages), counted apart from the events above:
    messages_recorded: int = 0  # made by its wrappers
    messages_exported: int = 0  # handed to the sinks
    messages_dropped: int = 0  # lost: its buffer full, a failed export, no sink
    #: The key prefix of the process's auxiliary transport (given or learnt); None: not recorded
    #: (an older trace, or nothing learnt it), read as the default transport's (``PREFIX``).
    prefix: str | None = None

    def sink_lost(self, sink: str) -> int:
        """Events the sink named ``sink`` lost after taking them (0 when none)."""
        return dict(self.sink_dropped).get(sink, 0)
