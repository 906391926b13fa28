"""Making millions of long-lived objects without the cyclic garbage collector passing over them.

Loading a long run's trace, and analysing it, make millions of records and hardly a reference
cycle. With the collector on, it passes over the growing heap again and again (a third of
loading's time at 1M events, half the clock alignment's); and once it is back on, its next young
collection passes over everything made meanwhile (0.3 to 0.5 s at 1M messages), the middle
generation's next one again. ``bulk()`` holds the collector off while its body runs and then
moves what is tracked into the oldest generation without a pass (``gc.freeze`` then
``gc.unfreeze``): the next pass over those objects is the next full collection, which would have
come anyway. Nothing stays frozen, and cyclic garbage made meanwhile is collected by that pass.

    with bulk():
        trace = _load(paths)

A process that then holds the trace for its whole life (the viewer) takes it out of the
collector's passes altogether with ``kept()``: the next full pass would otherwise walk every
record again (0.6 to 1 s at 1M messages), at a moment nobody chose, such as a key press.

    with kept():
        open_viewer(...)        # and keep_too() for a trace it reads meanwhile
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["bulk", "keep_too", "kept"]


@contextmanager
def bulk() -> Iterator[None]:
    """Hold the collector off while the body runs, and put it back as it was, raise or not."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:  # (a caller that turned it off, or an outer ``bulk``, manages it)
            # Thawing would also thaw what a caller froze on purpose (before a fork, say).
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


_keeping = 0  # kept() bodies running that froze the heap (and will put it back)


@contextmanager
def kept() -> Iterator[None]:
    """Leave every object tracked now out of the collector's passes while the body runs
    (``gc.freeze``), and put them back after; a caller's own freeze is left as it is."""
    global _keeping
    if gc.get_freeze_count():  # frozen on purpose by a caller: thawing would undo it
        yield
        return
    gc.freeze()
    _keeping += 1
    try:
        yield
    finally:
        _keeping -= 1
        gc.unfreeze()


def keep_too() -> bool:
    """Inside ``kept()``: leave what was made since out of the passes too (a trace read while
    the body runs: the viewer's whole trace after its start); False (nothing done) outside."""
    if not _keeping:
        return False
    gc.freeze()
    return True
