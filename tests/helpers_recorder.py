"""Shared pieces for the recorder tests: an in-memory sink, user objects, a wrapped transport.

    sink = MemorySink()
    rec = recorder(Config(mode="flight", flight_size=8), sink)
    attach, extract = wrapped(rec)
    drive(attach, extract, pairs=10)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

import pptrace.record.engine as engine
from pptrace.model.config import Config
from pptrace.model.records import Direction, Event, RankInfo, RecorderStats
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output

RANK = RankInfo(rank=0, world_size=1, pp_rank=0, pp_size=1, tp_rank=0, tp_size=1,
                host="testhost", pid=os.getpid())


class MemorySink:
    """Keeps what it is given; thread-safe; can be told to hang or to be slow."""

    def __init__(self, delay: float = 0.0, hang: threading.Event | None = None) -> None:
        self.events: list[Event] = []
        self.stats: list[RecorderStats] = []
        self.calls = 0
        self.delay = delay
        self.hang = hang  # export blocks until this is set
        self.lock = threading.Lock()
        self.closed = False

    def export(self, events: Sequence[Event]) -> None:
        self.calls += 1
        if self.hang is not None:
            self.hang.wait(30)
        if self.delay:
            time.sleep(self.delay)
        with self.lock:
            self.events.extend(events)

    def export_stats(self, stats: RecorderStats) -> None:
        with self.lock:
            self.stats.append(stats)

    def shutdown(self, timeout: float) -> None:
        self.closed = True

    def seqs(self, direction: Direction) -> list[int]:
        with self.lock:
            return [e.seq for e in self.events if e.direction is direction]


class Composite:
    """Two outputs merged into one that cannot travel (no ``to_pp_tensors``)."""


def recorder(config: Config, sink: Any) -> Recorder:
    """A recorder with a fixed rank writing to ``sink``."""
    return Recorder(config, sink_factory=lambda _rank: sink, rank_provider=lambda: (RANK, True))


def wrapped(rec: Recorder) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """pptrace's reference transport, wrapped with ``rec``."""
    return wrap_transport(engine.add_auxiliary_output_to_pp_tensors,
                          engine.pop_auxiliary_output_from_pp_tensors, rec)


def drive(attach: Callable[..., Any], extract: Callable[..., Any], pairs: int,
          n: int = 2) -> None:
    """Run ``pairs`` healthy attach+extract round trips."""
    output, observer = Output(n), Observer()
    for _ in range(pairs):
        tensors: dict[str, Any] = {"next_token_ids": torch.zeros(4, dtype=torch.long)}
        attach(tensors, output)
        extract(tensors, observer)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def check_raw(raw: Any, direction: Direction, subject: type, before: tuple[str, ...],
              after: tuple[str, ...], error: bool) -> None:
    """Assert that ``raw`` is a raw record of ``pptrace.model.raw``'s layout, read by name."""
    from pptrace.model import raw as R

    assert type(raw) is tuple and len(raw) == R.RAW_LEN, raw
    assert raw[R.DIRECTION] is direction
    assert type(raw[R.SEQ]) is int and raw[R.SEQ] >= 0
    assert type(raw[R.WALL_NS]) is int and raw[R.WALL_NS] > 1_500_000_000 * 10**9  # after 2017
    assert type(raw[R.MONO_NS]) is int and type(raw[R.DURATION_NS]) is int
    assert 0 <= raw[R.DURATION_NS] < 60 * 10**9
    assert raw[R.THREAD] is threading.current_thread()
    assert raw[R.SUBJECT] is subject
    assert raw[R.KEYS_BEFORE] == before and raw[R.KEYS_AFTER] == after
    assert type(raw[R.ITEMS]) in (tuple, list, bytes)
    assert raw[R.RETURNED_NONE] is (True if error or direction is Direction.ATTACH else False)
    if error:
        etype, message = raw[R.ERROR]
        assert etype == "RuntimeError" and type(message) is str and message
    else:
        assert raw[R.ERROR] is None
    assert type(raw[R.DROPPED]) is int and raw[R.DROPPED] >= 0
    assert raw[R.FINGERPRINTS] is None
