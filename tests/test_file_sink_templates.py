"""FileSink's template path (raw tuples -> span text) writes what its record path writes.

Every test records real calls through the wrapper into a recorder whose sink hands each chunk to
two FileSinks: one given the recorder's ``RawEvents`` (per-shape templates), one given the same
events as a plain list of ``Event`` records (``schema.event_to_attributes`` per event). Their
files must be equal apart from the random ids, span for span, in order; ``test_file_sink.py``
holds both paths to the official protobuf encoding.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from pptrace.export.file_sink import FileSink
from pptrace.export.sinks import FanOut
from pptrace.export.spans import process_resource
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, RecorderStats
from pptrace.record.convert import Converter as _Converter
from pptrace.record.convert import RawEvents
from pptrace.record.recorder import Recorder
from tests.doubles import Observer, Output
from tests.helpers_recorder import RANK, Composite, MemorySink, drive, recorder, wrapped


class BothPaths:
    """A sink writing each chunk twice: from the raw tuples and from the records."""

    def __init__(self, tmp: Path) -> None:
        resource = process_resource(RANK, "run")
        self.raw = FileSink(str(tmp / "raw.jsonl"), resource, "1")
        self.records = FileSink(str(tmp / "records.jsonl"), resource, "1")
        self.chunks = 0

    def export(self, events: Sequence[Event]) -> None:
        assert isinstance(events, RawEvents)
        self.chunks += 1
        self.raw.export(events)
        self.records.export(list(events))

    def export_stats(self, stats: RecorderStats) -> None:
        self.raw.export_stats(stats)
        self.records.export_stats(stats)

    def shutdown(self, timeout: float) -> None:
        self.raw.shutdown(timeout)
        self.records.shutdown(timeout)


def spans(path: Path) -> list[dict[str, Any]]:
    """Every span of a trace file, ids removed (checked for their form first)."""
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    trace, span_id = span.pop("traceId"), span.pop("spanId")
                    assert len(trace) == 32 and len(span_id) == 16
                    int(trace, 16), int(span_id, 16)
                    out.append({"resource": rs["resource"], "scope": ss["scope"], **span})
    return out


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def thread_name(span: dict[str, Any]) -> str:
    """The span's thread name: its own, else (version 2) its resource's main thread's."""
    found = attributes(span).get(schema.THREAD_NAME)
    if found is None:
        found = attributes(span["resource"])[schema.R_THREAD_MAIN_NAME]
    assert isinstance(found, str)
    return found


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count calls of schema.event_to_attributes (the record path's per-event cost)."""
    calls = [0]
    real = schema.event_to_attributes

    def counting(event: Event, resource: Any = None, exact_times: bool = False
                 ) -> dict[str, Any]:
        calls[0] += 1
        return real(event, resource, exact_times)

    monkeypatch.setattr(schema, "event_to_attributes", counting)
    return calls


def run(tmp_path: Path, body: Callable[[Recorder, Any, Any], None],
        config: Config | None = None) -> tuple[BothPaths, Recorder, list[dict[str, Any]]]:
    """Record with ``body(rec, attach, extract)``, flush, and check both files are equal."""
    sink = BothPaths(tmp_path)
    rec = recorder(config or Config(), sink)
    attach, extract = wrapped(rec)
    body(rec, attach, extract)
    rec.shutdown(timeout=10.0)
    written = spans(tmp_path / "raw.jsonl")
    assert written == spans(tmp_path / "records.jsonl")
    return sink, rec, written


def test_repeating_calls_go_through_one_template_per_shape(
    tmp_path: Path, counted: list[int]
) -> None:
    sink, rec, written = run(tmp_path, lambda rec, a, e: drive(a, e, pairs=40, n=4))
    events = [s for s in written if s["name"] != schema.SPAN_STATS]
    assert len(events) == 80 and rec.exported == 80 and rec.dropped == 0
    # Two shapes (attach, extract), each templated at its second sighting.
    assert sink.raw.templates_built == 2
    # The record path encodes all 80; the template path only each shape's first two events
    # and its probe.
    assert counted[0] == 80 + 2 * 3
    # What varies per call did vary, and came out right.
    seqs = [attributes(s)[schema.SEQ] for s in events if s["name"] == schema.SPAN_ATTACH]
    assert seqs == [str(i) for i in range(40)]


def test_errors_non_tensor_values_and_odd_keys(tmp_path: Path) -> None:
    def body(rec: Recorder, attach: Any, extract: Any) -> None:
        for _ in range(4):
            tensors: dict[Any, Any] = {"next_token_ids": [1, 2]}  # a list, as the engine has
            attach(tensors, Output(2))
            extract(tensors, Observer())
            with pytest.raises(RuntimeError):  # error 1, the composite output
                attach({"next_token_ids": [1]}, Composite())
            with pytest.raises(RuntimeError):  # a non-tensor under the prefix
                extract({PREFIX + "a": [1, 2], PREFIX + "b": torch.zeros(2)}, Observer())
            with pytest.raises(RuntimeError):  # no observer
                extract({PREFIX + "a": torch.zeros(2)}, None)
            with pytest.raises(RuntimeError) as info:  # an empty message in the error span
                attach({}, Output({}))
            assert str(info.value)
            odd: dict[Any, Any] = {7: torch.zeros(1), ("k",): 1}  # keys that are not str
            attach(odd, Output(1))
            with pytest.raises(AttributeError):  # the engine calls key.startswith
                extract(odd, Observer())

    sink, rec, written = run(tmp_path, body)
    assert rec.exported == 32 and rec.dropped == rec.internal_errors == 0
    assert any("events" in s for s in written)  # error spans, with their exception event
    # Each shape repeats and gets its template (errors too), except the two whose keys are not
    # str.
    assert sink.raw.templates_built == 6


def test_fingerprints_go_the_record_way(tmp_path: Path) -> None:
    sink, rec, written = run(tmp_path, lambda rec, a, e: drive(a, e, pairs=4),
                             Config(fingerprint=True))
    assert sink.raw.templates_built == 0
    assert all(schema.T_FINGERPRINTS in attributes(s) for s in written
               if s["name"] != schema.SPAN_STATS)


def test_dropped_before_and_thread_names_change_between_calls(tmp_path: Path) -> None:
    def body(rec: Recorder, attach: Any, extract: Any) -> None:
        drive(attach, extract, pairs=3)
        rec.dropped = 5  # as if 5 events had been lost: later events carry it
        drive(attach, extract, pairs=3)
        worker = threading.Thread(target=drive, args=(attach, extract, 3), name="worker-a")
        worker.start()
        worker.join()
        rec.flush()
        worker.name = "worker-b"  # a thread renamed after its calls: read at each flush
        rec.dropped = 6
        drive(attach, extract, pairs=3)
        named = threading.Thread(target=drive, args=(attach, extract, 3), name="worker-c")
        named.start()
        named.join()

    sink, rec, written = run(tmp_path, body)
    spans = [s for s in written if s["name"] != schema.SPAN_STATS]
    events = [attributes(s) for s in spans]
    # Version 2 writes the count only once it is not 0.
    assert [e.get(schema.DROPPED_BEFORE) for e in events[::2]] == (
        [None] * 3 + ["5"] * 6 + ["6"] * 6)
    names = [thread_name(s) for s in spans[::2]]
    # Version 2: the main thread's name is the resource's; another thread's is on its spans.
    assert schema.THREAD_NAME not in events[0] and events[24][schema.THREAD_NAME] == "worker-c"
    assert names[6:9] == ["worker-a"] * 3 and names[12:] == ["worker-c"] * 3
    assert sink.raw.templates_built >= 4


def _raw(number: int, **change: Any) -> tuple[Any, ...]:
    """A raw record in the documented layout (recorder.py), as the wrapper would build it."""
    meta = (torch.Size([2, 3]), torch.float32, torch.device("cpu"), True)
    items = ((PREFIX + "a", meta), (PREFIX + "b", list))
    before = ("next_token_ids",)
    fields: dict[str, Any] = {
        "direction": Direction.ATTACH, "seq": number, "wall": 1_700_000_000_000_000_000 + number,
        "mono": 10_000 + number, "duration": 300 + number, "thread": threading.current_thread(),
        "subject": Output, "before": before, "after": before + tuple(k for k, _ in items),
        "items": items, "returned_none": True, "error": None, "dropped": 0, "fingerprints": None,
    }
    assert change.keys() <= fields.keys()
    fields.update(change)
    return tuple(fields.values())


def test_hand_made_raws_odd_values_and_int_thread_idents(tmp_path: Path) -> None:
    class Unhashable(type):
        def __hash__(cls) -> int:
            raise TypeError("no hashing this type")

    class Weird(metaclass=Unhashable):
        pass

    ident = threading.get_ident()

    def body(rec: Recorder, attach: Any, extract: Any) -> None:
        seqs = iter(range(100))
        for _ in range(3):
            rec.append(_raw(next(seqs), thread=ident))  # an int ident: the name from the thread
            rec.append(_raw(next(seqs), dropped=2))
            rec.append(_raw(next(seqs), thread=ident, subject=Weird))  # fails conversion too
            rec.append(_raw(next(seqs), thread=ident, returned_none=1))  # not a bool
            rec.append(_raw(next(seqs), thread=ident, mono=2**62))  # beyond what shape() keys
            rec.append(_raw(next(seqs), thread=ident, error=("RuntimeError", "boom")))
        rec.append(("not", "a", "raw"))  # what a bug in the wrapper would leave

    sink, rec, written = run(tmp_path, body)
    # The Weird subject and the malformed raw fail conversion on either path: counted once.
    assert rec.internal_errors == 4 and rec.dropped == 4 and rec.exported == 15
    # The int ident and its Thread make one shape (same ident and name); the same with a drop
    # count (written, unlike a count of 0); and the error.
    assert sink.raw.templates_built == 3
    names = {thread_name(s) for s in written if s["name"] != schema.SPAN_STATS}
    assert names == {threading.current_thread().name}


def test_shape_refuses_what_it_cannot_key_safely() -> None:
    rec = Recorder(Config())
    convert = _Converter(rec, RANK)
    base = _raw(1)
    found = convert.shape(base)
    assert found is not None and found[1:] == (1, base[2], base[3], base[4], 0)
    assert convert.shape(_raw(2)) is not None
    assert convert.shape(_raw(2))[0] == found[0]  # type: ignore[index]
    for change in (
        {"seq": -1},
        {"seq": True},
        {"duration": 1.5},
        {"dropped": 2**62},
        {"direction": "attach"},
        {"before": (1,)},
        {"after": ("a", b"b")},
        {"items": ((1, list),)},
        {"returned_none": None},
        {"error": ("RuntimeError", 1)},
        {"error": ["RuntimeError", "x"]},
        {"fingerprints": ("b2:00",)},
        {"thread": object()},
    ):
        assert convert.shape(_raw(1, **change)) is None, change
    assert convert.shape(("short",)) is None
    assert convert.shape(None) is None  # type: ignore[arg-type]


def test_raw_events_convert_once_for_every_reader(tmp_path: Path) -> None:
    """A tee of FileSink and a record sink: the file takes templates, the other gets records,
    and a raw that fails conversion is counted once."""
    memory = MemorySink()
    files = FileSink(str(tmp_path / "t.jsonl"), process_resource(RANK, "run"))
    rec = recorder(Config(), FanOut([files, memory]))
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=5)
    rec.append(("not", "a", "raw"))
    assert rec.flush() == 10
    rec.shutdown(timeout=5.0)
    assert rec.internal_errors == 1 and rec.dropped == 1
    assert [e.seq for e in memory.events if e.direction is Direction.ATTACH] == list(range(5))
    assert files.templates_built == 2
    assert len(spans(tmp_path / "t.jsonl")) == 10 + 2  # the flush's stats span, the final one


