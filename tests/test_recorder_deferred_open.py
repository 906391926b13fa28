"""A sink opened at the first event (activation's deferred sink) costs that flush no events.

Found with a down collector: opening OTLP (its exporter's import, its first connection) happened
inside the first timed write, the pace learnt that one-off cost as the write rate, and the rest
of the first flush was shed from the trace file as "recorder overloaded". The recorder now opens
a deferred sink before it times a write.

Found again beside a busy engine thread (the engine-cost benchmark's loop, 1,000 pairs a second):
the opening (imports, the trace file's checks, each a GIL hand-over) took 0.4-0.5 s of the first
write's one-second bound, and one run in four shed most of its first flush as "recorder
overloaded". The opening is the thread's own lateness, which a drop does not shorten: the write
gets its whole time after it.
"""

from __future__ import annotations

import time
from typing import Any

from pptrace.activation.process_sinks import DeferredSink
from pptrace.model.config import Config
from tests.helpers_recorder import MemorySink, drive, recorder, wait_for, wrapped

PAIRS = 150
OPENING = 0.3  # seconds: a slow open (an exporter's import on a loaded machine), within the bound


def test_a_slow_opening_is_not_taken_for_the_write_rate() -> None:
    inner = MemorySink()

    def slow_open() -> Any:
        time.sleep(OPENING)  # the cause under test, not a wait for an absence
        return inner

    rec = recorder(Config(flush_interval=1.0), DeferredSink(slow_open))
    rec.start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=PAIRS)  # all before the first take, half an interval in
    assert wait_for(lambda: rec.stats().exported + rec.stats().dropped == 2 * PAIRS)
    rec.shutdown(timeout=5.0)
    stats = rec.stats()
    assert (stats.exported, stats.dropped) == (2 * PAIRS, 0), stats
    assert len(inner.events) == 2 * PAIRS


def test_an_opening_longer_than_the_bound_costs_the_first_write_no_events() -> None:
    inner = MemorySink()
    bound = 1.0  # Pace.FLOOR: what flush_interval=1.0 gives

    def slower_open() -> Any:
        time.sleep(1.5 * bound)  # the cause under test: the whole bound gone before a write
        return inner

    rec = recorder(Config(flush_interval=bound), DeferredSink(slower_open))
    rec.start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=PAIRS)
    assert wait_for(lambda: rec.stats().exported + rec.stats().dropped == 2 * PAIRS)
    rec.shutdown(timeout=5.0)
    stats = rec.stats()
    assert (stats.exported, stats.dropped) == (2 * PAIRS, 0), stats
    assert len(inner.events) == 2 * PAIRS
