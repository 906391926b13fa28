"""The hot path's bookkeeping: where old events are freed, how far the buffers may grow, and the
flat form the wrappers leave in the buffer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

import pptrace.record.recorder as recorder_module
from pptrace.model import errors
from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record.convert import expand
from tests.doubles import Observer, Output
from tests.helpers_recorder import MemorySink, recorder, wait_for, wrapped


class TrackedKey(str):
    """A dict key that notes which thread freed it (the last reference is the event's)."""

    freed_on: list[str] = []

    def __del__(self) -> None:
        TrackedKey.freed_on.append(threading.current_thread().name)


def _drive_tracked(attach: Any, extract: Any, pairs: int) -> None:
    output, observer = Output(2), Observer()
    for _ in range(pairs):
        tensors: dict[str, Any] = {TrackedKey("next_token_ids"): torch.zeros(4)}
        attach(tensors, output)
        extract(tensors, observer)


def test_flight_ring_is_trimmed_and_freed_on_the_recorder_thread() -> None:
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=8), sink).start()
    attach, extract = wrapped(rec)
    TrackedKey.freed_on.clear()
    _drive_tracked(attach, extract, pairs=50)  # 100 events into a ring of 8
    # Pairs 0 to 45 left the ring (each pair's key dies with the last of its two events).
    assert wait_for(lambda: len(TrackedKey.freed_on) == 46)
    # The engine's thread only appended: every old event was freed by the recorder thread.
    assert set(TrackedKey.freed_on) == {"pptrace-recorder"} and rec.buffered == 8
    assert rec.overwritten == 92
    rec.shutdown(timeout=5.0)
    assert [(e.direction, e.seq) for e in sink.events[:2]] == [
        (Direction.ATTACH, 46), (Direction.EXTRACT, 46)]
    last = sink.stats[-1]
    assert (last.recorded, last.exported, last.overwritten, last.dropped) == (100, 8, 92, 0)


def test_flight_ring_stays_bounded_when_the_recorder_thread_falls_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_module, "_SLACK", 16)
    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=4), sink)  # no thread: nothing trims
    attach, extract = wrapped(rec)
    TrackedKey.freed_on.clear()
    _drive_tracked(attach, extract, pairs=30)  # 60 events
    assert rec.buffer.maxlen == 4 + 16 and rec.buffered == 20  # the deque's maxlen evicted
    assert "MainThread" in TrackedKey.freed_on  # the fallback: evicted on append
    assert rec.dump() == 4  # the newest four, whatever sat in the slack
    assert sorted((e.seq, e.direction.value) for e in sink.events) == [
        (28, "attach"), (28, "extract"), (29, "attach"), (29, "extract")]
    # Evicted by maxlen (seen as sequence gaps) and trimmed at the dump: all counted.
    assert sink.stats[-1].overwritten == 56 and sink.stats[-1].recorded == 60
    _drive_tracked(attach, extract, pairs=1)
    rec.shutdown(timeout=5.0)
    last = sink.stats[-1]
    assert last.recorded == last.exported + last.overwritten == 62


def test_stream_buffer_never_holds_more_than_buffer_size() -> None:
    sink = MemorySink()
    rec = recorder(Config(buffer_size=5), sink)  # no thread: nothing drains until flush()
    attach, extract = wrapped(rec)
    _drive_tracked(attach, extract, pairs=4)
    assert rec.buffered == 5 and rec.dropped == 3
    # The error path checks the cap too.
    with pytest.raises(RuntimeError, match=errors.ATTACH_EMPTY):
        attach({"next_token_ids": torch.zeros(1)}, Output(0))
    assert rec.buffered == 5 and rec.dropped == 4
    rec.shutdown(timeout=5.0)
    last = sink.stats[-1]
    assert (last.recorded, last.exported, last.dropped) == (9, 5, 4)


class Marked(torch.Tensor):
    """A tensor subclass: its metadata is read the general way, not inlined."""