def test_raw_events_is_a_sequence_of_events() -> None:
    failures: list[BaseException] = []
    rec = Recorder(Config())
    convert = _Converter(rec, RANK)
    raws = [_raw(0), ("bad",), _raw(1)]
    events = RawEvents(raws, convert, failures.append)
    assert events and not failures  # truth needs no conversion
    assert [e.seq for e in events] == [0, 1] and len(events) == 2
    assert events[1].seq == 1 and [e.seq for e in events[:1]] == [0]
    assert events.event(1) is None and events.failed == 1 and len(failures) == 1
    assert events.event(0) is events[0]


def test_many_shapes_within_the_cache_limit(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from pptrace.export import file_sink

    monkeypatch.setattr(file_sink, "_TEMPLATE_LIMIT", 3)

    def body(rec: Recorder, attach: Any, extract: Any) -> None:
        for n in (1, 2, 3, 1, 2, 3, 1, 2, 3):  # six shapes, cycling past the limit
            drive(attach, extract, pairs=2, n=n)

    sink, rec, written = run(tmp_path, body)
    assert rec.exported == 36 and sink.raw.templates_built >= 1


def test_raws_as_the_wrappers_leave_them_in_the_buffer(tmp_path: Path) -> None:
    """The converter reads the buffer's raws as they are (the wrappers may keep plain tensors'
    metadata flat), whether or not the drain rebuilt them first."""
    rec = recorder(Config(), MemorySink())
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=4, n=3)
    with pytest.raises(RuntimeError):
        attach({}, Composite())
    raws = list(rec._buf)
    # Plain tensors flat (list) or packed by the native reader (bytes); the error's in general.
    assert {type(r[9]) for r in raws} in ({list, tuple}, {bytes, tuple})
    convert = _Converter(rec, RANK)
    sink = BothPaths(tmp_path)
    sink.export(RawEvents(raws, convert, pytest.fail))
    sink.shutdown(1.0)
    written = spans(tmp_path / "raw.jsonl")
    assert len(written) == 9 and written == spans(tmp_path / "records.jsonl")
    assert sink.raw.templates_built == 2
    drained = rec._drain()
    assert [convert(r) for r in raws] == [convert(r) for r in drained]
    assert [convert.shape(r) is None for r in raws] == [False] * 9


