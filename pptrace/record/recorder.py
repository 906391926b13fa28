"""The per-process recorder: a hot-path buffer of raw tuples and a background flush into sinks.

The engine's thread only appends a tuple (metadata already read); everything expensive (strings,
``Event`` records, spans, encoding, I/O) happens on the ``pptrace-recorder`` thread with the
original timestamps. Two modes:

- ``stream`` (default): every event is handed to the sinks within ``flush_interval``; when the
  buffer is full new events are dropped and counted, never silently.
- ``flight``: a ring of the last ``flight_size`` events, written to the sinks only when the engine
  raises in attach/extract, on ``request_dump()`` (what the SIGUSR1 handler calls; served by the
  thread within ``_TICK``), on ``dump()`` (synchronous) and at shutdown; each dump's stats span
  says how many events the ring overwrote.

Memory stays bounded in both modes. Stream: at most ``buffer_size`` events wait (the wrappers
check the length before appending; beyond it new events are dropped and counted). Flight: the
engine's thread only appends (``deque.append``, in C); the recorder thread trims the ring back to
``flight_size`` every ``_TICK``, so that freeing old events costs the engine nothing. Should that
thread fall behind, the deque's own ``maxlen`` (``flight_size + max(flight_size, _SLACK)``) evicts
the oldest event on append, as a plain ring would; sequence numbers count those too.

Every event ends up exported, dropped or overwritten, and the counts travel in the trace: a stats
span at each flush that changed them, and ``dropped_before`` on each event. Shutdown writes what
it can within its timeout and counts the rest as dropped.

    rec = Recorder(Config(), sink_factory=lambda rank: my_sink)
    rec.start()
    attach, extract = wrap_transport(engine_attach, engine_extract, rec)
    rec.shutdown()            # flush within the exit timeout
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, overload

from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.record.ranks import discover_rank

__all__ = ["RawEvents", "Recorder", "Sink", "WarnOnce"]

log = logging.getLogger("pptrace")


class Sink(Protocol):
    """Where finished events go (spans to files, OTLP, an engine's tracer provider...).

    The recorder hands ``export`` a ``RawEvents``: a sequence that converts its raw tuples as
    it is read, so that a sink able to encode the raws itself skips the records.
    """

    def export(self, events: Sequence[Event]) -> None: ...

    def export_stats(self, stats: RecorderStats) -> None: ...

    def shutdown(self, timeout: float) -> None: ...


class WarnOnce:
    """Log one warning per cause, and count every occurrence."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, cause: str, detail: str) -> None:
        self.counts[cause] += 1
        if self.counts[cause] == 1:
            log.warning("pptrace: %s: %s (further occurrences are counted, not logged)",
                        cause, detail)


# A raw record, built on the hot path. Field order:
# 0 direction, 1 seq, 2 wall_ns, 3 mono_ns, 4 duration_ns, 5 the calling threading.Thread
# (an int ident is accepted too), 6 subject type,
# 7 keys before, 8 keys after, 9 items ((key, meta), ...), 10 returned None,
# 11 (error type, message) or None, 12 dropped so far, 13 fingerprints or None
# In the buffer, items may also be a flat list (key, shape, dtype, device, contiguous, key, ...):
# the wrappers' form for plain tensors, read as it is by _Converter (_expand makes the pairs);
# or bytes, packed by pptrace.record.native's reader, without keys: an attach's are the keys after
# those before, an extract's the prefixed keys before (_expand decodes them).
Raw = tuple[Any, ...]


def _qualname(tp: type) -> str:
    module = getattr(tp, "__module__", "")
    name = getattr(tp, "__qualname__", getattr(tp, "__name__", repr(tp)))
    return name if module in ("builtins", "", None) else f"{module}.{name}"


def _key(k: object) -> str:
    """A key as a plain str: a str subclass's characters (none of its methods run), else repr."""
    if type(k) is str:
        return k
    if isinstance(k, str):
        return str.__getitem__(k, slice(None))  # an exact str copy
    return repr(k)


def _dtype(dtype: Any) -> str:
    text = str(dtype)
    return text[6:] if text.startswith("torch.") else text


_ITEMSIZE: dict[Any, int] = {}


def _itemsize(dtype: Any) -> int:
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = int(getattr(dtype, "itemsize", 0))
    return size


def _tensor_meta(key: object, meta: Any, prefix: str, fingerprint: str | None) -> TensorMeta:
    k = _key(key)
    name = k[len(prefix):] if isinstance(key, str) and k.startswith(prefix) else k
    if isinstance(meta, type):
        return TensorMeta(name=name, key=k, dtype=_qualname(meta), is_tensor=False)
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


class Recorder:
    """One process's event buffer, counters and background flush thread."""

    #: The buffer's own ``deque.append`` (C, no check). ``add`` is the checked append: in
    #: stream mode it drops and counts a new event when ``buffer_size`` are waiting (flight
    #: mode's ring never refuses); the wrappers inline that check on their success paths.
    append: Callable[[Raw], None]

    def __init__(
        self,
        config: Config | None = None,
        sink_factory: Callable[[RankInfo], Sink] | None = None,
        rank_provider: Callable[[], tuple[RankInfo, bool]] | None = None,
    ) -> None:
        self.config = config or Config()
        self.enabled = self.config.enabled
        self.flight = self.config.mode == "flight"
        self.fingerprint = self.config.fingerprint
        self._sink_factory = sink_factory
        self._sink: Sink | None = None
        self._rank_provider = rank_provider or (
            lambda: discover_rank(self.config.rank_overrides)
        )
        self._rank: RankInfo | None = None
        size = self._flight_size = self.config.flight_size
        # Flight: the thread trims to flight_size; maxlen is the hard bound if it falls behind.
        maxlen = size + max(size, _SLACK) if self.flight else None
        self._buf: collections.deque[Raw] = collections.deque(maxlen=maxlen)
        self._cap = self.config.buffer_size
        self.append = self._buf.append
        # itertools.count is atomic under the GIL: unique sequence numbers across threads.
        self.seq = {Direction.ATTACH: itertools.count(), Direction.EXTRACT: itertools.count()}
        self._lock = threading.Lock()  # counters touched off the common path
        self.dropped = 0
        self.internal_errors = 0
        self.export_errors = 0
        self.exported = 0
        self.overwritten = 0
        # Flight mode: per direction, the highest sequence number taken out of the ring (trimmed
        # or drained) and how many were; the gap between them is what the deque's maxlen evicted
        # (see _count_overwritten). The trimmed ones are counted as they go.
        self._high = {Direction.ATTACH: -1, Direction.EXTRACT: -1}
        self._taken = {Direction.ATTACH: 0, Direction.EXTRACT: 0}
        self._trimmed = 0
        self._last_stats: tuple[int, ...] | None = None
        self.warn = WarnOnce()
        self._wake = threading.Event()
        self._dump_requested = False
        self._stop = False
        self._abandoned = False  # the exit flush gave up: late exports no longer count
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.Lock()
        self._prefix = PREFIX

    # --- hot path ----------------------------------------------------------------------------

    def add(self, raw: Raw) -> None:
        """Buffer one raw record; in stream mode, drop and count it when the buffer is full."""
        if self.flight or len(self._buf) < self._cap:
            self.append(raw)
        else:
            self.drop_new()

    def drop_new(self) -> None:
        """Count one new event that found the buffer full (stream mode)."""
        with self._lock:
            self.dropped += 1
        self.warn("buffer full", f"more than {self._cap} events waiting; dropping new ones")

    def internal_error(self, where: str, exc: BaseException) -> None:
        """Count a failure inside pptrace; never raise it."""
        with self._lock:
            self.internal_errors += 1
        self.warn(f"internal error in {where}", f"{type(exc).__name__}: {exc}")

    def request_dump(self) -> None:
        """Ask the background thread to write the buffer (the flight ring) out now.

        Safe in a signal handler: it only sets a flag, which the thread polls every
        ``_TICK`` seconds (``Event.set`` takes a lock the interrupted thread may hold).
        """
        self._dump_requested = True

    def dump(self) -> int:
        """Write the buffer (the flight ring) out now, on this thread; return events exported."""
        return self.flush()

    def exporter_dropped(self, events: int, cause: str) -> None:
        """Count events an asynchronous exporter lost after ``export`` returned (any thread)."""
        with self._lock:
            self.dropped += events
            self.export_errors += 1
        self.warn(f"exporter dropped spans ({cause})", f"{events} events lost")

    # --- counters ----------------------------------------------------------------------------

    @property
    def recorded(self) -> int:
        """Events taken on the hot path so far."""
        return sum(_peek(c) for c in self.seq.values())

    def stats(self) -> RecorderStats:
        """Current counters."""
        return RecorderStats(
            rank=self.rank(),
            time_ns=time.time_ns(),
            recorded=self.recorded,
            exported=self.exported,
            dropped=self.dropped,
            overwritten=self.overwritten,
            internal_errors=self.internal_errors,
            export_errors=self.export_errors,
            mode=self.config.mode,
            run_id=self.config.run_id,
        )

    def rank(self) -> RankInfo:
        """This process's rank info (re-discovered until torch.distributed is up)."""
        found = self._rank
        if found is None or not self._rank_final:
            try:
                rank, final = self._rank_provider()
            except Exception as exc:  # the events must still go out, and be counted
                self.internal_error("rank discovery", exc)
                rank, final = found or RankInfo(pid=os.getpid()), False
            with self._lock:  # two threads may ask: never replace a final rank by a guess
                if self._rank is None or not self._rank_final:
                    self._rank, self._rank_final = rank, final
                found = self._rank or rank
        return found

    _rank_final = False
    #: True until the rank is final or a few calls have tried: the wrappers then call
    #: ``learn_rank`` once per call, while the engine's process group is surely up.
    rank_pending = True
    _rank_tries = 0

    def learn_rank(self) -> None:
        """Discover the rank during a transport call (the first few calls only)."""
        try:
            self.rank()
        finally:
            self._rank_tries += 1
            if self._rank_final or self._rank_tries >= 8:
                self.rank_pending = False

    # --- background --------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Start the background flush thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop = False
            self._thread = threading.Thread(
                target=self._run, name="pptrace-recorder", daemon=True
            )
            self._thread.start()
        return self

    def _run(self) -> None:
        last = time.monotonic()
        interval = self.config.flush_interval
        while not self._stop:
            self._wake.wait(min(_TICK, interval) if interval > 0 else _TICK)
            self._wake.clear()
            if self._stop:
                break
            if self.flight:
                self._trim()
            if self._dump_requested:
                self._dump_requested = False
            elif self.flight or time.monotonic() - last < interval:
                continue
            last = time.monotonic()
            try:
                self.flush()
            except BaseException as exc:  # the thread must survive anything a sink raises
                self.internal_error("background flush", exc)

    def _drain(self) -> list[Raw]:
        out: list[Raw] = []
        pop = self._buf.popleft
        try:
            while True:
                out.append(pop())
        except IndexError:
            pass
        return out

    def _trim(self) -> None:
        """Flight mode: take the ring's oldest events beyond ``flight_size`` out (on the recorder
        thread, which then frees them) and count them as overwritten."""
        if len(self._buf) <= self._flight_size:
            return
        with self._flush_lock:
            old = self._take_excess()
            self._count_overwritten(old)
        del old  # freed here, off the engine's thread

    def _take_excess(self) -> list[Raw]:
        buf, size = self._buf, self._flight_size
        old: list[Raw] = []
        try:
            while len(buf) > size:
                old.append(buf.popleft())
        except IndexError:  # emptied meanwhile by a flush on another thread
            pass
        self._trimmed += len(old)
        return old

    def _count_overwritten(self, raws: Sequence[Raw]) -> None:
        """Flight mode: what the ring lost is what was trimmed, plus the sequence numbers below
        the highest taken out that never arrived (evicted by the deque's maxlen; each
        direction's numbers are gap-free from 0)."""
        high, taken = self._high, self._taken
        for raw in raws:
            direction, seq = raw[0], raw[1]
            if direction in taken:  # a malformed record is counted by the conversion
                taken[direction] += 1
                if seq > high[direction]:
                    high[direction] = seq
        self.overwritten = self._trimmed + sum(high[d] + 1 - taken[d] for d in high)

    def flush(self, deadline: float | None = None) -> int:
        """Convert and export everything buffered now; return the number of events exported.

        Events go to the sink in chunks of ``_CHUNK``; past ``deadline`` (a ``time.monotonic``
        value) the rest are counted as dropped instead of exported.
        """
        with self._flush_lock:
            if self.flight:  # the ring holds the last flight_size events, whatever the thread did
                self._count_overwritten(self._take_excess())
            raws = self._drain()
            if self.flight:
                self._count_overwritten(raws)
            if not raws and self._last_stats == self._stats_key():
                return 0
            rank = self.rank()
            sink = self._get_sink(rank)
            if sink is None:
                with self._lock:
                    self.dropped += len(raws)
                return 0
            exported = 0
            convert = _Converter(self, rank)
            starts = list(range(0, len(raws), _CHUNK))
            if self.flight and deadline is not None:
                # A flight dump against the clock writes the newest events first: they are the
                # ones next to whatever went wrong (readers order events by their own clocks).
                starts.reverse()
            for i, start in enumerate(starts):
                chunk = raws[start:start + _CHUNK]
                if deadline is not None and time.monotonic() > deadline:
                    left = sum(len(raws[s:s + _CHUNK]) for s in starts[i:])
                    with self._lock:
                        self.dropped += left
                    self._warn_timeout(left)
                    break
                # Converted as the sink reads them; a raw that fails conversion is counted then,
                # by _conversion_failed, and every other raw of the chunk counts as exported.
                events = RawEvents(chunk, convert, self._conversion_failed)
                try:
                    sink.export(events)
                except BaseException as exc:  # even a BaseException: count what was lost
                    with self._lock:
                        self.export_errors += 1
                        self.dropped += len(chunk) - events.failed
                    self.warn(f"export failed ({type(exc).__name__})", str(exc))
                    continue
                done = len(chunk) - events.failed
                with self._lock:
                    if self._abandoned:  # exit already counted these as lost
                        continue
                    self.exported += done
                exported += done
            self._export_stats(sink)
            return exported

    def _export_stats(self, sink: Sink) -> None:
        key = self._stats_key()
        if key == self._last_stats:
            return
        self._last_stats = key
        try:
            sink.export_stats(self.stats())
        except BaseException as exc:
            with self._lock:
                self.export_errors += 1
            self.warn(f"stats export failed ({type(exc).__name__})", str(exc))

    def _warn_timeout(self, lost: int) -> None:
        self.warn("exit flush timed out",
                  f"ran out of time; {lost} unflushed events counted as dropped")

    def _stats_key(self) -> tuple[int, ...]:
        return (self.recorded, self.exported, self.dropped, self.overwritten,
                self.internal_errors, self.export_errors)

    def _get_sink(self, rank: RankInfo) -> Sink | None:
        if self._sink is None and self._sink_factory is not None:
            try:
                self._sink = self._sink_factory(rank)
            except Exception as exc:
                self._sink_factory = None
                self.warn("cannot open sink", f"{type(exc).__name__}: {exc}")
        return self._sink

    def shutdown(self, timeout: float | None = None) -> None:
        """Flush everything (flight mode: dump the ring) and stop, within ``timeout`` seconds.

        Whatever cannot be written in time is counted as dropped (and, when the sink still
        answers, the final stats span says so); a sink that hangs cannot hold exit.
        """
        timeout = self.config.exit_timeout if timeout is None else timeout
        self._stop = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        done = threading.Event()

        def final() -> None:
            try:
                # Keep a slice of the time for the stats span and the sink's own shutdown.
                self.flush(deadline=deadline - 0.2 * timeout)
                if self._sink is not None:
                    self._sink.shutdown(max(0.1, deadline - time.monotonic()))
            except BaseException as exc:  # a sink's BaseException must not escape a thread
                self.internal_error("shutdown", exc)
            finally:
                done.set()

        # The final flush runs on its own thread so that a sink that hangs cannot hold exit.
        threading.Thread(target=final, name="pptrace-exit-flush", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            with self._lock:
                self._abandoned = True
                lost = max(0, self.recorded - self.exported - self.dropped - self.overwritten)
                self.dropped += lost
            self._warn_timeout(lost)

    # --- conversion (background) -------------------------------------------------------------

    def to_event(self, raw: Raw, rank: RankInfo) -> Event:
        """Turn a raw hot-path tuple into an ``Event``."""
        return _Converter(self, rank)(raw)

    def _conversion_failed(self, exc: BaseException) -> None:
        self.internal_error("event conversion", exc)
        with self._lock:
            self.dropped += 1


#: What ``_Converter.shape`` finds in a raw: (key, seq, start_ns, mono_ns, duration_ns,
#: dropped_before).
Shape = tuple[tuple[Any, ...], int, int, int, int, int]
_ATTACH, _EXTRACT = Direction.ATTACH, Direction.EXTRACT


class _Converter:
    """Raw tuples to ``Event`` records for one flush, caching per-type and per-thread strings."""

    def __init__(self, rec: Recorder, rank: RankInfo) -> None:
        self.rank = rank
        self.run_id = rec.config.run_id
        self.prefix = rec._prefix
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
            found = self.subjects[(direction, tp)] = (_qualname(tp), capable)
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
            (direction, seq, wall_ns, mono_ns, duration_ns, thread, subject, before, after,
             items, returned_none, error, dropped, fingerprints) = raw
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
                for k, _ in items:
                    if type(k) is not str:
                        return None
            if error is not None and not (type(error) is tuple and len(error) == 2 and
                                          type(error[0]) is str and type(error[1]) is str):
                return None
        except Exception:  # a malformed raw: __call__ says what is wrong with it
            return None
        key = (attach, ident, name, subject, before, after, items, returned_none, error)
        return key, seq, wall_ns, mono_ns, duration_ns, dropped

    def __call__(self, raw: Raw) -> Event:
        (direction, seq, wall_ns, mono_ns, duration_ns, thread, subject, before, after, items,
         returned_none, error, dropped, fingerprints) = _expand(raw, self.prefix)
        # The Thread object keeps its name after the thread ends (its ident may be reused).
        if isinstance(thread, int):
            ident, name = thread, self.threads.get(thread, "")
        else:
            ident, name = thread.ident or 0, thread.name
        prefix = self.prefix
        fps: Sequence[Any] = fingerprints or ()
        if fps:
            tensors = tuple(_tensor_meta(key, meta, prefix, _resolve_fp(fps[i]))
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
            keys_before=tuple(map(_key, before)),
            keys_after=tuple(map(_key, after)),
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

    def __init__(self, raws: Sequence[Raw], convert: _Converter,
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


#: How often the background thread looks at the dump flag (seconds).
_TICK = 0.05
#: Events per sink call: bounds one export's memory and lets the exit flush keep its deadline.
_CHUNK = 512
#: Flight mode: room beyond ``flight_size`` for the events of one ``_TICK`` (and more) before the
#: deque's maxlen evicts on the engine's thread.
_SLACK = 8192


def _expand(raw: Raw, prefix: str = PREFIX) -> Raw:
    """A raw record with flat or packed items (the wrappers' forms) in the general form."""
    if type(raw) is not tuple or len(raw) != 14:
        return raw  # a malformed one goes through as is: its conversion counts it
    if type(raw[9]) is bytes:
        return raw[:9] + (_unpack(raw, prefix),) + raw[10:]
    if type(raw[9]) is not list:
        return raw
    flat = iter(raw[9])
    # zip takes the key from ``flat``, then the four metadata fields (all in C); one shared
    # iterator, so never strict (the list holds whole groups of five by construction).
    items = tuple(zip(flat, zip(flat, flat, flat, flat, strict=False), strict=False))
    return raw[:9] + (items,) + raw[10:]


def _unpack(raw: Raw, prefix: str) -> tuple[tuple[Any, Any], ...]:
    """((key, meta), ...) of a raw whose items the native reader packed (see ``Raw``)."""
    from pptrace.record.native import decode

    direction, before, after = raw[0], raw[7], raw[8]
    if direction is Direction.ATTACH:
        keys = after[len(before):]
    else:  # the reader's test: a str key (or a str subclass's) that starts with the prefix
        keys = tuple(k for k in before if issubclass(type(k), str) and str.startswith(k, prefix))
    metas = decode(raw[9])
    if len(metas) != len(keys):
        raise ValueError(f"{len(metas)} packed tensors for {len(keys)} keys")
    return tuple(zip(keys, metas, strict=True))


def _peek(counter: itertools.count[int]) -> int:
    """The next value an itertools.count would give, without taking it."""
    text = repr(counter)  # "count(17)"
    return int(text[6:-1])


def _resolve_fp(pending: Any) -> str | None:
    from pptrace.record.fingerprint import resolve

    return resolve(pending)
