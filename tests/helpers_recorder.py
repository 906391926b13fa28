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
