"""Raw records to ``Event`` records on the recorder thread: the conversion, and the chunk a sink
reads.

The hot path appends raw tuples (``pptrace.model.raw``); a flush hands each chunk of them to the
sink as a ``RawEvents``, which converts a raw the first time a sink reads it. A sink able to
encode raws itself (``pptrace.export.file_sink.FileSink``) reads ``raws`` with
``convert.shape`` instead and asks for records only where it must. This module imports neither
torch nor the native reader: what needs them (packed metadata, fingerprints) is decoded by
functions the recorder hands in, so that the export side can import it without torch.

    convert = Converter(recorder, rank)
    events = RawEvents(raws, convert, on_failure)
    sink.export(events)
    exported = len(raws) - events.failed
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, overload

from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.raw import Raw
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta

__all__ = [
    "Converter", "RawEvents", "Source", "Unreadable", "UnreadableTensor", "expand", "key_text",
    "qualname",
]


class Source(Protocol):
    """What a converter needs from its recorder (``pptrace.record.recorder.Recorder``)."""

    config: Config
    prefix: str | None

    def decode_packed(self, packed: bytes) -> list[tuple[Any, ...]]:
        """The native reader's packed metadata as ``[(shape, dtype, device, contiguous), ...]``."""
        ...

    def resolve_fingerprint(self, pending: Any) -> str | None:
        """A pending fingerprint's text."""
        ...


def qualname(tp: type) -> str:
    """A type's qualified name (``module.Name``; builtins by their bare name)."""
    module = getattr(tp, "__module__", "")
    name = getattr(tp, "__qualname__", getattr(tp, "__name__", repr(tp)))
    return name if module in ("builtins", "", None) else f"{module}.{name}"


# Keys of these types (and their subclasses) are shown by the builtin type's own repr, in C: a
# subclass's __repr__ (user code, on the recorder thread, where a slow one would hold the exit
# flush past its deadline and cost the final stats span) never runs.
_BUILTIN_REPRS: tuple[tuple[type, Callable[[Any], str]], ...] = (
    (bool, bool.__repr__), (int, int.__repr__), (float, float.__repr__),
    (complex, complex.__repr__), (bytes, bytes.__repr__))
#: A key's text is clipped here (a 10 MB bytes key must not become a 10 MB span attribute).
KEY_CHARS = 200


def key_text(k: object) -> str:
    """A key as a plain str: a str subclass's characters (none of its methods run); a number,
    bytes, None or a tuple of those by the builtin repr; any other object by its type's name.
    No user code runs."""
    if type(k) is str:
        return k
    if isinstance(k, str):
        return str.__getitem__(k, slice(None))  # an exact str copy
    return _shown(k, 2)


def _shown(k: object, depth: int) -> str:
    if isinstance(k, str):  # inside a tuple: quoted, as repr would
        text = str.__repr__(str.__getitem__(k, slice(None)))
    elif k is None:
        text = "None"
    elif type(k) is tuple and depth > 0:
        parts = [_shown(e, depth - 1) for e in k[:8]] + (["..."] if len(k) > 8 else [])
        text = "(" + ", ".join(parts) + ("," if len(k) == 1 else "") + ")"
    else:
        for base, show in _BUILTIN_REPRS:
            if isinstance(k, base):
                try:
                    text = show(k)
                except ValueError:  # an int past Python's digit limit
                    return f"<{qualname(type(k))} too long to show>"
                break
        else:
            return f"<{qualname(type(k))} object>"
    return text if len(text) <= KEY_CHARS else text[:KEY_CHARS] + "..."


def _dtype(dtype: Any) -> str:
    text = str(dtype)
    return text[6:] if text.startswith("torch.") else text


_ITEMSIZE: dict[Any, int] = {}


def _itemsize(dtype: Any) -> int:
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = int(getattr(dtype, "itemsize", 0))
    return size


class Unreadable(NamedTuple):
    """In a raw's items, a tensor the wrapper could not describe without reading it (a sparse or
    nested layout): the event is not converted but counted as lost, with ``why``."""

    why: str


