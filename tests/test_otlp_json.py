"""OTLP over ``http/json``: what keeps it cheap for the engine, bounded, and honest in its counts.

The speed comes from the recorder thread building no SDK span and encoding no protobuf (the
trace-file encoder's lines are posted as they are), so that is what these tests keep: never a
timing (``benchmarks/bench_engine_cost.py`` prints those). Against the real receiver
(``tests/otlp_receiver.py``: every JSON body parsed strictly into the official protobuf
request), the spans are whole (version 1: every attribute on every span, what a Jaeger search by
tag needs), each event arrives once, requests are bounded, and every loss is counted.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import requests
import torch
import urllib3

import pptrace
from pptrace.export.file_sink import SPANS_PER_LINE
from pptrace.export.otlp_json import BATCH_LINES, JsonShipper, Target
from pptrace.export.sinks import build_sink
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.records import RankInfo
from pptrace.record.engine import (
    add_auxiliary_output_to_pp_tensors,
    pop_auxiliary_output_from_pp_tensors,
)
from pptrace.record.recorder import Recorder
from pptrace.record.wrapper import wrap_transport
from tests.doubles import Observer, Output
from tests.otlp_receiver import Receiver

RANK = RankInfo(rank=1, world_size=2, pp_rank=1, pp_size=2, tp_rank=0, tp_size=1, pid=4242)


def _record(receiver: Receiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
            pairs: int, exit_timeout: float = 2.0,
            flush_interval: float = 0.05) -> tuple[Recorder, int]:
    """Trace ``pairs`` attach+extract pairs to files and OTLP; the SDK spans started meanwhile."""
    from opentelemetry.sdk import trace as sdk_trace

    started = collections.Counter[str]()
    real_start = sdk_trace.Tracer.start_span

    def counting_start(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        started[name] += 1
        return real_start(self, name, *args, **kwargs)

    monkeypatch.setattr(sdk_trace.Tracer, "start_span", counting_start)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", receiver.env_protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    # The in-process path (PPTRACE_OTLP_SHIP=inline); the default ships from the files, out of
    # process: tests/test_otlp_ship.py.
    cfg = Config(trace_dir=str(tmp_path), exporters=("file", "otlp"), flush_interval=flush_interval,
                 exit_timeout=exit_timeout, otlp_ship="inline")
    rec: Recorder
    rec = Recorder(cfg, sink_factory=lambda r: build_sink(
        cfg, r, on_drop=lambda n, c: rec.exporter_dropped(n, c), stats=lambda: rec.stats()),
        rank_provider=lambda: (RANK, True))
    rec.start()
    attach, extract = wrap_transport(add_auxiliary_output_to_pp_tensors,
                                     pop_auxiliary_output_from_pp_tensors, rec)
    for i in range(pairs):
        tensors: dict[str, object] = {"next_token_ids": torch.tensor([i])}
        attach(tensors, Output(2))
        extract(tensors, Observer())
    rec.shutdown()
    return rec, sum(started.values())


def _event_spans(rx: Receiver) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    return [s for s in rx.spans() if s[2] != schema.SPAN_STATS]


@pytest.mark.parametrize("protocol", ["json", "http"])
def test_the_json_path_builds_no_sdk_span_and_the_protobuf_one_does(
        protocol: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with Receiver(protocol) as rx:
        rec, sdk_spans = _record(rx, monkeypatch, tmp_path, 40)
    assert len(_event_spans(rx)) == 80 == rec.stats().recorded
    if protocol == "json":
        assert sdk_spans == 0 and rx.json_requests == rx.attempts > 0
    else:  # the control: the SDK path does build them, so the count above can fail
        assert sdk_spans >= 80 and rx.json_requests == 0


def test_json_spans_say_what_the_sdk_path_s_spans_said_each_on_its_own(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Jaeger searches a span by its own tags and its process's: a JSON span (version 1) is
    complete without its resource, and decodes to the event the SDK path's compact span and its
    resource decode to (``schema.attributes_to_event``), times aside."""
    got: dict[str, dict[tuple[str, int], Any]] = {}
    for protocol in ("http", "json"):
        with Receiver(protocol) as rx:
            _record(rx, monkeypatch, tmp_path / protocol, 5)
        spans = _event_spans(rx)
        got[protocol] = {
            (name, attrs[schema.SEQ]): schema.attributes_to_event(
                attrs, resource=None if protocol == "json" else res, name=name)._replace(
                    start_ns=0, mono_ns=0, duration_ns=0)
            for res, attrs, name in spans}
        if protocol == "json":
            assert {attrs[schema.VERSION] for _, attrs, _ in spans} == {1}
    assert got["http"].keys() == got["json"].keys() and len(got["json"]) == 10
    assert got["json"] == got["http"]
    assert {e.rank for e in got["json"].values()} == {RANK}


