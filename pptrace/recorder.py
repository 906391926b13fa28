"""The per-process recorder: a hot-path buffer of raw tuples and a background flush into sinks.

The engine's thread only appends a tuple (metadata already read); everything expensive (strings,
``Event`` records, spans, encoding, I/O) happens on the ``pptrace-recorder`` thread with the
original timestamps. Two modes:

- ``stream`` (default): every event is handed to the sinks within ``flush_interval``; when the
  buffer is full new events are dropped and counted, never silently.
- ``flight``: a ring of the last ``flight_size`` events, dumped to the sinks when the engine
  raises in attach/extract, on ``dump()`` (SIGUSR1 when installed), and at exit; each dump's
  stats say how many events the ring overwrote.

    rec = Recorder(Config(), sink_factory=lambda rank: my_sink)
    rec.start()
    ...                       # wrapped attach/extract call rec.capture(...)
    rec.shutdown()            # flush within the exit timeout
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pptrace.config import Config
from pptrace.record import Direction, Event, RankInfo, RecorderStats, TensorMeta
from pptrace.ranks import discover_rank

__all__ = ["Recorder", "Sink", "WarnOnce"]

log = logging.getLogger("pptrace")


class Sink(Protocol):
    """Where finished events go (spans to files, OTLP, an engine's tracer provider...)."""

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
# 0 direction, 1 seq, 2 wall_ns, 3 mono_ns, 4 duration_ns, 5 thread ident, 6 subject type,
# 7 keys before, 8 keys after, 9 items ((key, meta), ...), 10 returned None,
# 11 (error type, message) or None, 12 dropped so far, 13 fingerprints or None
Raw = tuple[Any, ...]


def _qualname(tp: type) -> str:
    module = getattr(tp, "__module__", "")
    name = getattr(tp, "__qualname__", getattr(tp, "__name__", repr(tp)))
    return name if module in ("builtins", "", None) else f"{module}.{name}"


def _key(k: object) -> str:
    return k if isinstance(k, str) else repr(k)


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
    name = k[len(prefix):] if isinstance(key, str) and key.startswith(prefix) else k
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


def _thread_name(ident: int) -> str:
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return ""


class Recorder:
    """One process's event buffer, counters and background flush thread."""

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
        maxlen = self.config.flight_size if self.flight else None
        self._buf: collections.deque[Raw] = collections.deque(maxlen=maxlen)
        self._cap = self.config.buffer_size
        # itertools.count is atomic under the GIL: unique sequence numbers across threads.
        self.seq = {Direction.ATTACH: itertools.count(), Direction.EXTRACT: itertools.count()}
        self._lock = threading.Lock()  # counters touched off the common path
        self.dropped = 0
        self.internal_errors = 0
        self.export_errors = 0
        self.exported = 0
        self.overwritten = 0
        self._drained = 0  # raw records taken off the buffer so far
        self._last_stats: tuple[int, ...] | None = None
        self.warn = WarnOnce()
        self._wake = threading.Event()
        self._dump_requested = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.Lock()
        self._prefix = "__sampling_observer_output__."

    # --- hot path ----------------------------------------------------------------------------

    def append(self, raw: Raw) -> None:
        """Buffer one raw record (called on the engine's thread)."""
        if self.flight or len(self._buf) < self._cap:
            self._buf.append(raw)
        else:
            with self._lock:
                self.dropped += 1
            self.warn("buffer full", f"more than {self._cap} events waiting; dropping new ones")

    def internal_error(self, where: str, exc: BaseException) -> None:
        """Count a failure inside pptrace; never raise it."""
        with self._lock:
            self.internal_errors += 1
        self.warn(f"internal error in {where}", f"{type(exc).__name__}: {exc}")

    def request_dump(self) -> None:
        """Ask the background thread to flush the flight ring now (signal-safe)."""
        self._dump_requested = True
        self._wake.set()

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
        if self._rank is None or not self._rank_final:
            self._rank, self._rank_final = self._rank_provider()
        return self._rank

    _rank_final = False

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
        while not self._stop:
            self._wake.wait(self.config.flush_interval)
            self._wake.clear()
            if self._stop:
                break
            if self.flight and not self._dump_requested:
                continue
            self._dump_requested = False
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

    def flush(self) -> int:
        """Convert and export everything buffered now; return the number of events exported."""
        with self._flush_lock:
            raws = self._drain()
            self._drained += len(raws)
            if self.flight:
                # Whatever was recorded but neither drained nor still held, the ring overwrote.
                self.overwritten = max(0, self.recorded - self._drained - len(self._buf))
            if not raws and self._last_stats == self._stats_key():
                return 0
            rank = self.rank()
            events = []
            for raw in raws:
                try:
                    events.append(self.to_event(raw, rank))
                except Exception as exc:
                    self.internal_error("event conversion", exc)
                    with self._lock:
                        self.dropped += 1
            sink = self._get_sink(rank)
            if sink is None:
                with self._lock:
                    self.dropped += len(events)
                return 0
            if events:
                try:
                    sink.export(events)
                    self.exported += len(events)
                except BaseException as exc:  # even a BaseException: count what was lost
                    with self._lock:
                        self.export_errors += 1
                        self.dropped += len(events)
                    self.warn(f"export failed ({type(exc).__name__})", str(exc))
            key = self._stats_key()
            if key != self._last_stats:
                self._last_stats = key
                try:
                    sink.export_stats(self.stats())
                except BaseException as exc:
                    with self._lock:
                        self.export_errors += 1
                    self.warn(f"stats export failed ({type(exc).__name__})", str(exc))
            return len(events)

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
        """Flush everything (flight mode: dump the ring) and stop, within ``timeout`` seconds."""
        timeout = self.config.exit_timeout if timeout is None else timeout
        self._stop = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        done = threading.Event()

        def final() -> None:
            try:
                self.flush()
                if self._sink is not None:
                    self._sink.shutdown(max(0.1, deadline - time.monotonic()))
            except BaseException as exc:  # a sink's BaseException must not escape a thread
                self.internal_error("shutdown", exc)
            finally:
                done.set()

        # The final flush runs on its own thread so that a sink that hangs cannot hold exit.
        threading.Thread(target=final, name="pptrace-exit-flush", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            self.warn("exit flush timed out", f"gave up after {timeout:.1f}s; unflushed events lost")

    # --- conversion (background) -------------------------------------------------------------

    def to_event(self, raw: Raw, rank: RankInfo) -> Event:
        """Turn a raw hot-path tuple into an ``Event``."""
        (direction, seq, wall_ns, mono_ns, duration_ns, ident, subject, before, after, items,
         returned_none, error, dropped, fingerprints) = raw
        prefix = self._prefix
        fps: Sequence[Any] = fingerprints or ()
        tensors = tuple(
            _tensor_meta(key, meta, prefix, _resolve_fp(fps[i]) if fps else None)
            for i, (key, meta) in enumerate(items)
        )
        if direction is Direction.ATTACH:
            capable = hasattr(subject, "to_pp_tensors") if subject is not type(None) else None
        else:
            capable = hasattr(subject, "from_pp_tensors") if subject is not type(None) else None
        inserted: tuple[str, ...] = ()
        if error is not None and direction is Direction.ATTACH:
            inserted = tuple(t.key for t in tensors)
        return Event(
            direction=direction,
            seq=seq,
            rank=rank,
            start_ns=wall_ns,
            mono_ns=mono_ns,
            duration_ns=duration_ns,
            thread_id=ident,
            thread_name=_thread_name(ident),
            subject_type=_qualname(subject),
            subject_pp_capable=capable,
            tensors=tensors,
            keys_before=tuple(map(_key, before)),
            keys_after=tuple(map(_key, after)),
            returned_none=returned_none,
            error_type=error[0] if error else None,
            error_message=error[1] if error else None,
            inserted_before_error=inserted,
            dropped_before=dropped,
            run_id=self.config.run_id,
        )


def _peek(counter: itertools.count[int]) -> int:
    """The next value an itertools.count would give, without taking it."""
    text = repr(counter)  # "count(17)"
    return int(text[6:-1])


def _resolve_fp(pending: Any) -> str | None:
    from pptrace.fingerprint import resolve

    return resolve(pending)
