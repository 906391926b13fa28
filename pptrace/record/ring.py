"""The buffer's bookkeeping: draining it, trimming a flight ring, counting what the ring overwrote.

The engine's thread only appends to the ring (a ``deque`` whose ``maxlen`` evicts the oldest
event when the recorder thread falls behind); the recorder thread trims it back to its size and
drains it at a dump. What the ring lost is what was trimmed plus the sequence numbers below the
highest taken out that never arrived: each direction's numbers are gap-free from 0, so the gap
is what ``maxlen`` evicted, counted without any work on the engine's thread.

    ring = RingCount()
    ring.taken(raws, trimmed=True)     # the oldest events beyond the ring's size
    ring.taken(drained)                # a dump's events
    ring.overwritten                   # trimmed + evicted
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from pptrace.model import raw as R
from pptrace.model.raw import Raw
from pptrace.model.records import Direction

__all__ = ["RingCount", "drain", "take_excess"]


class RingCount:
    """Counts what a flight ring overwrote (used under the recorder's flush lock)."""

    def __init__(self) -> None:
        # Per direction, the highest sequence number taken out of the ring and how many were.
        self._high = {Direction.ATTACH: -1, Direction.EXTRACT: -1}
        self._taken = {Direction.ATTACH: 0, Direction.EXTRACT: 0}
        self._trimmed = 0
        #: Events the ring lost: trimmed, or evicted by the deque's maxlen.
        self.overwritten = 0

    def taken(self, raws: Sequence[Raw], trimmed: bool = False) -> None:
        """Account for raws taken out of the ring (``trimmed``: lost, not dumped)."""
        if trimmed:
            self._trimmed += len(raws)
        high, taken = self._high, self._taken
        for raw in raws:
            direction, seq = raw[R.DIRECTION], raw[R.SEQ]
            if direction in taken:  # a malformed record is counted by the conversion
                taken[direction] += 1
                if seq > high[direction]:
                    high[direction] = seq
        self.overwritten = self._trimmed + sum(high[d] + 1 - taken[d] for d in high)


def drain(buf: collections.deque[Raw]) -> list[Raw]:
    """Take everything out of ``buf``, oldest first (the engine's threads may append meanwhile:
    what they add after the last ``popleft`` stays for the next drain)."""
    out: list[Raw] = []
    pop = buf.popleft
    try:
        while True:
            out.append(pop())
    except IndexError:
        pass
    return out


def take_excess(buf: collections.deque[Raw], size: int) -> list[Raw]:
    """Take the oldest raws of ``buf`` beyond its first ``size`` (a flight ring's trim)."""
    old: list[Raw] = []
    try:
        while len(buf) > size:
            old.append(buf.popleft())
    except IndexError:  # emptied meanwhile by a flush on another thread
        pass
    return old
