"""Shutdown: flush within the timeout; what cannot be written in time is counted as dropped."""

from __future__ import annotations

import threading
import time

from pptrace.model.config import Config
from pptrace.model.records import Direction
from tests.helpers_recorder import MemorySink, drive, recorder, wrapped


def test_hanging_sink_cannot_hold_exit_and_the_loss_is_counted() -> None:
    release = threading.Event()
    sink = MemorySink(hang=release)
    rec = recorder(Config(flush_interval=0.02), sink).start()
    attach, extract = wrapped(rec)
    try:
        drive(attach, extract, pairs=20)
        started = time.monotonic()
        rec.shutdown(timeout=0.5)
        # A generous bound: the sink would hold exit for 30 s.
        assert time.monotonic() - started < 5.0
        stats = rec.stats()
        assert stats.recorded == 40
        assert stats.exported == 0 and stats.dropped == 40
        assert rec.warn.counts["exit flush timed out"] == 1
    finally:
        release.set()


def test_slow_sink_gets_what_fits_and_the_rest_is_counted_in_the_trace() -> None:
    sink = MemorySink(delay=0.3)  # per export call, i.e. per chunk of 512 events
    rec = recorder(Config(), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=2048, n=1)  # 4096 events: 8 chunks, 2.4 s to write them all
    started = time.monotonic()
    rec.shutdown(timeout=1.0)
    # 1 s, the chunk in flight (0.3 s) and the last stats span: a generous bound for a loaded
    # machine (CI's 2 cores once took over 3 s). That it stopped short of the eight chunks
    # is what the counts below say.
    assert time.monotonic() - started < 5.0
    last = sink.stats[-1]  # the final stats span still went out, with the loss in it
    assert 0 < last.exported < 4096
    assert last.exported + last.dropped == last.recorded == 4096
    assert len(sink.events) == last.exported


def test_shutdown_flushes_everything_and_closes_the_sink() -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=60.0), sink).start()  # never flushes on its own
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=50)
    rec.shutdown(timeout=5.0)
    assert len(sink.events) == 100 and sink.closed
    assert rec._thread is not None and not rec._thread.is_alive()
    assert sink.stats[-1].exported == 100


def test_flight_dump_short_of_time_keeps_the_newest_events() -> None:
    sink = MemorySink(delay=0.4)  # per chunk of 512 events
    rec = recorder(Config(mode="flight", flight_size=4096), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=2048, n=1)  # a full ring: 8 chunks, 3.2 s to write them all
    # 2 s: room for the first chunks even on a loaded machine, too short for all eight.
    rec.shutdown(timeout=2.0)
    last = sink.stats[-1]
    assert 0 < last.exported < 4096
    assert last.exported + last.dropped == last.recorded == 4096
    # What made it out is the end of the ring: the calls right before exit.
    for direction in Direction:
        written = sorted(sink.seqs(direction))
        assert written == list(range(written[0], 2048)), direction
