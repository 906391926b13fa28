"""The raw record's layout is defined once (``pptrace.model.raw``): every builder follows it, and a
field added on one side fails here (the native reader's side: ``tests/test_native.py``)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

from pptrace.model import raw as R
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction
from pptrace.record import recorder as recorder_module
from pptrace.record.convert import Converter
from tests.doubles import Observer, Output
from tests.helpers_recorder import RANK, MemorySink, check_raw, recorder, wrapped


def test_every_field_has_one_named_position() -> None:
    constants = {name: value for name, value in vars(R).items()
                 if name.isupper() and type(value) is int and name != "RAW_LEN"}
    assert constants == {name.upper(): i for i, name in enumerate(R.RAW_FIELDS)}
    assert R.RAW_LEN == len(R.RAW_FIELDS) == len(set(R.RAW_FIELDS))
    # The cold paths' builder takes every field by name and puts it at its position.
    assert tuple(inspect.signature(R.make).parameters) == R.RAW_FIELDS
    built = R.make(**{name: name for name in R.RAW_FIELDS})  # type: ignore[arg-type]
    assert built == R.RAW_FIELDS


def _raws(native: bool) -> list[tuple[str, Any]]:
    """Every way the wrappers build a raw: (what, raw), each checked against the layout."""
    rec = recorder(Config(native=native, flush_interval=3600), MemorySink())
    attach, extract = wrapped(rec)
    out, obs = Output(2), Observer()
    d: dict[str, Any] = {"next_token_ids": torch.zeros(1)}
    attach(d, out)
    extract(d, obs)
    with pytest.raises(RuntimeError):
        attach({"next_token_ids": torch.zeros(1)}, Output(0))
    with pytest.raises(RuntimeError):
        extract({PREFIX + "t0": torch.zeros(1)}, None)
    raws = list(rec.buffer)
    rec.shutdown(5.0)
    return list(zip(["attach", "extract", "attach error", "extract error"], raws, strict=True))


KEYS = ("next_token_ids", PREFIX + "t0", PREFIX + "t1")
#: What each builder's raw holds: (direction, subject, keys before, keys after, raised).
WANT = {
    "attach": (Direction.ATTACH, Output, KEYS[:1], KEYS, False),
    "extract": (Direction.EXTRACT, Observer, KEYS, KEYS[:1], False),
    "attach error": (Direction.ATTACH, Output, KEYS[:1], KEYS[:1], True),
    "extract error": (Direction.EXTRACT, type(None), (PREFIX + "t0",), (PREFIX + "t0",), True),
}


def test_every_python_builder_follows_the_layout() -> None:
    found = _raws(native=False)
    assert [what for what, _ in found] == list(WANT)
    for what, raw in found:
        check_raw(raw, *WANT[what])


def test_the_converter_reads_the_fields_by_name() -> None:
    rec = recorder(Config(native=False, flush_interval=3600), MemorySink())
    attach, extract = wrapped(rec)
    attach({"next_token_ids": torch.zeros(1)}, Output(1))
    (raw,) = rec.buffer
    event = Converter(rec, RANK)(raw)
    assert (event.direction, event.seq, event.start_ns, event.mono_ns, event.duration_ns,
            event.dropped_before) == (raw[R.DIRECTION], raw[R.SEQ], raw[R.WALL_NS],
                                      raw[R.MONO_NS], raw[R.DURATION_NS], raw[R.DROPPED])
    assert event.keys_before == raw[R.KEYS_BEFORE] and event.keys_after == raw[R.KEYS_AFTER]
    assert event.names == ("t0",)
    with pytest.raises(ValueError, match=f"not {R.RAW_LEN}"):
        Converter(rec, RANK)(raw + (None,))  # a field the converter does not know of
    rec.shutdown(5.0)


def test_the_c_wrappers_reads_are_recorder_attributes() -> None:
    rec = recorder(Config(), MemorySink())
    for name in recorder_module.HOT_READS:
        assert not name.startswith("_") and hasattr(rec, name), name
    assert type(rec.enabled) is bool and type(rec.rank_pending) is bool
    assert type(rec.dropped) is int
