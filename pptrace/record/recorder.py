"""The per-process recorder: a hot-path buffer of raw tuples and a background flush into sinks.

The engine's thread only appends a tuple (metadata already read; layout in ``pptrace.model.raw``);
everything expensive (strings, ``Event`` records, spans, encoding, I/O) happens on the
``pptrace-recorder`` thread with the original timestamps (``pptrace.record.convert``). Two modes:

- ``stream`` (default): every event is on disk or counted as dropped within ``flush_interval``
  (plus the thread's own lateness), however fast events come: what the thread cannot write in
  time is dropped and counted (``pptrace.record.pace``); so is a new event that finds
  ``buffer_size`` waiting (the wrappers check the length before appending).
- ``flight``: a ring of the last ``flight_size`` events, written to the sinks only when the engine
  raises in attach/extract, on ``request_dump()`` (what the SIGUSR1 handler calls; served by the
  thread within ``_TICK``), on ``dump()`` (synchronous) and at shutdown; each dump's stats span
  says how many events the ring overwrote.

Flight mode's memory: the engine's thread only appends (``deque.append``, in C); the recorder
thread trims the ring back to ``flight_size`` every ``_TICK``, so that freeing old events costs
the engine nothing. Should that thread fall behind, the deque's own ``maxlen`` (``flight_size +
max(flight_size, _SLACK)``) evicts the oldest event on append, as a plain ring would; sequence
numbers count those too (``pptrace.record.ring``).

Every event ends up exported, dropped or overwritten, and the counts travel in the trace: a stats
span at each flush that changed them, and ``dropped_before`` on each event. ``dropped`` counts
what no sink received; what a sink lost after it took the events (the OTLP exporter's failed
batches) is counted per sink (``exporter_dropped``), so that a trace file never claims losses
it does not have. ``shutdown`` is final: recording stops first (the wrappers become plain
pass-throughs), the buffer is written within the exit timeout, whatever could not be written
(or was still inside a call) is counted as dropped, and the last stats span says ``final``.

The wrappers' contract (``pptrace.record.wrapper`` and the native reader's C wrapper read these,
and nothing private): ``enabled``, ``flight``, ``fingerprint``, ``config``, ``prefix``, ``seq``,
``buffer``, ``capacity``, ``append``, ``dropped``, ``rank_pending``; ``add``, ``drop_new``,
``internal_error``, ``learn_rank``, ``request_dump``. ``HOT_READS`` names the attributes the C
wrapper reads on each call.

    rec = Recorder(Config(), sink_factory=lambda rank: my_sink)
    rec.start()
    attach, extract = wrap_transport(engine_attach, engine_extract, rec)
    rec.shutdown()            # flush within the exit timeout; final
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.raw import Raw
from pptrace.model.records import PREFIX, Direction, RankInfo
from pptrace.model.target import learn_prefix
from pptrace.record.accounts import Accounts
from pptrace.record.convert import Converter, RawEvents
from pptrace.record.pace import Pace
from pptrace.record.ranks import RankCache, discover_rank, new_instance
from pptrace.record.ring import drain, take_excess
from pptrace.record.sink import Sink, SinkFailed, WarnOnce

__all__ = ["HOT_READS", "Recorder", "Sink", "WarnOnce"]

#: The recorder attributes the native reader's C wrapper reads on each call, by these names, in
#: this order: (is it recording, is the rank still to be learned, events dropped so far). Passed
#: to the C side when a wrapper is made, so that the names live here only.
HOT_READS = ("enabled", "rank_pending", "dropped")


class Recorder(Accounts):
    """One process's event buffer, counters (``Accounts``) and background flush thread."""

    #: The buffer's own ``deque.append`` (C, no check). ``add`` is the checked append: in
    #: stream mode it drops and counts a new event when ``buffer_size`` are waiting (flight
    #: mode's ring never refuses); the wrappers inline that check on their success paths.
    append: Callable[[Raw], None]

    def __init__(self, config: Config | None = None,
                 sink_factory: Callable[[RankInfo], Sink] | None = None,
                 rank_provider: Callable[[], tuple[RankInfo, bool]] | None = None) -> None:
        self.config = config or Config()
        super().__init__(self.config.buffer_size)
        #: False once ``shutdown`` began (or when the config disables pptrace): the wrappers
        #: then only call the engine's function.
        self.enabled = self.config.enabled
        self.flight = self.config.mode == "flight"
        self.fingerprint = self.config.fingerprint
        #: The transport's key prefix the converter strips from tensor names; None: not given,
        #: learnt from the first event that shows auxiliary keys (``_learn_prefix``).
        self.prefix: str | None = PREFIX
        self._sink_factory = sink_factory
        self._sink: Sink | None = None
        #: This process's id while this recorder records it, drawn once here: a forked child
        #: builds its own recorder, so it never keeps its parent's. A ``rank_provider`` that
        #: is given names its own (or none).
        self.instance = new_instance()
        self._ranks = RankCache(rank_provider or (
            lambda: discover_rank(self.config.rank_overrides, instance=self.instance)),
            self.internal_error, self.instance)
        size = self._flight_size = self.config.flight_size
        # Flight: the thread trims to flight_size; maxlen is the hard bound if it falls behind.
        maxlen = size + max(size, _SLACK) if self.flight else None
        self._buf: collections.deque[Raw] = collections.deque(maxlen=maxlen)
        self.append = self._buf.append
        self._last_stats: tuple[object, ...] | None = None
        self._wake = threading.Event()
        self._dump_requested = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.Lock()
        self._pace = Pace(self.config.flush_interval, _TICK, _CHUNK)
        #: Whether the sink took a chunk yet: the first pays once (its file opened, its first
        #: spans encoded the long way), and learnt as the rate it shed the next events.
        self._warm = False
        #: The message layer's log (``pptrace.record.messages``), written at each flush.
        self.messages: Any = None
        #: Tasks the recorder thread runs about once a second until each says it is done
        #: (``upkeep``), and when it runs them next.
        self._upkeep: list[Callable[[], bool]] = []
        self._upkeep_due = 0.0

    # --- the wrappers' contract --------------------------------------------------------------

    @property
    def buffer(self) -> collections.deque[Raw]:
        """The buffer the wrappers append raw records to (flight mode: the ring)."""
        return self._buf

    @property
    def capacity(self) -> int:
        """Stream mode: how many events may wait in ``buffer`` before new ones are dropped."""
        return self._cap

    def add(self, raw: Raw) -> None:
        """Buffer one raw record; in stream mode, drop and count it when the buffer is full."""
        if self.flight or len(self._buf) < self._cap:
            self.append(raw)
        else:
            self.drop_new()

    def request_dump(self) -> None:
        """Ask the background thread to write the buffer (the flight ring) out now.

        Safe in a signal handler: it only sets a flag, which the thread polls every
        ``_TICK`` seconds (``Event.set`` takes a lock the interrupted thread may hold).
        """
        self._dump_requested = True

    def dump(self) -> int:
        """Write the buffer (the flight ring) out now, on this thread; return events exported."""
        return self.flush()

    # --- conversion helpers (the converter's ``Source``) ---------------------------------------

    @staticmethod
    def decode_packed(packed: bytes) -> list[tuple[Any, ...]]:
        """The native reader's packed metadata as ``[(shape, dtype, device, contiguous), ...]``."""
        from pptrace.record.native import decode

        return decode(packed)

    @staticmethod
    def resolve_fingerprint(pending: Any) -> str | None:
        """A pending content fingerprint's text."""
        from pptrace.record.fingerprint import resolve

        return resolve(pending)

    @property
    def buffered(self) -> int:
        """Events waiting in the buffer now."""
        return len(self._buf)

    def rank(self) -> RankInfo:
        """This process's rank info (re-discovered until torch.distributed is up)."""
        return self._ranks.get()

    #: True until the rank is final or a few calls have tried: the wrappers then call
    #: ``learn_rank`` once per call, while the engine's process group is surely up.
    rank_pending = True

    #: Called once, on the engine's thread, at this process's first recorded call (where
    #: ``pptrace run`` and the pytest plugin leave their ``called-PID`` marker); None: nothing.
    on_first_call: Callable[[], None] | None = None

    def learn_rank(self) -> None:
        """Discover the rank during a transport call (the first few calls only)."""
        first = self.on_first_call
        if first is not None:
            self.on_first_call = None
            try:
                first()
            except Exception as exc:  # bookkeeping: never the engine's business
                self.internal_error("first call", exc)
        if self._ranks.learn():
            self.rank_pending = False

    # --- background --------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Start the background flush thread (idempotent; never after ``shutdown``)."""
        if self._final is None and (self._thread is None or not self._thread.is_alive()):
            self._stop = False
            self._thread = threading.Thread(
                target=self._run, name="pptrace-recorder", daemon=True
            )
            self._thread.start()
        return self

    def _run(self) -> None:
        pace = self._pace
        pace.begin(time.monotonic())
        while not self._stop:
            wait = _TICK if self.flight else min(_TICK, pace.due() - time.monotonic())
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()
            if self._stop:
                break
            if self._upkeep and time.monotonic() >= self._upkeep_due:
                self._run_upkeep()
            if self.flight:
                self._trim()
            deadline = None
            if self._dump_requested:
                self._dump_requested = False
            elif self.flight or time.monotonic() < pace.due():
                continue
            if not self.flight:  # stream: a take every period, written by its deadline
                deadline = pace.take(time.monotonic())
            try:
                self.flush(deadline=deadline, background=True)
            except BaseException as exc:  # the thread must survive anything a sink raises
                self.internal_error("background flush", exc)

    def upkeep(self, task: Callable[[], bool]) -> None:
        """Run ``task`` on the recorder thread about once a second until it returns True; a
        task that raises is counted as an internal error and not run again. For work that
        waits on something outside the process (a native build landing), off the engine's
        thread."""
        self._upkeep.append(task)

    def _run_upkeep(self) -> None:
        self._upkeep_due = time.monotonic() + _UPKEEP
        for task in list(self._upkeep):
            try:
                done = task()
            except Exception as exc:
                self.internal_error("upkeep", exc)
                done = True
            if done:
                self._upkeep.remove(task)

    def _drain(self) -> list[Raw]:
        return drain(self._buf)

    def _trim(self) -> None:
        """Flight mode: take the ring's oldest events beyond ``flight_size`` out (on the recorder
        thread, which then frees them) and count them as overwritten."""
        if len(self._buf) <= self._flight_size:
            return
        with self._flush_lock:
            old = take_excess(self._buf, self._flight_size)
            self._ring.taken(old, trimmed=True)
        del old  # freed here, off the engine's thread

    def flush(self, deadline: float | None = None, final: bool = False,
              background: bool = False) -> int:
        """Convert and export everything buffered now; return the number of events exported.

        Events go to the sink in chunks of ``_CHUNK``; past ``deadline`` (``time.monotonic``)
        the rest are counted as dropped. ``background``: the thread's write, paced in stream
        mode (``pptrace.record.pace``). A stream flush without a deadline, or the thread's,
        gives way to ``shutdown`` between chunks (the rest goes back to the buffer, for the
        exit flush). ``final``: then count what is still outstanding as dropped and write the
        final stats span; later flushes write nothing.
        """
        with self._flush_lock:
            if self._final is not None:  # late appends were counted by the final flush
                self._buf.clear()
                return 0
            if self.flight:  # the ring holds the last flight_size events, whatever the thread did
                self._ring.taken(take_excess(self._buf, self._flight_size), trimmed=True)
            raws = self._drain()
            if self.flight:
                self._ring.taken(raws)
            msgs = self.messages
            if msgs is not None and msgs.pending:
                if self.prefix is None:  # learnt first: a send's carries_attach is judged by it
                    self._learn_prefix(raws)
                self._flush_messages(msgs)
            if not raws and not final and self._last_stats == self._stats_key():
                return 0
            rank = self.rank()
            sink = self._get_sink(rank)
            if sink is None:
                with self._lock:
                    self.dropped += len(raws)
                if final:
                    self._finalize()
                return 0
            # A deferred sink, opened once: never timed for a rate, nor taken from the write's
            # time (the thread's own lateness, up to 0.5 s beside a busy engine thread).
            opener = getattr(sink, "open_sink", None)
            if raws and opener is not None:
                began = time.monotonic()
                try:
                    opener()
                except Exception:  # the export meets the same error, and counts its loss
                    pass
                deadline = None if deadline is None else deadline + time.monotonic() - began
            if background and deadline is not None and not self.flight:
                self._shed(raws, deadline)
            exported = self._export(sink, rank, raws, deadline, background)
            if final:
                self._finalize()
            began = time.monotonic()
            if self._export_stats(sink) and background:
                self._pace.stats_took(time.monotonic() - began)
            return exported

    def _flush_messages(self, msgs: Any) -> None:
        sink = self._get_sink(self.rank())
        if sink is None:
            msgs.discard()
        else:
            msgs.flush(sink, self.rank(), self.config.run_id)

    def _learn_prefix(self, raws: list[Raw]) -> None:
        """Learn the prefix from the first raw that shows auxiliary keys: an attach's inserted
        keys or an extract's recorded (removed) ones, of a call that returned. Here, on the
        recorder thread, so that the engine's thread never pays for it."""
        for raw in raws:
            try:
                if raw[R.ERROR] is not None:
                    continue
                if raw[R.DIRECTION] is Direction.ATTACH:
                    keys: Any = raw[R.KEYS_AFTER][len(raw[R.KEYS_BEFORE]):]
                else:
                    items = raw[R.ITEMS]
                    keys = items[::5] if type(items) is list else [
                        item[0] for item in items] if type(items) is tuple else ()
                learnt = learn_prefix(keys)
            except Exception as exc:  # a malformed raw: its conversion says what is wrong
                self.internal_error("prefix", exc)
                return
            if learnt is not None:
                self.prefix = learnt
                return

    def _shed(self, raws: list[Raw], deadline: float) -> None:
        """Overload: drop the newest of ``raws`` beyond what the measured rate can write by
        ``deadline`` (with headroom), counted, before any of them is converted."""
        keep = self._pace.keep(len(raws), deadline - time.monotonic())
        if keep < len(raws):
            excess = len(raws) - keep
            del raws[keep:]  # freed here, on the recorder thread
            with self._lock:
                self.dropped += excess
            self._warn_lost(excess, overload=True)

    def _slices(self, count: int, deadline: float | None,
                paced: bool) -> Iterator[tuple[int, int]]:
        """A flush's chunks as (start, end): sized by the pace, else ``_CHUNK``s, the newest
        first for a flight dump against the clock (they are the ones next to whatever went
        wrong; readers order events by their own clocks)."""
        if paced and deadline is not None:
            return self._pace.slices(count, deadline)
        starts = range(0, count, _CHUNK)
        ordered = reversed(starts) if self.flight and deadline is not None else starts
        return ((start, min(count, start + _CHUNK)) for start in ordered)

    def _export(self, sink: Sink, rank: RankInfo, raws: list[Raw],
                deadline: float | None, background: bool = False) -> int:
        exported = handed = 0
        if self.prefix is None:
            self._learn_prefix(raws)
        convert = Converter(self, rank)
        yields = not self.flight and (deadline is None or background)
        paced = background and not self.flight
        for start, end in self._slices(len(raws), deadline, paced):
            if yields and self._stop and handed:
                # shutdown is waiting for the lock: the rest is the exit flush's, in order.
                self._buf.extendleft(reversed(raws[start:]))
                handed = len(raws)
                break
            began = time.monotonic()
            if deadline is not None and began > deadline:
                break
            chunk = raws[start:end]
            handed += len(chunk)
            # Converted as the sink reads them; a raw that fails conversion is counted then,
            # by _conversion_failed, and every other raw of the chunk counts as exported.
            events = RawEvents(chunk, convert, self._conversion_failed)
            try:
                sink.export(events)
            except SinkFailed as exc:  # the other sinks took them: the failed ones' loss only
                for name, error in exc.failed:
                    self.exporter_dropped(len(chunk) - events.failed,
                                          f"export failed: {type(error).__name__}", name)
            except BaseException as exc:  # even a BaseException: count what was lost
                with self._lock:
                    self.export_errors += 1
                    self.dropped += len(chunk) - events.failed
                self.warn(f"export failed ({type(exc).__name__})", str(exc))
                continue
            if paced and self._warm:
                self._pace.wrote(len(chunk), time.monotonic() - began)
            self._warm = True
            done = len(chunk) - events.failed
            with self._lock:
                if self._abandoned:  # exit already counted these as lost
                    continue
                self.exported += done
            exported += done
        left = len(raws) - handed  # past the deadline: counted, not written
        if left:
            with self._lock:
                self.dropped += left
            self._warn_lost(left, overload=background)
        return exported

    def _export_stats(self, sink: Sink) -> bool:
        """Write a stats span if the counts changed since the last; True when one was."""
        key = self._stats_key()
        if key == self._last_stats:
            return False
        self._last_stats = key
        try:
            sink.export_stats(self.stats())
        except BaseException as exc:
            with self._lock:
                self.export_errors += 1
            self.warn(f"stats export failed ({type(exc).__name__})", str(exc))
        return True

    def _get_sink(self, rank: RankInfo) -> Sink | None:
        if self._sink is None and self._sink_factory is not None:
            try:
                self._sink = self._sink_factory(rank)
            except Exception as exc:
                self._sink_factory = None
                self.warn("cannot open sink", f"{type(exc).__name__}: {exc}")
        return self._sink

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop recording, flush everything (flight mode: dump the ring) and stop, within
        ``timeout`` seconds; the counts are final after it.

        Whatever cannot be written in time is counted as dropped (and, when the sink still
        answers, the final stats span says so); a sink that hangs cannot hold exit.
        """
        timeout = self.config.exit_timeout if timeout is None else timeout
        self.enabled = False  # from now on the wrappers only call the engine's function
        self._stop = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        done = threading.Event()

        def final() -> None:
            try:
                # Keep a slice of the time for the stats span and the sink's own shutdown.
                self.flush(deadline=deadline - 0.2 * timeout, final=True)
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
                recorded = self.recorded
                lost = max(0, recorded - self.exported - self.dropped - self.overwritten)
                self.dropped += lost
                if self._final is None:  # the file has no final stats span: the counts are
                    self._final = recorded
            self._warn_lost(lost)
        else:
            self._sink = self._sink_factory = None  # hold nothing once closed


#: How often the background thread looks at the dump flag (seconds).
_TICK = 0.05
_UPKEEP = 1.0  # seconds between the recorder thread's upkeep rounds
#: Events per sink call: bounds one export's memory and lets the exit flush keep its deadline.
_CHUNK = 512
#: Flight mode: room beyond ``flight_size`` for the events of one ``_TICK`` (and more) before the
#: deque's maxlen evicts on the engine's thread.
_SLACK = 8192

