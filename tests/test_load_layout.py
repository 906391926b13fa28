"""Events are addressed by field name on the loader's tuple-speed paths (``pptrace.load.layout``,
the worker's packing), so that a field added to ``Event`` fails here, by name, not silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pptrace.export.sinks import build_sink
from pptrace.load import layout
from pptrace.load import worker as load_worker
from pptrace.load.fast import FastLines
from pptrace.load.loader import load_paths
from pptrace.model.config import Config
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, host="h",
                pid=7)


def full_event(seq: int = 3, rank: RankInfo = RANK, error: bool = True) -> Event:
    """An event whose every field differs from its default (the error fields unless not
    ``error``: an error span is never cached by the fast path)."""
    meta = TensorMeta(name="scores", key=PREFIX + "scores", shape=(2, 5), dtype="float32",
                      device="cpu", nbytes=40, contiguous=False, is_tensor=True,
                      fingerprint="ab12")
    return Event(
        direction=Direction.EXTRACT, seq=seq, rank=rank, start_ns=1_000 + seq, mono_ns=2_000 + seq,
        duration_ns=300 + seq, thread_id=41, thread_name="worker-1", subject_type="pkg.Observer",
        subject_pp_capable=False, tensors=(meta,), keys_before=("ids", PREFIX + "scores"),
        keys_after=("ids",), returned_none=False,
        error_type="builtins.RuntimeError" if error else None,
        error_message="boom" if error else None,
        inserted_before_error=(PREFIX + "scores",) if error else (), dropped_before=5,
        run_id="r1", extra=(("k", "v"),),
    )


def test_every_field_differs_from_its_default_in_the_full_event() -> None:
    ev = full_event()
    for name, default in Event._field_defaults.items():
        assert getattr(ev, name) != default, name
    assert len(Event._fields) == len(ev)


@pytest.mark.parametrize("name", ["DIRECTION", "SEQ", "START_NS", "MONO_NS", "DURATION_NS",
                                  "THREAD_ID", "DROPPED_BEFORE"])
def test_positions_are_the_fields_named(name: str) -> None:
    assert getattr(layout, name) == Event._fields.index(name.lower())


def test_with_numbers_is_replace_of_the_four_numbers() -> None:
    ev = full_event()
    got = layout.with_numbers(ev, 11, 12, 13, 14)
    assert type(got) is Event
    assert got == ev._replace(seq=11, start_ns=12, mono_ns=13, duration_ns=14)


def test_an_event_is_its_parts_with_the_four_numbers() -> None:
    ev = full_event()
    direction, rank, tail = layout.parts_of(ev)
    got = tuple.__new__(Event, (direction, 11, rank, 12, 13, 14, *tail))
    assert type(got) is Event
    assert got == ev._replace(seq=11, start_ns=12, mono_ns=13, duration_ns=14)


def test_the_worker_packs_every_field_of_event_by_name() -> None:
    # A field added to Event must be given a way to travel: the worker refuses to import
    # (ImportError naming the field) until FIELD_TABLES has it.
    assert set(load_worker.FIELD_TABLES) == set(Event._fields)
    assert set(load_worker.FIELD_TABLES.values()) <= {"plain", "direction", "ranks", "tensors",
                                                      "tuples", "strings"}


@pytest.mark.slow  # starts a loader worker
def test_a_full_event_survives_every_loader_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = {}
    for r in (0, 1):
        rank = RankInfo(rank=r, world_size=2, pp_rank=r, pp_size=2, tp_rank=0, tp_size=1,
                        host="h", pid=10 + r)
        events = [full_event(seq, rank, error=seq % 5 == 4) for seq in range(30)]
        sink = build_sink(Config(trace_dir=str(tmp_path)), rank)
        for i in range(0, len(events), 8):
            sink.export(events[i : i + 8])
        sink.shutdown(1.0)
        written[(rank.host, rank.pid, rank.instance)] = events  # a process: host, pid, instance

    def loaded() -> dict[tuple[str, int, str], list[Event]]:
        return {p.key: list(p.events) for p in load_paths([str(tmp_path)]).processes}

    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    assert loaded() == written  # this process, the fast path
    rows: list[int] = []
    real_take = load_worker.take

    def take_spy(builder: Any, result: Any, packed: bytes) -> Any:
        rows.append(len(packed) // 40)
        return real_take(builder, result, packed)

    monkeypatch.delenv("PPTRACE_LOAD_WORKERS")
    monkeypatch.setattr(load_worker, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(load_worker, "_cpus", lambda: 2)
    monkeypatch.setattr(load_worker, "take", take_spy)
    assert loaded() == written  # the worker's rows and packed events
    assert rows and rows[0] > 0
    monkeypatch.setattr(FastLines, "line", lambda self, text: False)
    monkeypatch.setenv("PPTRACE_LOAD_WORKERS", "0")
    assert loaded() == written  # the ordinary path
