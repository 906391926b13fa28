"""The stream recorder's pace: when its thread writes, by when, and in what pieces.

A SIGKILL loses what is neither on disk nor counted in the last stats span on disk. For that to
be at most one ``bound`` of events however fast they come (``flush_interval``, at least
``FLOOR``), the recorder thread takes the buffer's events out every half interval (``period``),
and a write's deadline is one ``bound`` after the *previous* take: every event of the batch was
recorded after that, so whatever the write has not put on disk by its deadline is dropped and
counted in its stats span, at most one ``bound`` after the event was recorded. A write that
started late (its thread waited for the GIL) has that much less time; one that overran is
followed at once by the next. (The floor: a short interval writes more often, never drops
more; a write in one interval of a few milliseconds is a promise no thread can keep.)

What the bound does not cover is how late the thread itself runs: the slack is the last
chunk's and the stats span's overrun of the deadline, and the thread's waits for the GIL and a
CPU (a thread that writes a file waits its turn behind threads that never wait), and the
opening of a deferred sink at the first write (the recorder moves that write's deadline by it:
0.3-0.6 s of GIL hand-overs beside a busy engine thread, which dropping events would not
shorten). To keep the
overrun small, a write plans against the rates it measured: each chunk is sized to take a
``SHARE`` of the time left (less what a stats span takes), the write stops when even
``MIN_CHUNK`` would not fit, and what it did not write is dropped and counted. When the backlog
is more than ``HEADROOM`` times what the time left can write, the excess (the newest events: the
file keeps a gap-free prefix of each batch) is dropped at once, before any of it is converted.
(The headroom: a rate measured during a pause must not drop what the deadline would let
through.)

    pace = Pace(config.flush_interval, tick, max_chunk=512)
    pace.begin(time.monotonic())                 # the thread starts
    deadline = pace.take(time.monotonic())        # at pace.due(): the write's deadline
    keep = pace.keep(len(raws), deadline - time.monotonic())
    for start, end in pace.slices(len(raws), deadline): ...     # chunks that fit
    pace.wrote(events, seconds)                   # after each chunk
    pace.stats_took(seconds)                      # after each stats span
"""

from __future__ import annotations

import time
from collections.abc import Iterator

__all__ = ["Pace"]


class Pace:
    """The write schedule of a stream recorder's thread, and the rates it measured."""

    #: The shortest ``bound`` (seconds).
    FLOOR = 1.0
    #: How much more than the measured rate allows a write keeps (the deadline drops the rest).
    HEADROOM = 2.0
    #: The smallest chunk worth a write (the first chunk of a write is never smaller).
    MIN_CHUNK = 16
    #: The share of the time left that the next chunk is planned to take (the rate of a
    #: starved thread varies from one chunk to the next several times over).
    SHARE = 0.25
    #: Weight of the newest measurement in the moving averages.
    WEIGHT = 0.3

    def __init__(self, interval: float, tick: float, max_chunk: int) -> None:
        #: Seconds between two takes of the buffer (a tick for a non-positive interval).
        self.period = interval / 2 if interval > 0 else tick
        #: The most a kill loses uncounted, give or take the slack (seconds).
        self.bound = max(interval, self.FLOOR)
        self.max_chunk = max_chunk
        self._taken = 0.0  # when the buffer was last taken (time.monotonic)
        #: Seconds an event took to write, a moving average over the chunks (None until
        #: measured): an average of times, not of rates, so that one chunk starved for a
        #: second weighs as it should against a hundred quick ones.
        self.per_event: float | None = None
        #: Seconds a stats span took to write (a moving average; 0 until measured).
        self.stats_s = 0.0
        self._stats_seen = False

    def begin(self, now: float) -> None:
        """The thread starts: the buffer counts as taken ``now``."""
        self._taken = now

    def due(self) -> float:
        """When the next take is due (``time.monotonic``)."""
        return self._taken + self.period

    def take(self, now: float) -> float:
        """The buffer is taken ``now``: the deadline of the write that follows (one ``bound``
        after the previous take, after which every event it takes was recorded)."""
        deadline, self._taken = self._taken + self.bound, now
        return deadline

    def keep(self, backlog: int, seconds: float) -> int:
        """How many of ``backlog`` events one write should try in ``seconds``: all of them until
        the rate is known, else ``HEADROOM`` times what the rate allows, at least one."""
        if self.rate is None or backlog <= 1:
            return backlog
        return max(1, min(backlog, int(self.HEADROOM * self.rate * max(0.0, seconds))))

    def chunk(self, seconds: float, first: bool = False) -> int:
        """The next chunk's size, with ``seconds`` left to the deadline: a ``SHARE`` of what the
        rate can write in what is left after the stats span, at most ``max_chunk``; 0 when less
        than ``MIN_CHUNK`` fits (the write stops), but ``MIN_CHUNK`` for a write's first; a
        few ``MIN_CHUNK`` until the rate is measured."""
        if self.rate is None:
            return 4 * self.MIN_CHUNK
        fits = int(self.rate * (seconds - self.stats_s) * self.SHARE)
        if fits < self.MIN_CHUNK:
            return self.MIN_CHUNK if first else 0
        return min(self.max_chunk, fits)

    def slices(self, count: int, deadline: float) -> Iterator[tuple[int, int]]:
        """A write's chunks of its ``count`` events as (start, end), each sized when it is
        due; stops when the next would not fit before ``deadline`` (``time.monotonic``)."""
        pos = 0
        while pos < count:
            size = self.chunk(deadline - time.monotonic(), first=pos == 0)
            if not size:
                return
            yield pos, min(count, pos + size)
            pos += size

    @property
    def rate(self) -> float | None:
        """Events per second, as measured (None until measured)."""
        return None if not self.per_event else 1.0 / self.per_event

    def wrote(self, events: int, seconds: float) -> None:
        """Learn from a chunk: ``events`` handed to the sink in ``seconds``."""
        if events <= 0 or seconds <= 0:
            return
        each = seconds / events
        self.per_event = each if self.per_event is None else self._mix(self.per_event, each)

    def stats_took(self, seconds: float) -> None:
        """Learn from a stats span's write."""
        seconds = max(0.0, seconds)
        self.stats_s = self._mix(self.stats_s, seconds) if self._stats_seen else seconds
        self._stats_seen = True

    def _mix(self, old: float, new: float) -> float:
        return (1 - self.WEIGHT) * old + self.WEIGHT * new
