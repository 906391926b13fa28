"""A hostile collector cannot make pptrace read without bound (issue 15, item 4).

Real receivers on 127.0.0.1 (``tests/otlp_receiver.py``): over HTTP one that answers ``200 OK``
with ``Content-Length: 10^12`` and streams zeros, one that streams chunks with no length, one
that trickles a byte every 50 ms; over gRPC one whose valid answer carries a 1 MiB message. In
each case this process (the engine's) reads at most ``MAX_RESPONSE_BYTES`` of the answer, its
memory does not grow with what the peer sends, the export ends within its timeout, and every
span it cost is counted as lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider

import pptrace
from pptrace.export.otlp import MAX_RESPONSE_BYTES, FailOpenProcessor, make_exporter
from pptrace.model import schema
from pptrace.model.config import Config
from tests.doubles import Observer, Output
from tests.helpers_startup import real_module, write_consumer
from tests.otlp_receiver import Receiver

MiB = 2**20
#: What the process may grow by while a peer floods it: interpreter noise, not the flood.
GROWTH = 48 * MiB
#: What the peer may get written before pptrace hangs up: the bound, plus loopback socket
#: buffers (a few MB each way).
SENT = 32 * MiB


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class PeakRss:
    """The highest resident size of this process while the block runs (sampled every 5 ms)."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base


@pytest.fixture
def consumer(tmp_path: Path) -> Iterator[Any]:
    real_module()
    yield write_consumer(tmp_path, f"consumer_bounds_{tmp_path.name}")
    pptrace.uninstrument()


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
@pytest.mark.parametrize("mode", ["flood", "chunked"])
def test_an_endless_answer_costs_the_engine_no_memory_and_is_counted(
    consumer: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str, protocol: str
) -> None:
    pairs = 20
    with Receiver("json" if protocol == "http/json" else "http", mode) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        with PeakRss() as memory:
            rec = pptrace.instrument(Config(exporters=("otlp",), flush_interval=0.05,
                                            exit_timeout=2.0))
            assert rec is not None
            for i in range(pairs):
                tensors = consumer.send({"next_token_ids": torch.tensor([i])},
                                        Output({"s": torch.full((2,), float(i))}))
                got = consumer.receive(tensors, Observer())
                assert list(tensors) == ["next_token_ids"] and float(got.named["s"][0]) == i
            counted = wait_until(lambda: rec.stats().sink_lost("otlp") == 2 * pairs, 20)
            pptrace.uninstrument()
        stats = rec.stats()
        sent = rx.body_sent
    assert counted, stats
    assert stats.recorded == 2 * pairs and stats.sink_lost("otlp") == 2 * pairs
    assert rx.attempts >= 1  # the collector really answered
    assert sent < SENT, f"the peer wrote {sent / MiB:.0f} MiB before pptrace hung up"
    assert memory.growth < GROWTH, f"the process grew by {memory.growth / MiB:.0f} MiB"


def _export_to(rx: Receiver, monkeypatch: pytest.MonkeyPatch, spans: int = 3,
               timeout: float = 0.5) -> tuple[FailOpenProcessor, list[tuple[int, str]], float]:
    """Export ``spans`` spans through pptrace's exporter to ``rx``; wait for their outcome."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", rx.env_protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
    lost: list[tuple[int, str]] = []
    proc = FailOpenProcessor(make_exporter(Config(exit_timeout=timeout)), exit_timeout=10,
                             on_drop=lambda n, cause: lost.append((n, cause)))
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    t0 = time.monotonic()
    for _ in range(spans):
        tracer.start_span(schema.SPAN_ATTACH).end()
    done = wait_until(lambda: proc.sent + proc.dropped_spans == spans, 30)
    took = time.monotonic() - t0
    provider.shutdown()
    assert done, (proc.sent, proc.dropped_spans, proc.causes)
    return proc, lost, took


def test_a_trickled_answer_is_cut_off_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Receiver("http", "trickle") as rx:
        proc, lost, took = _export_to(rx, monkeypatch, timeout=0.5)
    # 10^6 bytes at one per 50 ms would take 14 hours; the read stops after about a timeout.
    assert took < 5, f"the export took {took:.1f} s"
    assert proc.sent == 0 and proc.dropped_events == 3 and sum(n for n, _ in lost) == 3
    assert rx.body_sent < 100


def test_an_oversized_grpc_answer_is_refused_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Receiver("grpc", "bloat") as rx:
        with PeakRss() as memory:
            proc, lost, _ = _export_to(rx, monkeypatch, timeout=2.0)
    assert rx.attempts >= 1 and rx.requests  # the collector took the spans, then answered big
    assert proc.sent == 0 and proc.dropped_events == 3 and sum(n for n, _ in lost) == 3
    assert memory.growth < GROWTH


def test_an_ordinary_answer_still_confirms_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    for protocol in ("http", "grpc"):
        with Receiver(protocol, "ok") as rx:
            proc, lost, _ = _export_to(rx, monkeypatch, timeout=2.0)
        assert (proc.sent, proc.dropped_spans, lost) == (3, 0, []), protocol
        assert [name for _, _, name in rx.spans()] == [schema.SPAN_ATTACH] * 3
    assert MAX_RESPONSE_BYTES <= 64 * 1024
