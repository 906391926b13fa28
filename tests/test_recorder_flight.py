"""Flight mode: a ring of the last N events, written out only on an engine error, a dump request,
an explicit dump or shutdown; each dump says how many events the ring overwrote."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import trace_file_name
from pptrace.model import errors, schema
from pptrace.model.config import Config
from pptrace.model.records import Direction
from tests.doubles import Output
from tests.helpers_recorder import RANK, Composite, MemorySink, drive, recorder, wait_for, wrapped


def test_ring_keeps_the_last_events_and_counts_what_it_overwrote() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=8), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=10)  # 20 events into a ring of 8
    assert rec.dump() == 8
    assert [(e.direction.value, e.seq) for e in sink.events[:2]] == [("attach", 6), ("extract", 6)]
    assert sink.seqs(Direction.ATTACH) == [6, 7, 8, 9]
    assert sink.stats[-1].overwritten == 12 and sink.stats[-1].recorded == 20
    assert sink.stats[-1].dropped == 0 and sink.stats[-1].mode == "flight"
    drive(attach, extract, pairs=3)  # fits: nothing more is overwritten
    assert rec.dump() == 6
    assert sink.stats[-1].overwritten == 12 and sink.stats[-1].recorded == 26
    drive(attach, extract, pairs=5)  # 10 into 8: two more lost
    rec.shutdown(timeout=5.0)
    assert sink.stats[-1].overwritten == 14
    last = sink.stats[-1]
    assert last.recorded == last.exported + last.overwritten == 36


def test_nothing_is_written_until_something_happens() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flush_interval=0.01), sink)
    # Evidence instead of a sleep: the thread's loop is seen to turn (each turn trims the ring)
    # many times after the calls, and a stream recorder writes on its first turns.
    turns = threading.Semaphore(0)
    trim = rec._trim

    def counted_trim() -> None:
        trim()
        turns.release()

    rec._trim = counted_trim  # type: ignore[method-assign]
    rec.start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5)
    for _ in range(10):
        assert turns.acquire(timeout=10.0), "the recorder thread stopped turning"
    assert sink.events == [] and sink.stats == []
    rec.shutdown(timeout=5.0)
    assert len(sink.events) == 10  # exit dumps the ring


def test_engine_error_dumps_the_ring_with_the_failing_call() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=16), sink).start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=3)
    with pytest.raises(RuntimeError, match=errors.ATTACH_NOT_PP):
        attach({"next_token_ids": torch.zeros(1)}, Composite())
    assert wait_for(lambda: len(sink.events) == 7, timeout=10.0)
    failed = sink.events[-1]
    assert failed.direction is Direction.ATTACH and failed.seq == 3
    assert failed.error_message == errors.ATTACH_NOT_PP
    assert sink.stats[-1].overwritten == 0
    rec.shutdown(timeout=5.0)


def test_extract_error_dumps_too() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight"), sink).start()
    attach, extract = wrapped(rec)
    tensors: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    drive(attach, extract, pairs=1)
    attach(tensors, Output(1))
    with pytest.raises(RuntimeError, match=errors.EXTRACT_NO_OBSERVER):
        extract(tensors, None)
    assert wait_for(lambda: len(sink.events) == 4, timeout=10.0)
    assert sink.events[-1].error_message == errors.EXTRACT_NO_OBSERVER
    rec.shutdown(timeout=5.0)


def test_request_dump_is_served_by_the_background_thread() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=4), sink).start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5)
    rec.request_dump()  # what the SIGUSR1 handler calls: only sets a flag
    assert wait_for(lambda: len(sink.stats) == 1, timeout=10.0)
    assert len(sink.events) == 4 and sink.stats[0].overwritten == 6
    rec.shutdown(timeout=5.0)
    assert len(sink.events) == 4  # nothing new since the dump


def test_dump_file_has_the_overwritten_count(tmp_path: Path) -> None:
    config = Config(trace_dir=str(tmp_path), mode="flight", flight_size=5)
    rec = recorder(config, None)
    rec._sink_factory = lambda rank: build_sink(config, rank)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=6)
    rec.shutdown(timeout=10.0)
    spans = [
        span
        for line in (tmp_path / trace_file_name(RANK)).read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    stats = [s for s in spans if s["name"] == schema.SPAN_STATS]
    assert len(spans) - len(stats) == 5
    attrs = {a["key"]: a["value"] for a in stats[-1]["attributes"]}
    assert int(attrs[schema.S_OVERWRITTEN]["intValue"]) == 7
    assert attrs[schema.S_MODE]["stringValue"] == "flight"


def test_threads_in_flight_mode_share_no_sequence_number() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=100_000), sink)
    attach, extract = wrapped(rec)
    workers = [threading.Thread(target=drive, args=(attach, extract, 100)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    rec.shutdown(timeout=10.0)
    assert sorted(sink.seqs(Direction.EXTRACT)) == list(range(400))
    assert sink.stats[-1].overwritten == 0
