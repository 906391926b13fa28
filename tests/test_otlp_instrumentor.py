"""OpenTelemetry's side: the ``opentelemetry_instrumentor`` entry point, spans through a provider
the engine (or OpenTelemetry) configured, and OTLP settings taken from the standard variables."""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pptrace
from pptrace.activation.otel_instrumentor import PptraceInstrumentor
from pptrace.activation.startup import active_recorder
from pptrace.engines.sglang_load import ATTACH, MODULE
from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.record.wrapper import is_wrapped
from tests.helpers_startup import (
    BARE_SGLANG,
    PYTHON,
    REPO,
    child_env,
    real_module,
    run_pptrace,
    sample_output,
    write_consumer,
)
from tests.otlp_receiver import Receiver


@pytest.fixture(autouse=True)
def _never_leave_it_instrumented() -> Iterator[None]:
    yield
    pptrace.uninstrument()


def test_the_entry_point_names_the_instrumentor() -> None:
    (ep,) = entry_points(group="opentelemetry_instrumentor", name="pptrace")
    assert ep.load() is PptraceInstrumentor
    assert tuple(PptraceInstrumentor().instrumentation_dependencies()) == ()


def test_the_instrumentor_sends_spans_through_the_given_provider(tmp_path: Path) -> None:
    real_module()
    consumer = write_consumer(tmp_path, "consumer_otel")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = PptraceInstrumentor()
    try:
        instrumentor.instrument(tracer_provider=provider, config=Config(
            exporters=("otlp",), flush_interval=0.05))
        assert is_wrapped(getattr(consumer, ATTACH))
        consumer.send({"next_token_ids": torch.tensor([1])}, sample_output())
        rec = active_recorder()
        assert rec is not None
        deadline = time.monotonic() + 10
        while not memory.get_finished_spans() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        instrumentor.uninstrument()
    assert not is_wrapped(getattr(consumer, ATTACH))
    spans = [s for s in memory.get_finished_spans() if s.name != schema.SPAN_STATS]
    assert [s.name for s in spans] == [schema.SPAN_ATTACH]
    attrs: Any = spans[0].attributes
    assert attrs[schema.T_NAMES] == ("scores", "ids")
    assert rec.stats().dropped == 0


def test_otlp_headers_and_service_name_come_from_the_standard_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_module()
    consumer = write_consumer(tmp_path, "consumer_headers")
    with Receiver("http") as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=pp,authorization=Bearer%20t")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "my-engine")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        pptrace.instrument(Config(exporters=("otlp",), flush_interval=0.05, exit_timeout=5))
        consumer.send({}, sample_output())
        pptrace.uninstrument()
        spans = rx.spans()
    assert rx.headers and rx.headers[0]["x-tenant"] == "pp"
    assert rx.headers[0]["authorization"] == "Bearer t"
    (resource, attrs, _), = [s for s in spans if s[2] == schema.SPAN_ATTACH]
    assert resource["service.name"] == "my-engine"
    assert resource["deployment.environment"] == "test"
    assert attrs[schema.DIRECTION] == "attach"


def test_otel_sdk_disabled_turns_pptrace_off_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_module()
    consumer = write_consumer(tmp_path, "consumer_disabled")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    for _ in range(2):
        assert pptrace.instrument(Config(exporters=("file", "otlp"))) is None
    assert not is_wrapped(getattr(consumer, ATTACH))
    assert capsys.readouterr().err.count("OTEL_SDK_DISABLED=true") == 1


ENGINE_WITH_TRACING = BARE_SGLANG + f"""
# The engine's own tracing, configured before the engine runs (as SGLang's --enable-trace does).
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({{"service.name": "the-engine"}}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
with trace.get_tracer("engine").start_as_current_span("engine.step"):
    pass

import torch
from {MODULE} import {ATTACH} as attach


class Out:
    def to_pp_tensors(self):
        return {{"a": torch.ones(2)}}


for _ in range(3):
    attach({{}}, Out())
# No waiting: what the run recorded reaches the engine's pipeline at exit, flush before shutdown
"""


@pytest.mark.slow
def test_an_engine_provider_carries_pptrace_spans_instead_of_a_second_pipeline(
    tmp_path: Path,
) -> None:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE_WITH_TRACING)
    with Receiver("http") as rx:
        env = child_env(PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                        OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint)
        proc = run_pptrace(["--export", "otlp", "--", PYTHON, str(script)], env, tmp_path)
        spans = rx.spans()
    assert proc.returncode == 0, proc.stderr
    names = sorted(name for _, _, name in spans if name != schema.SPAN_STATS)
    assert names == ["engine.step"] + [schema.SPAN_ATTACH] * 3
    assert {res["service.name"] for res, _, _ in spans} == {"the-engine"}  # one pipeline
