"""Fail-open OTLP: a collector that is down, refuses, answers 500 or never answers changes nothing
the engine sees, cannot hold the process past its exit budget, and every lost span is counted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pptrace
from pptrace.export.otlp import FailOpenProcessor, make_exporter
from pptrace.load.loader import load_paths
from pptrace.model import schema
from pptrace.model.config import Config
from tests.doubles import Observer
from tests.helpers_startup import (
    BARE_SGLANG,
    PYTHON,
    REPO,
    child_env,
    real_module,
    run_pptrace,
    write_consumer,
)
from tests.otlp_receiver import Receiver

PAIRS = 20
EXIT_TIMEOUT = 1.0
SLACK = 4.0  # a loaded 2-core machine; a hang would take the exporter's 10 s default, or forever
FAULTS = ["down", "refuse", "error", "hang"]


@pytest.fixture
def consumer(tmp_path: Path) -> Iterator[Any]:
    real_module()
    yield write_consumer(tmp_path, f"consumer_faults_{tmp_path.name}")
    pptrace.uninstrument()


def _run_pairs(consumer: Any) -> list[tuple[Any, ...]]:
    out = []
    for i in range(PAIRS):
        from tests.doubles import Output

        tensors = consumer.send({"next_token_ids": torch.tensor([i])},
                                Output({"s": torch.full((2,), float(i))}))
        got = consumer.receive(tensors, Observer())
        out.append((list(tensors), float(got.named["s"].sum())))
    return out


@pytest.mark.parametrize("protocol", ["grpc", "http", "json"])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_failing_collector_changes_nothing_and_every_loss_is_counted(
    consumer: Any, monkeypatch: pytest.MonkeyPatch, protocol: str, fault: str, tmp_path: Path
) -> None:
    expected = _run_pairs(consumer)  # the engine alone
    with Receiver(protocol, fault) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", rx.env_protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        # In-process OTLP (inline; the file shipper's faults: tests/test_otlp_ship.py).
        rec = pptrace.instrument(Config(exporters=("file", "otlp"), trace_dir=str(tmp_path / "t"),
                                        flush_interval=0.05, exit_timeout=EXIT_TIMEOUT,
                                        otlp_ship="inline"))
        assert rec is not None
        assert _run_pairs(consumer) == expected  # same results through the failing pipeline
        time.sleep(0.3)  # let a few flushes meet the collector
        t0 = time.monotonic()
        pptrace.uninstrument()
        took = time.monotonic() - t0
        stats = rec.stats()
    assert took < EXIT_TIMEOUT + SLACK, f"exit took {took:.1f}s"
    assert stats.recorded == 2 * PAIRS
    # Every event span lost by OTLP, every one counted as OTLP's own: the file lost none.
    assert stats.sink_lost("otlp") == stats.recorded and stats.dropped == 0, stats
    assert stats.export_errors >= 1
    if fault != "down":
        assert rx.attempts >= 1  # the collector was really reached
    # The trace file has every event, and its last stats span tells of the OTLP losses as
    # OTLP's (never as the file's own, which would weaken what the file shows).
    (path,) = (tmp_path / "t").glob("*.jsonl")
    spans = [s for line in path.read_text().splitlines()
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"]
             for s in ss["spans"]]
    assert sum(s["name"] != schema.SPAN_STATS for s in spans) == 2 * PAIRS
    # Read back as every reader reads it (a version 3 stats span leaves out zero counters).
    (process,) = load_paths([str(tmp_path / "t")]).processes
    assert process.stats is not None
    assert process.stats.sink_lost("otlp") == 2 * PAIRS and process.stats.dropped == 0


def test_a_full_queue_drops_new_spans_and_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver("http", "hang") as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        exporter = make_exporter(Config(exit_timeout=0.5))
        lost: list[tuple[int, str]] = []
        proc = FailOpenProcessor(exporter, exit_timeout=0.3, on_drop=lambda n, c: lost.append(
            (n, c)), queue_size=5, batch_size=1)
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        provider.add_span_processor(proc)
        tracer = provider.get_tracer("t")
        for _ in range(20):
            tracer.start_span(schema.SPAN_ATTACH).end()
        t0 = time.monotonic()
        provider.shutdown()
        assert time.monotonic() - t0 < 0.3 + SLACK
    assert proc.sent == 0
    assert proc.dropped_spans == 20 and proc.dropped_events == 20
    assert proc.causes["queue full"] >= 14  # one in flight, five queued, the rest refused
    assert sum(n for n, _ in lost) == 20


def test_after_a_failure_the_collector_is_retried_later_and_delivery_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    with Receiver("http", "error") as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        exporter = make_exporter(Config(exit_timeout=2))
        proc = FailOpenProcessor(exporter, exit_timeout=2)
        provider = TracerProvider()
        provider.add_span_processor(proc)
        tracer = provider.get_tracer("t")
        tracer.start_span(schema.SPAN_ATTACH).end()
        deadline = time.monotonic() + 10
        while not proc.failed_batches and time.monotonic() < deadline:
            time.sleep(0.02)
        rx.mode = "ok"  # the collector comes back while pptrace waits before retrying
        tracer.start_span(schema.SPAN_EXTRACT).end()
        assert proc.force_flush(10_000)
        provider.shutdown()
    assert (proc.sent, proc.dropped_events, proc.failed_batches) == (1, 1, 1)
    assert [name for _, _, name in rx.spans()] == [schema.SPAN_EXTRACT]


ENGINE = BARE_SGLANG + """
import torch
from sglang.srt.sampling.sampling_observer_pp import (
    add_auxiliary_output_to_pp_tensors as attach, pop_auxiliary_output_from_pp_tensors as extract)


class Out:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Obs:
    def from_pp_tensors(self, tensors):
        return Out(dict(tensors))


for i in range(10):
    d = {"next_token_ids": torch.tensor([i])}
    attach(d, Out({"s": torch.full((2,), float(i))}))
    print("result", i, float(extract(d, Obs()).named["s"].sum()), sorted(d), flush=True)

import time
print("done", time.monotonic(), flush=True)  # the exit flush starts after this
"""
EXPECTED = [f"result {i} {2.0 * i} ['next_token_ids']" for i in range(10)]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["grpc", "http", "json"])
def test_under_pptrace_run_a_hung_collector_costs_at_most_the_exit_budget(
    tmp_path: Path, protocol: str
) -> None:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    env = child_env(PYTHONPATH=str(REPO))
    with Receiver(protocol, "hang") as rx:
        proc = run_pptrace(["--export", "otlp", "--exit-timeout", "1", "--protocol",
                            rx.env_protocol, "--endpoint", rx.endpoint, "--",
                            PYTHON, str(script)], env, tmp_path)
        exited = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:-1] == EXPECTED  # the engine's results, unchanged
    # From the engine's last line to the process's end (CLOCK_MONOTONIC is system-wide): the
    # exit budget plus interpreter teardown; a stuck exporter would take 10 s or forever.
    exit_took = exited - float(out[-1].split()[1])
    assert exit_took < 1.0 + SLACK, f"exit took {exit_took:.1f}s"
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("pptrace: ")]
    summary = [ln for ln in lines if "events recorded" in ln]
    assert len(summary) == 1, proc.stderr
    assert "20 events recorded" in summary[0] and "lost spans: 20 exit timeout" in summary[0]