class UnreadableTensor(ValueError):
    """An event holds a tensor pptrace cannot describe; the recorder counts the event as lost."""


def _tensor_meta(key: object, meta: Any, prefix: str, fingerprint: str | None) -> TensorMeta:
    if type(meta) is Unreadable:
        raise UnreadableTensor(f"the event of key {key_text(key)!r} was not recorded: a tensor "
                               f"of {meta.why}, which pptrace records no metadata for")
    k = key_text(key)
    name = k[len(prefix):] if isinstance(key, str) and k.startswith(prefix) else k
    if isinstance(meta, type):
        return TensorMeta(name=name, key=k, dtype=qualname(meta), is_tensor=False)
    shape, dtype, device, contiguous = meta
    numel = 1
    for d in shape:
        numel *= d
    return TensorMeta(
        name=name,
        key=k,
        shape=tuple(shape),
        dtype=_dtype(dtype),
        device=str(device),
        nbytes=numel * _itemsize(dtype),
        contiguous=contiguous,
        fingerprint=fingerprint,
    )


#: What ``Converter.shape`` finds in a raw: (key, seq, start_ns, mono_ns, duration_ns,
#: dropped_before).
Shape = tuple[tuple[Any, ...], int, int, int, int, int]
_ATTACH, _EXTRACT = Direction.ATTACH, Direction.EXTRACT
#: A raw's fields by name, in one C call (faster than one subscript each, and independent of
#: the layout's order).
_FIELDS = operator.itemgetter(
    R.DIRECTION, R.SEQ, R.WALL_NS, R.MONO_NS, R.DURATION_NS, R.THREAD, R.SUBJECT,
    R.KEYS_BEFORE, R.KEYS_AFTER, R.ITEMS, R.RETURNED_NONE, R.ERROR, R.DROPPED, R.FINGERPRINTS)


