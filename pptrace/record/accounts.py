"""The recorder's accounts: every event recorded is exported, dropped or overwritten, and says so.

``Accounts`` holds the counters the wrappers and the recorder thread move (the hot path only
takes a sequence number and reads ``dropped``), the per-sink losses, and the final count that
``shutdown`` fixes; ``stats()`` is what a stats span writes. ``recorded`` is read from the
sequence counters themselves, so that counting costs the engine's thread nothing.

    accounts.dropped += n                  # under accounts._lock
    accounts.exporter_dropped(5, "collector down", "otlp")
    accounts.stats()                       # RecorderStats
"""

from __future__ import annotations

import itertools
import threading
import time

from pptrace.model.config import Config
from pptrace.model.records import Direction, RankInfo, RecorderStats
from pptrace.record.convert import UnreadableTensor
from pptrace.record.ring import RingCount
from pptrace.record.sink import WarnOnce

__all__ = ["Accounts"]


class Accounts:
    """A recorder's counters (``pptrace.record.recorder.Recorder`` is one)."""

    config: Config

    def __init__(self, capacity: int) -> None:
        self._cap = capacity
        # itertools.count is atomic under the GIL: unique sequence numbers across threads.
        self.seq = {Direction.ATTACH: itertools.count(), Direction.EXTRACT: itertools.count()}
        self._lock = threading.Lock()  # counters touched off the common path
        self.dropped = 0
        self.internal_errors = 0
        self.export_errors = 0
        self.exported = 0
        self._ring = RingCount()
        #: Events each sink lost while the others have them (by sink name, e.g. "otlp").
        self.sink_dropped: dict[str, int] = {}
        self.warn = WarnOnce()
        self._abandoned = False  # the exit flush gave up: late exports no longer count
        self._final: int | None = None  # events recorded when the counts became final

    def rank(self) -> RankInfo:
        """This process's rank info (the recorder's)."""
        raise NotImplementedError

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

    def exporter_dropped(self, events: int, cause: str, sink: str = "otlp") -> None:
        """Count events one sink lost while the others have them (any thread: OTLP's exporter
        reports after ``export`` returned): that sink's loss only (``sink_dropped``)."""
        with self._lock:
            self.sink_dropped[sink] = self.sink_dropped.get(sink, 0) + events
            self.export_errors += 1
        self.warn(f"exporter dropped spans ({cause})" if sink == "otlp" else
                  f"{sink} sink lost events ({cause})", f"{events} events lost")

    @property
    def recorded(self) -> int:
        """Events taken on the hot path so far (once final: those the final counts cover)."""
        if self._final is not None:
            return self._final
        return sum(_peek(c) for c in self.seq.values())

    @property
    def overwritten(self) -> int:
        """Flight mode: events the ring overwrote."""
        return self._ring.overwritten

    def stats(self) -> RecorderStats:
        """Current counters."""
        with self._lock:
            sinks = tuple(sorted(self.sink_dropped.items()))
        msgs = getattr(self, "messages", None)  # the message layer's log, when it has one
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
            final=self._final is not None,
            sink_dropped=sinks,
            messages_recorded=msgs.recorded if msgs is not None else 0,
            messages_exported=msgs.exported if msgs is not None else 0,
            messages_dropped=msgs.dropped if msgs is not None else 0,
            prefix=getattr(self, "prefix", None),
        )

    def _finalize(self) -> None:
        """Make the counts final: what was recorded and neither exported, dropped nor
        overwritten (still inside a call, or appended after the drain) is dropped."""
        with self._lock:
            if self._final is not None:
                return
            recorded = sum(_peek(c) for c in self.seq.values())
            lost = recorded - self.exported - self.dropped - self.overwritten
            if lost > 0:
                self.dropped += lost
            self._final = recorded
        if lost > 0:
            self.warn("events in flight at exit",
                      f"{lost} events recorded after the last drain counted as dropped")

    def _warn_lost(self, lost: int, overload: bool = False) -> None:
        if overload:
            self.warn("recorder overloaded", "more events than the recorder thread can write "
                      f"in time; {lost} counted as dropped, so that a kill loses at most one "
                      "flush interval")
        else:
            self.warn("exit flush timed out",
                      f"ran out of time; {lost} unflushed events counted as dropped")

    def _stats_key(self) -> tuple[object, ...]:
        return (self.recorded, self.exported, self.dropped, self.overwritten,
                self.internal_errors, self.export_errors, self._final is not None,
                tuple(self.sink_dropped.items()), self._message_counts())

    def _message_counts(self) -> tuple[int, int]:
        msgs = getattr(self, "messages", None)
        return (msgs.exported, msgs.dropped) if msgs is not None else (0, 0)

    def _conversion_failed(self, exc: BaseException) -> None:
        if isinstance(exc, UnreadableTensor):  # not pptrace failing: a lost event, said why
            self.warn("event not recorded", str(exc))
        else:
            self.internal_error("event conversion", exc)
        with self._lock:
            self.dropped += 1


def _peek(counter: itertools.count[int]) -> int:
    """The next value an itertools.count would give, without taking it."""
    text = repr(counter)  # "count(17)"
    return int(text[6:-1])
