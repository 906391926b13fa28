"""Losses named by sink (issue 15, item 1's second half): when the trace file and OTLP take each
batch side by side and only one of them fails, the loss is that sink's own
(``pptrace.stats.sink.<name>.dropped``), not ``dropped`` (what no sink received), so the other
sink's data is not made to look less complete than it is. When every sink fails, nothing took
the batch: that is ``dropped``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.file_sink import FileSink
from pptrace.export.sinks import FanOut
from pptrace.export.spans import process_resource
from pptrace.model.config import Config
from pptrace.model.records import RecorderStats
from pptrace.record.sink import SinkFailed, fan_out
from tests.helpers_recorder import RANK, MemorySink, drive, recorder, wrapped
from tests.helpers_reliability import read_trace_file

PAIRS = 300  # 600 events: two chunks of 512, so both a whole and a partial chunk are counted


class Broken(MemorySink):
    """A sink whose exports fail (its stats still go through, so what it says can be read)."""

    def export(self, events: Any) -> None:
        raise OSError(28, "No space left on device")


def _run(sink: Any) -> RecorderStats:
    rec = recorder(Config(flush_interval=3600), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=PAIRS)
    rec.shutdown(timeout=10.0)
    stats = rec.stats()
    assert stats.final and stats.recorded == 2 * PAIRS
    assert stats.recorded == stats.exported + stats.dropped + stats.overwritten, stats
    return stats


def test_a_failed_otlp_export_is_otlp_s_loss_and_the_file_has_everything(
        tmp_path: Path) -> None:
    path = str(tmp_path / "trace.otlp.jsonl")
    files = FileSink(path, process_resource(RANK, ""))
    stats = _run(FanOut([files, Broken()], ("file", "otlp")))
    assert stats.dropped == 0 and stats.exported == 2 * PAIRS
    assert stats.sink_dropped == (("otlp", 2 * PAIRS),)
    events, written, bad = read_trace_file(path)
    assert not bad and len(events) == 2 * PAIRS  # the file holds every event...
    last = written[-1]  # ...and its own stats say so: no loss of its own, OTLP's named
    assert last.final and last.dropped == 0 and last.sink_lost("otlp") == 2 * PAIRS
    assert all(e.dropped_before == 0 for e in events)


def test_a_failed_file_write_is_the_file_s_loss_and_otlp_has_everything() -> None:
    spans, files = MemorySink(), Broken()
    stats = _run(FanOut([files, spans], ("file", "otlp")))
    assert stats.dropped == 0 and stats.sink_dropped == (("file", 2 * PAIRS),)
    assert len(spans.events) == 2 * PAIRS
    assert spans.stats[-1].sink_lost("file") == 2 * PAIRS and spans.stats[-1].dropped == 0


def test_when_every_sink_fails_nothing_took_the_events_they_are_dropped() -> None:
    stats = _run(FanOut([Broken(), Broken()], ("file", "otlp")))
    assert stats.dropped == 2 * PAIRS and stats.exported == 0 and stats.sink_dropped == ()


def test_fan_out_names_the_failed_sinks_and_raises_the_error_when_all_failed() -> None:
    calls: list[str] = []

    def call(sink: Any) -> None:
        calls.append(sink)
        if sink.startswith("bad"):
            raise ValueError(sink)

    with pytest.raises(SinkFailed) as info:
        fan_out([("file", "bad-file"), ("none", None), ("otlp", "good")], call)
    assert info.value.names == ("file",) and calls == ["bad-file", "good"]
    assert "file sink: ValueError: bad-file" in str(info.value)
    with pytest.raises(ValueError, match="bad-1"):  # nothing took it: the first error itself
        fan_out([("a", "bad-1"), ("b", "bad-2")], call)
    fan_out([("a", "good")], call)  # none failed: nothing raised


def test_the_activation_s_file_and_otlp_pair_names_the_failed_sink() -> None:
    from pptrace.activation.process_sinks import FilesAndOtlp

    spans = MemorySink()
    rec = recorder(Config(flush_interval=3600), None)
    both = FilesAndOtlp(Broken(), spans, rec.stats)
    rec._sink_factory = lambda _rank: both
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=PAIRS)
    rec.shutdown(timeout=10.0)
    stats = rec.stats()
    assert stats.dropped == 0 and stats.sink_dropped == (("file", 2 * PAIRS),)
    assert len(spans.events) == 2 * PAIRS


def test_the_trace_file_refused_with_otlp_on_is_the_file_s_loss(tmp_path: Path) -> None:
    # A trace directory other users can write to is refused (issue 15, item 8): a real
    # failure of the file sink alone while the spans still go to the other sink.
    unsafe = tmp_path / "shared"
    unsafe.mkdir()
    os.chmod(unsafe, 0o777)
    files = FileSink(str(unsafe / "trace.otlp.jsonl"), process_resource(RANK, ""))
    spans = MemorySink()
    stats = _run(FanOut([files, spans], ("file", "otlp")))
    assert stats.dropped == 0 and stats.sink_lost("file") == 2 * PAIRS
    assert len(spans.events) == 2 * PAIRS
    assert not (unsafe / "trace.otlp.jsonl").exists()


def test_messages_an_unopened_otlp_sink_cannot_take_are_its_loss(tmp_path: Path) -> None:
    """OTLP that could not open beside a trace file fails the message layer's batches too, named
    as its own (the recorder counts them as otlp's), while the file takes them."""
    from pptrace.export.sinks import Unavailable
    from pptrace.load.loader import load_paths
    from pptrace.model.messages import MessageEvent, MessageOp

    path = str(tmp_path / "trace.otlp.jsonl")
    files = FileSink(path, process_resource(RANK, "r"))
    both = FanOut([files, Unavailable("ImportError: no exporter")], ("file", "otlp"))
    events = [MessageEvent(MessageOp.SEND, "end", seq, wall_ns=10 + seq, mono_ns=seq,
                           duration_ns=1, peer=0, kind="proxy") for seq in range(3)]
    with pytest.raises(SinkFailed) as failed:
        both.export_messages(events, RANK, "r")
    assert failed.value.names == ("otlp",) and "no exporter" in str(failed.value)
    files.shutdown(1.0)
    (proc,) = load_paths([path]).processes
    assert [m.seq for m in proc.messages] == [0, 1, 2]