def test_each_event_arrives_once_and_requests_are_bounded(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with Receiver("json") as rx:
        # A long exit budget: the test receiver parses JSON in Python, far slower than a
        # collector, and the loop records faster than any engine.
        # A flush interval of a second, as a deployment's: the recorder sheds (and counts) what
        # it cannot write within one interval, which a loaded machine reaches at 0.05 s.
        rec, _ = _record(rx, monkeypatch, tmp_path, 1500, exit_timeout=60.0,
                         flush_interval=1.0)
    stats = rec.stats()
    keys = [(name, attrs[schema.SEQ]) for _, attrs, name in _event_spans(rx)]
    # Every event the sinks took arrived, once; what the recorder shed before any sink is counted
    # (``recorded = exported + dropped``), and the OTLP sink lost nothing it was given.
    assert len(keys) == len(set(keys)) == stats.exported > 0
    assert stats.exported + stats.dropped == stats.recorded == 3000
    assert stats.sink_lost("otlp") == 0
    sizes = [sum(len(ss.spans) for rs in r.resource_spans for ss in rs.scope_spans)
             for r in rx.requests]
    assert max(sizes) <= BATCH_LINES * SPANS_PER_LINE and len(sizes) >= 3000 // max(sizes)


def _shipper(session: Any, **kw: Any) -> tuple[JsonShipper, list[tuple[int, str]]]:
    lost: list[tuple[int, str]] = []
    shipper = JsonShipper(Target("http://127.0.0.1:9/v1/traces"), exit_timeout=2.0,
                          on_drop=lambda n, c: lost.append((n, c)), session=session, **kw)
    return shipper, lost


LINE = '{"resourceSpans":[{"resource":{},"scopeSpans":[]}]}'


class _Session:
    """A session whose answers the test scripts: an exception to raise or a status code."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.posts: list[bytes] = []

    def post(self, url: str, data: bytes, **_: Any) -> Any:
        self.posts.append(data)
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, BaseException):
            raise answer
        return type("Response", (), {"status_code": answer})()


def _refused() -> requests.exceptions.ConnectionError:
    reason = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, "/v1/traces", reason))  # type: ignore[arg-type]


def test_a_batch_the_collector_never_got_is_posted_again_and_counted_once() -> None:
    session = _Session([_refused(), 503])
    shipper, lost = _shipper(session)
    shipper.put_lines([LINE], events=5)
    assert shipper.force_flush(20_000)
    shipper.shutdown(1.0)
    # Refused, then 503 (OTLP: retry), then taken: three posts of one batch, delivered once.
    assert len(session.posts) == 3 and len(set(session.posts)) == 1
    assert (shipper.sent_events, shipper.dropped_events, lost) == (5, 0, [])


def test_a_batch_the_collector_may_have_got_is_never_sent_twice_and_counted_lost() -> None:
    session = _Session([requests.exceptions.ReadTimeout("read timed out"), 400])
    shipper, lost = _shipper(session)
    shipper.put_lines([LINE], events=3)
    assert shipper.force_flush(20_000)
    shipper.put_lines([LINE], events=4)
    assert shipper.force_flush(20_000)
    shipper.shutdown(1.0)
    assert len(session.posts) == 2
    assert shipper.sent_events == 0 and shipper.dropped_events == 7
    assert lost == [(3, "export raised ReadTimeout"), (4, "collector answered 400")]


def test_a_full_queue_drops_new_lines_and_counts_their_events() -> None:
    with Receiver("json", "hang") as rx:
        shipper, lost = _shipper(None, queue_lines=3, batch_lines=1)
        shipper.target = Target(rx.endpoint + "/v1/traces", timeout=0.2)
        shipper.put_lines([LINE] * 10, events=10 * SPANS_PER_LINE)
        shipper.shutdown(0.5)
    assert shipper.sent_events == 0
    assert shipper.dropped_events == 10 * SPANS_PER_LINE
    assert shipper.causes["queue full"] == 7 * SPANS_PER_LINE
    assert sum(n for n, _ in lost) == 10 * SPANS_PER_LINE


def test_under_instrument_the_default_protocol_is_json(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Asked to post from the engine's process (``PPTRACE_OTLP_SHIP=inline``), a user who only
    points OTEL_EXPORTER_OTLP_ENDPOINT at a collector gets the JSON path."""
    from tests.helpers_core import real_module

    module = real_module()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    with Receiver("json") as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        rec = pptrace.instrument(Config(exporters=("file", "otlp"), trace_dir=str(tmp_path),
                                        flush_interval=0.05, otlp_ship="inline"))
        try:
            for _ in range(3):
                tensors: dict[str, object] = {}
                module.add_auxiliary_output_to_pp_tensors(tensors, Output(1))
                module.pop_auxiliary_output_from_pp_tensors(tensors, Observer())
        finally:
            pptrace.uninstrument()
    assert rec is not None and rec.stats().sink_lost("otlp") == 0
    assert len(_event_spans(rx)) == 6 and rx.json_requests >= 1