def test_templates_last_across_flushes_until_the_rank_changes(tmp_path: Path) -> None:
    known = [False]  # torch.distributed comes up after the second flush
    sink = BothPaths(tmp_path)
    rec = Recorder(Config(), sink_factory=lambda _rank: sink,
                   rank_provider=lambda: (RANK, True) if known[0] else (RankInfo(pid=1), False))
    attach, extract = wrapped(rec)
    for i in range(4):
        drive(attach, extract, pairs=3)
        rec.flush()
        known[0] = i >= 1
    rec.shutdown(timeout=5.0)
    written = spans(tmp_path / "raw.jsonl")
    assert written == spans(tmp_path / "records.jsonl")
    # Version 2: the rank is on each line's resource, the one its events were recorded under.
    ranks_seen = [attributes(s["resource"]).get(schema.RANK) for s in written
                  if s["name"] == schema.SPAN_ATTACH]
    assert all(schema.RANK not in attributes(s) for s in written)
    assert None in ranks_seen and ranks_seen[-1] == str(RANK.rank)
    # Two shapes, templated once under the guessed rank and once under the final one.
    assert sink.raw.templates_built == 4


def test_every_span_has_ids_of_its_own_drawn_from_the_sinks_prefix(tmp_path: Path) -> None:
    """Templates, records, messages and stats: unique non-zero ids, a trace each (as SDK
    spans), that share the sink's prefix so that a compressor stores them in a few bytes."""
    from pptrace.model.messages import MessageEvent, MessageOp

    def body(rec: Recorder, attach: Any, extract: Any) -> None:
        drive(attach, extract, pairs=20, n=3)

    sink, _, _ = run(tmp_path, body)
    sink.raw.export_messages([MessageEvent(op=MessageOp.SEND, phase="end", seq=0, peer=0)],
                             RANK, "run")
    sink.shutdown(1.0)
    for name in ("raw.jsonl", "records.jsonl"):
        ids = [(s["traceId"], s["spanId"]) for line in (tmp_path / name).read_text().splitlines()
               for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"]
               for s in ss["spans"]]
        assert len(ids) >= 41
        traces, span_ids = zip(*ids, strict=True)
        assert len(set(traces)) == len(ids) and len(set(span_ids)) == len(ids)
        assert all(int(t, 16) and int(s, 16) for t, s in ids)
        assert len({t[:16] for t in traces}) == 1  # the sink's prefix, then its counter