class Converter:
    """Raw tuples to ``Event`` records for one flush, caching per-type and per-thread strings."""

    def __init__(self, source: Source, rank: RankInfo) -> None:
        self.rank = rank
        self.run_id = source.config.run_id
        # No prefix (not learnt yet): names are the whole keys.
        self.prefix = source.prefix or ""
        self._decode = source.decode_packed
        self._resolve = source.resolve_fingerprint
        #: The native library's renderer (``pptrace/record/native_render.cpp``), when this
        #: process loaded the library (never loaded here: not imported, nothing loaded):
        #: ``FileSink`` writes through it each run of raws whose shape has a template.
        native = sys.modules.get("pptrace.record.native")
        self.render: Callable[..., Any] | None = getattr(
            native.loaded(), "render", None) if native and source.config.native else None
        #: What events get from the converter rather than from their raw: with ``shape``'s key,
        #: all an event is made of (the thread's name is in the key).
        self.context = (rank, self.run_id, self.prefix)
        self.threads = {t.ident: t.name for t in threading.enumerate()}
        self.subjects: dict[tuple[Direction, type], tuple[str, bool | None]] = {}
        # Step after step the same names, shapes and dtypes come back: one frozen TensorMeta
        # serves them all (str keys only, so that no user object's __eq__ runs here).
        self.metas: dict[tuple[str, Any], TensorMeta] = {}

    def tensor(self, key: object, meta: Any) -> TensorMeta:
        if type(key) is not str:
            return _tensor_meta(key, meta, self.prefix, None)
        found = self.metas.get((key, meta))
        if found is None:
            found = self.metas[(key, meta)] = _tensor_meta(key, meta, self.prefix, None)
        return found

    def subject(self, direction: Direction, tp: type) -> tuple[str, bool | None]:
        found = self.subjects.get((direction, tp))
        if found is None:
            if tp is type(None):
                capable = None
            elif direction is Direction.ATTACH:
                capable = getattr(tp, "to_pp_tensors", None) is not None  # None blocks it
            else:
                capable = getattr(tp, "from_pp_tensors", None) is not None
            found = self.subjects[(direction, tp)] = (qualname(tp), capable)
        return found

    def shape(self, raw: Raw) -> Shape | None:
        """Split a raw tuple into its shape and what varies from one call to the next.

        Returns ``(key, seq, start_ns, mono_ns, duration_ns, dropped_before)``. ``key`` holds,
        as hashable values, everything else ``__call__`` builds the event from (direction,
        thread id and name, subject type, keys before and after, items, returned-None, error);
        the rest is ``context``. None when the raw must be converted on its own: fingerprints
        (they differ per call), a key that is not a ``str`` (comparing it would run the user's
        ``__eq__``), a number that is not a plain int in [0, 2**62), anything malformed.
        """
        try:
            if type(raw) is not tuple or len(raw) != R.RAW_LEN:
                return None
            (direction, seq, wall_ns, mono_ns, duration_ns, thread, subject, before, after,
             items, returned_none, error, dropped, fingerprints) = _FIELDS(raw)
            if fingerprints or type(returned_none) is not bool:
                return None
            if direction is _ATTACH:
                attach = True
            elif direction is _EXTRACT:
                attach = False
            else:
                return None
            if not (type(seq) is type(wall_ns) is type(mono_ns) is type(duration_ns)
                    is type(dropped) is int):
                return None
            # Each within [0, 2**62): any negative one sets the high bits, and the end time
            # (wall_ns + duration_ns) stays within int64.
            if (seq | wall_ns | mono_ns | duration_ns | dropped) >> 62:
                return None
            if type(thread) is int:
                ident, name = thread, self.threads.get(thread, "")
            else:
                ident, name = thread.ident or 0, thread.name
                if type(ident) is not int or type(name) is not str:
                    return None
            for k in before:
                if type(k) is not str:
                    return None
            for k in after:
                if type(k) is not str:
                    return None
            if type(items) is bytes:  # packed by the native reader: the bytes say it all
                pass
            elif type(items) is list:  # the wrappers' flat form: keys every fifth item
                for k in items[::5]:
                    if type(k) is not str:
                        return None
                items = tuple(items)
            else:
                for k, meta in items:
                    if type(k) is not str or type(meta) is Unreadable:
                        return None
            if error is not None and not (type(error) is tuple and len(error) == 2 and
                                          type(error[0]) is str and type(error[1]) is str):
                return None
        except Exception:  # a malformed raw: __call__ says what is wrong with it
            return None
        key = (attach, ident, name, subject, before, after, items, returned_none, error)
        return key, seq, wall_ns, mono_ns, duration_ns, dropped

    def __call__(self, raw: Raw) -> Event:
        full = expand(raw, self.prefix, self._decode)
        if type(full) is not tuple or len(full) != R.RAW_LEN:
            raise ValueError(f"a raw record of {len(full)} fields, not {R.RAW_LEN}")
        (direction, seq, wall_ns, mono_ns, duration_ns, thread, subject, before, after, items,
         returned_none, error, dropped, fingerprints) = _FIELDS(full)
        # The Thread object keeps its name after the thread ends (its ident may be reused).
        if isinstance(thread, int):
            ident, name = thread, self.threads.get(thread, "")
        else:
            ident, name = thread.ident or 0, thread.name
        prefix = self.prefix
        fps: Sequence[Any] = fingerprints or ()
        if fps:
            resolve = self._resolve
            tensors = tuple(_tensor_meta(key, meta, prefix, resolve(fps[i]))
                            for i, (key, meta) in enumerate(items))
        else:
            tensors = tuple(self.tensor(key, meta) for key, meta in items)
        subject_type, capable = self.subject(direction, subject)
        inserted: tuple[str, ...] = ()
        if error is not None and direction is Direction.ATTACH:
            inserted = tuple(t.key for t in tensors)
        return Event(
            direction=direction,
            seq=seq,
            rank=self.rank,
            start_ns=wall_ns,
            mono_ns=mono_ns,
            duration_ns=duration_ns,
            thread_id=ident,
            thread_name=name,
            subject_type=subject_type,
            subject_pp_capable=capable,
            tensors=tensors,
            keys_before=tuple(map(key_text, before)),
            keys_after=tuple(map(key_text, after)),
            returned_none=returned_none,
            error_type=error[0] if error else None,
            error_message=error[1] if error else None,
            inserted_before_error=inserted,
            dropped_before=dropped,
            run_id=self.run_id,
        )


