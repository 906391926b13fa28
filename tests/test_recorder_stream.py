"""Stream mode: every recorded event is exported or counted as dropped, and the trace says so."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import torch

from pptrace.export.sinks import build_sink
from pptrace.export.trace_file import trace_file_name
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import Direction
from tests.doubles import Observer, Output
from tests.helpers_recorder import RANK, MemorySink, drive, recorder, wrapped


def test_every_event_is_exported_with_gap_free_sequence_numbers() -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=0.05), sink).start()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=300)
    rec.shutdown(timeout=10.0)
    assert sink.seqs(Direction.ATTACH) == list(range(300))
    assert sink.seqs(Direction.EXTRACT) == list(range(300))
    last = sink.stats[-1]
    assert (last.recorded, last.exported, last.dropped) == (600, 600, 0)
    assert last.mode == "stream" and sink.closed
    first = sink.events[0]
    assert first.names == ("t0", "t1") and first.tensors[0].shape == (2, 3)
    assert first.keys_after == ("next_token_ids", schema_key("t0"), schema_key("t1"))


def schema_key(name: str) -> str:
    return "__sampling_observer_output__." + name


def test_full_buffer_drops_new_events_and_counts_them() -> None:
    sink = MemorySink()
    rec = recorder(Config(buffer_size=6), sink)  # no thread: nothing drains until flush()
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5)  # 10 events, 6 fit
    assert rec.dropped == 4
    assert rec.flush() == 6
    assert [e.seq for e in sink.events] == [0, 0, 1, 1, 2, 2]
    assert all(e.dropped_before == 0 for e in sink.events)  # recorded before any drop
    assert sink.stats[-1].dropped == 4 and sink.stats[-1].recorded == 10
    drive(attach, extract, pairs=1)
    rec.flush()
    # Events recorded after the loss carry it, so a reader can lower its confidence.
    assert [e.dropped_before for e in sink.events[6:]] == [4, 4]
    rec.shutdown(timeout=5.0)
    stats = sink.stats[-1]
    assert stats.recorded == stats.exported + stats.dropped == 12


def test_failing_export_counts_the_events_as_dropped() -> None:
    class Broken(MemorySink):
        def export(self, events: Any) -> None:
            raise OSError("disk gone")

    sink = Broken()
    rec = recorder(Config(), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=4)
    assert rec.flush() == 0
    assert (rec.exported, rec.dropped, rec.export_errors) == (0, 8, 1)
    assert sink.stats[-1].dropped == 8


def test_conversion_failure_is_contained_and_counted() -> None:
    sink = MemorySink()
    rec = recorder(Config(), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=2)
    rec.append(("not", "a", "raw", "record"))  # what a bug in the wrapper would leave
    assert rec.flush() == 4
    assert rec.internal_errors == 1 and rec.dropped == 1


def test_threads_calling_the_wrapper_lose_nothing_and_share_no_sequence_number() -> None:
    sink = MemorySink()
    rec = recorder(Config(flush_interval=0.02), sink).start()
    attach, extract = wrapped(rec)
    threads, pairs = 4, 150
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait()
        drive(attach, extract, pairs=pairs)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    rec.shutdown(timeout=10.0)
    for direction in Direction:
        seqs = sink.seqs(direction)
        assert sorted(seqs) == list(range(threads * pairs)), direction
    names = {e.thread_name for e in sink.events}
    assert len(names) == threads and all(n.startswith("Thread-") for n in names)
    assert rec.stats().dropped == 0 and rec.internal_errors == 0


def _spans(path: Path) -> list[dict[str, Any]]:
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans.extend(ss["spans"])
    return spans


def _attr(span: dict[str, Any], key: str) -> Any:
    for a in span["attributes"]:
        if a["key"] == key:
            value = a["value"]
            return int(value["intValue"]) if "intValue" in value else value
    return None


def test_trace_file_carries_the_drop_count_in_stats_spans_and_events(tmp_path: Path) -> None:
    config = Config(trace_dir=str(tmp_path), buffer_size=4)
    rec = recorder(config, None)
    rec._sink_factory = lambda rank: build_sink(config, rank)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=3)  # 6 events, 4 kept
    rec.flush()
    drive(attach, extract, pairs=1)
    rec.shutdown(timeout=10.0)
    spans = _spans(tmp_path / trace_file_name(RANK))
    stats = [s for s in spans if s["name"] == schema.SPAN_STATS]
    events = [s for s in spans if s["name"] != schema.SPAN_STATS]
    assert len(events) == 6
    assert _attr(stats[-1], schema.S_DROPPED) == 2
    assert _attr(stats[-1], schema.S_RECORDED) == 8
    assert _attr(stats[-1], schema.S_EXPORTED) == 6
    # (version 2 leaves a count of 0 out)
    assert [_attr(s, schema.DROPPED_BEFORE) for s in events] == [None, None, None, None, 2, 2]
    # The original call time is the span's start, not the flush time.
    assert all(int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]) for s in events)


def test_disabled_recorder_records_nothing() -> None:
    sink = MemorySink()
    rec = recorder(Config(enabled=False), sink)
    attach, extract = wrapped(rec)
    tensors: dict[str, Any] = {"next_token_ids": torch.zeros(2)}
    output = Output(1)
    assert attach(tensors, output) is None
    assert extract(tensors, Observer()) == {"t0": output.named["t0"]}
    rec.shutdown(timeout=2.0)
    assert rec.recorded == 0 and sink.events == []