def test_a_value_that_is_not_a_plain_tensor_switches_the_event_to_the_general_form() -> None:
    sink = MemorySink()
    rec = recorder(Config(native=False), sink)  # the Python reads' forms
    attach, extract = wrapped(rec)
    plain = torch.zeros(3, 2).t()  # not contiguous
    marked = torch.ones(5, dtype=torch.float16).as_subclass(Marked)

    tensors: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(tensors, Output({"plain": plain, "marked": marked}))
    assert type(rec.buffer[-1][R.ITEMS]) is tuple  # the general form, from the second value on
    extract(tensors, Observer())
    tensors = {"next_token_ids": torch.zeros(1), PREFIX + "t": plain, PREFIX + "list": [1]}
    with pytest.raises(RuntimeError, match=errors.EXTRACT_NOT_TENSOR):
        extract(tensors, Observer())
    attach({"next_token_ids": torch.zeros(1)}, Output(1))
    assert type(rec.buffer[-1][R.ITEMS]) is list  # plain tensors only: the flat form
    rec.flush()
    first, second, third, fourth = sink.events
    for event in (first, second):
        p, m = event.tensors
        assert (p.name, p.shape, p.dtype, p.device, p.contiguous) == (
            "plain", (2, 3), "float32", "cpu", False)
        assert (m.name, m.shape, m.dtype, m.nbytes, m.contiguous) == (
            "marked", (5,), "float16", 10, True)
    t, lst = third.tensors
    assert t.is_tensor and t.shape == (2, 3) and not t.contiguous
    assert not lst.is_tensor and lst.dtype == "list"
    assert [(t.name, t.shape, t.is_tensor) for t in fourth.tensors] == [("t0", (2, 3), True)]


def test_expand_leaves_what_is_not_a_flat_record_alone() -> None:
    odd = ("not", "a", "raw", "record")
    assert expand(odd) is odd
    general = R.make(direction=Direction.ATTACH, seq=0, wall_ns=0, mono_ns=0, duration_ns=0,
                     thread=0, subject=object, keys_before=(), keys_after=(),
                     items=(("k", object),), returned_none=True, error=None, dropped=0,
                     fingerprints=None)
    assert expand(general) is general
    flat = general[:R.ITEMS] + (["k", (1,), torch.float32, torch.device("cpu"), True],) + (
        general[R.ITEMS + 1:])
    assert expand(flat)[R.ITEMS] == (("k", ((1,), torch.float32, torch.device("cpu"), True)),)


@pytest.mark.parametrize("native", [False, True], ids=["python", "native-if-built"])
def test_the_callers_thread_keeps_what_it_read_and_formats_nothing(native: bool) -> None:
    """What keeps the hot path cheap: the engine's thread appends the objects it read (the
    dict's own key objects, torch's Size, dtype and device, a bool; the subject's type and the
    thread object), never a string, name or record made from them: that is the recorder
    thread's work."""
    rec = recorder(Config(native=native), MemorySink())  # no thread: the raws stay buffered
    attach, extract = wrapped(rec)
    tensors: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(tensors, Output(2))
    inserted = [k for k in tensors if k.startswith(PREFIX)]
    extract(tensors, Observer())
    assert len(rec.buffer) == 2
    for raw in rec.buffer:
        assert raw[R.THREAD] is threading.current_thread()
        assert type(raw[R.SUBJECT]) is type
        items = raw[R.ITEMS]
        if type(items) is bytes:  # the native reader's one packed read: decoded off the path
            continue
        assert type(items) is list and len(items) == 10
        for i in range(0, 10, 5):
            key, shape, dtype, device, contiguous = items[i:i + 5]
            assert key is inserted[i // 5]  # the dict's own key object, not a copy or a name
            assert (type(shape), type(dtype), type(device), type(contiguous)) == (
                torch.Size, torch.dtype, torch.device, bool)
