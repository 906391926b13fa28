"""The shipper's gRPC poster (``pptrace.ship.grpc_poster``): which failures are retried.

Over gRPC a failed call cannot say whether the collector got the request, so the rule is drawn
before the call: an empty ``Export`` call comes first, and when it fails the request's own call
was never started (retried); once it started, every failure is counted lost and never resent.
Each case against the repository's real receiver (the official ``TraceService``), in the failure
mode it stands for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pptrace.ship.grpc_poster import GrpcPoster, grpc_target
from pptrace.ship.shipper import Shipper
from tests.otlp_receiver import Receiver
from tests.test_otlp_ship import _keys, _write_trace


def _poster(rx: Receiver, timeout: float = 2.0) -> GrpcPoster:
    return GrpcPoster(grpc_target({"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
                                   "OTEL_EXPORTER_OTLP_TIMEOUT": str(timeout)}))


def _one_line(tmp_path: Path) -> list[str]:
    from pptrace.ship.reencode import Reencoder

    _write_trace(tmp_path, 10)
    text = next(tmp_path.glob("*.jsonl")).read_text().splitlines()[0]
    return Reencoder().line(text).lines


@pytest.mark.parametrize("mode", ["down", "refuse", "busy"])
def test_a_collector_that_fails_the_empty_call_is_retried_and_gets_no_spans(
        tmp_path: Path, mode: str) -> None:
    """Nothing listening, a TCP listener that speaks no HTTP/2, a collector answering every call
    UNAVAILABLE: the request's own call is never started."""
    lines = _one_line(tmp_path)
    with Receiver("grpc", mode) as rx:
        poster = _poster(rx)
        outcomes = [poster.post(lines) for _ in range(2)]
        got = list(rx.requests)
    assert outcomes == ["retry: collector unreachable"] * 2
    assert poster.requests == 0 and got == []  # no spans were sent: none can arrive


def test_a_collector_that_is_up_takes_the_request_once(tmp_path: Path) -> None:
    lines = _one_line(tmp_path)
    with Receiver("grpc") as rx:
        poster = _poster(rx)
        assert poster.post(lines) == ""
        assert len(rx.requests) == rx.attempts == poster.requests == rx.probes == 1
        spans = rx.spans()
    assert len(spans) == sum(line.count('"spanId"') for line in lines) > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "cause"), [("error", "gRPC call ended INTERNAL"),
                                             ("hang", "gRPC call ended DEADLINE_EXCEEDED"),
                                             ("bloat", "gRPC call ended RESOURCE_EXHAUSTED")])
def test_a_call_that_started_and_failed_is_counted_lost_and_never_sent_again(
        tmp_path: Path, mode: str, cause: str) -> None:
    """An error answer, no answer, an answer too long: the collector may have the spans."""
    events = _write_trace(tmp_path, 1200)
    with Receiver("grpc", mode) as rx:
        poster = _poster(rx, timeout=1.0)
        state = Shipper(str(tmp_path), poster, drain=30.0, linger=0.0, poll=0.01,
                        alive=lambda pid: False).run()
        attempts = rx.attempts
        kept = _keys(rx)
    t = state.totals()
    assert t["events_sent"] == 0
    assert t["events_lost"] == events == 2400 and t["causes"] == {cause: events}
    assert attempts == poster.requests > 1  # each request once, none twice
    if mode == "bloat":  # the collector kept what it was sent: once each, none resent
        assert len(kept) == len(set(kept)) == events


def test_without_grpcio_grpc_stays_in_the_engine_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipper needs grpcio for gRPC; without it the in-process path's set-up says what is
    missing, as before, rather than a shipper that cannot start."""
    import importlib.util

    from pptrace.export.ship_launch import ships_from_files

    both = ("file", "otlp")
    assert ships_from_files(both, "files", "grpc")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "grpc" else real(name, *a))
    assert not ships_from_files(both, "files", "grpc")
    assert ships_from_files(both, "files", "http/protobuf")