class RawEvents(Sequence[Event]):
    """One chunk of a flush: its raw tuples, and their ``Event`` records made on first use.

    A sink that needs records reads it as a sequence (each raw is converted once, however
    many sinks read it). A sink that encodes raw tuples itself (``FileSink``) reads ``raws``
    with ``convert.shape`` and asks ``event(i)`` only for what it cannot encode directly. A raw
    that fails conversion is reported to ``on_failure``, counted in ``failed`` and left out.

        events = RawEvents(raws, converter, on_failure)
        sink.export(events)
        exported = len(raws) - events.failed
    """

    def __init__(self, raws: Sequence[Raw], convert: Converter,
                 on_failure: Callable[[BaseException], None]) -> None:
        self.raws = raws
        self.convert = convert
        self.failed = 0
        self._on_failure = on_failure
        self._memo: dict[int, Event | None] = {}
        self._events: list[Event] | None = None

    def event(self, i: int) -> Event | None:
        """The record of ``raws[i]``, or None when it cannot be converted (counted once)."""
        memo = self._memo
        if i in memo:
            return memo[i]
        try:
            event: Event | None = self.convert(self.raws[i])
        except Exception as exc:
            event = None
            self.failed += 1
            self._on_failure(exc)
        memo[i] = event
        return event

    def _all(self) -> list[Event]:
        if self._events is None:
            found = (self.event(i) for i in range(len(self.raws)))
            self._events = [e for e in found if e is not None]
        return self._events

    def __bool__(self) -> bool:
        # Without converting anything: a raw that later fails conversion leaves fewer events.
        return bool(self.raws)

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._all())


def _no_packed(packed: bytes) -> list[tuple[Any, ...]]:
    raise ValueError("packed metadata without a native reader")


def expand(raw: Raw, prefix: str = PREFIX,
           decode: Callable[[bytes], list[tuple[Any, ...]]] = _no_packed) -> Raw:
    """A raw record with flat or packed items (the wrappers' forms) in the general form."""
    if type(raw) is not tuple or len(raw) != R.RAW_LEN:
        return raw  # a malformed one goes through as is: its conversion counts it
    items = raw[R.ITEMS]
    if type(items) is bytes:
        general: Any = _unpack(raw, prefix, decode)
    elif type(items) is list:
        flat = iter(items)
        # zip takes the key from ``flat``, then the four metadata fields (all in C); one shared
        # iterator, so never strict (the list holds whole groups of five by construction).
        general = tuple(zip(flat, zip(flat, flat, flat, flat, strict=False), strict=False))
    else:
        return raw
    return raw[:R.ITEMS] + (general,) + raw[R.ITEMS + 1:]


def _unpack(raw: Raw, prefix: str,
            decode: Callable[[bytes], list[tuple[Any, ...]]]) -> tuple[tuple[Any, Any], ...]:
    """((key, meta), ...) of a raw whose items the native reader packed (see ``model.raw``)."""
    direction, before, after = raw[R.DIRECTION], raw[R.KEYS_BEFORE], raw[R.KEYS_AFTER]
    if direction is Direction.ATTACH:
        keys = after[len(before):]
    else:  # the reader's test: a str key (or a str subclass's) that starts with the prefix
        keys = tuple(k for k in before if issubclass(type(k), str) and str.startswith(k, prefix))
    metas = decode(raw[R.ITEMS])
    if len(metas) != len(keys):
        raise ValueError(f"{len(metas)} packed tensors for {len(keys)} keys")
    return tuple(zip(keys, metas, strict=True))
