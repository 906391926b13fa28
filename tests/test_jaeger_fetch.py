"""``--jaeger``: spans fetched from Jaeger's query API (v3, or the older /api/traces) load as the
same events pptrace recorded, and the analyze command reads them without any file copied."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pptrace.cli.inputs import add_input_arguments, jaeger_query
from pptrace.cli.main import main
from pptrace.export.spans import SdkSpanSink, process_resource
from pptrace.load.jaeger_fetch import JaegerQuery, fetch_to_file
from pptrace.load.loader import load_paths
from pptrace.model.errors import ConfigError, TraceInputError
from pptrace.model.records import PREFIX, Direction, Event, RankInfo, TensorMeta
from tests.fake_jaeger import endless_jaeger, fake_jaeger
from tests.helpers_analyze import jaeger_tag
from tests.otlp_oracle import official_line

NOW = time.time_ns()
T = TensorMeta(name="scores", key=PREFIX + "scores", shape=(2, 3), dtype="float32", device="cpu",
               nbytes=24)


def _events() -> list[tuple[RankInfo, Event]]:
    out = []
    for rank, direction in ((1, Direction.ATTACH), (0, Direction.EXTRACT)):
        info = RankInfo(rank=rank, world_size=2, pp_rank=rank, pp_size=2, tp_rank=0, tp_size=1,
                        host="h", pid=100 + rank)
        for seq in range(3):
            out.append((info, Event(direction=direction, seq=seq, rank=info,
                                    start_ns=NOW - 10**9 + seq * 1000, mono_ns=seq, duration_ns=500,
                                    tensors=(T,), keys_before=("next_token_ids",),
                                    keys_after=("next_token_ids",), run_id="j1")))
    return out


def _spans() -> list[ReadableSpan]:
    spans: list[ReadableSpan] = []
    for info, event in _events():
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=process_resource(info, "j1"))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        SdkSpanSink(provider).export([event])
        spans += memory.get_finished_spans()
    return spans


def _v3_body(spans: list[ReadableSpan]) -> bytes:
    # What Jaeger's API v3 answers: OTLP JSON under "result" (one chunk per trace here).
    return b"\n".join(b'{"result":' + official_line([s]).encode() + b"}" for s in spans)


def _legacy_body(spans: list[ReadableSpan]) -> bytes:
    data = []
    for s in spans:
        ctx = s.get_span_context()
        assert ctx is not None and s.start_time is not None and s.end_time is not None
        data.append({
            "traceID": f"{ctx.trace_id:032x}",
            "spans": [{
                "traceID": f"{ctx.trace_id:032x}", "spanID": f"{ctx.span_id:016x}",
                "operationName": s.name, "references": [], "processID": "p1",
                "startTime": s.start_time // 1000, "duration": (s.end_time - s.start_time) // 1000,
                "tags": [jaeger_tag(k, v) for k, v in (s.attributes or {}).items()], "logs": [],
            }],
            "processes": {"p1": {"serviceName": "pptrace", "tags": [
                jaeger_tag(k, v) for k, v in s.resource.attributes.items()]}},
        })
    return json.dumps({"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}).encode()


@contextlib.contextmanager
def _jaeger(v3: tuple[int, bytes], legacy: tuple[int, bytes]) -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    def answer(path: str) -> tuple[int, bytes]:
        seen.append(path)
        return v3 if path.startswith("/api/v3/") else legacy

    with fake_jaeger(answer) as url:
        yield url, seen


def _summary(events: Any) -> list[tuple[Any, ...]]:
    return sorted((e.direction.value, e.rank.rank, e.rank.pp_rank, e.seq, e.names,
                   e.tensors[0].shape, e.run_id) for e in events)


EXPECTED = _summary(e for _, e in _events())
NOT_FOUND = (404, b"404 page not found\n")  # an older Jaeger, without API v3


@pytest.mark.parametrize("api", ["v3", "legacy"])
def test_spans_fetched_from_jaeger_load_as_the_recorded_events(tmp_path: Path, api: str) -> None:
    spans = _spans()
    v3 = (200, _v3_body(spans)) if api == "v3" else NOT_FOUND
    with _jaeger(v3, (200, _legacy_body(spans))) as (url, seen):
        query = JaegerQuery(url, service="pptrace", start_ns=NOW - 3600 * 10**9, end_ns=NOW,
                            timeout=5)
        path = fetch_to_file(query, str(tmp_path))
    trace = load_paths([path])
    assert _summary(e for p in trace.processes for e in p.events) == EXPECTED
    assert not trace.problems
    first = urllib.parse.urlsplit(seen[0])
    params = urllib.parse.parse_qs(first.query)
    assert first.path == "/api/v3/traces"  # v3 is always asked first
    assert params["query.service_name"] == ["pptrace"]
    assert params["query.start_time_min"][0].endswith("Z")
    if api == "legacy":
        legacy = urllib.parse.parse_qs(urllib.parse.urlsplit(seen[1]).query)
        assert urllib.parse.urlsplit(seen[1]).path == "/api/traces"
        assert legacy["service"] == ["pptrace"]
        assert int(legacy["end"][0]) - int(legacy["start"][0]) == 3600 * 10**6  # microseconds
    else:
        assert len(seen) == 1


def test_analyze_reads_from_jaeger(capsys: pytest.CaptureFixture[str]) -> None:
    spans = _spans()
    with _jaeger(NOT_FOUND, (200, _legacy_body(spans))) as (url, _):
        code = main(["analyze", "--jaeger", url, "--jaeger-since", "2h", "--format", "json",
                     "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)["summary"]
    assert (summary["processes"], summary["events"]) == (2, 6)  # and no error: exit 0


def test_an_unreachable_or_empty_jaeger_is_one_line() -> None:
    with _jaeger(NOT_FOUND, NOT_FOUND) as (url, _):
        with pytest.raises(TraceInputError, match="neither /api/v3/traces") as info:
            fetch_to_file(JaegerQuery(url, start_ns=NOW - 10**9, end_ns=NOW, timeout=2), "/tmp")
    assert "\n" not in str(info.value)
    with _jaeger((200, b'{"result":{"resourceSpans":[]}}'), (200, b'{"data":[]}')) as (url, _):
        with pytest.raises(TraceInputError, match="no spans of service 'pptrace'"):
            fetch_to_file(JaegerQuery(url, start_ns=NOW - 10**9, end_ns=NOW, timeout=2), "/tmp")
    t0 = time.monotonic()
    with pytest.raises(TraceInputError, match="cannot reach"):
        fetch_to_file(JaegerQuery("http://127.0.0.1:9", start_ns=0, end_ns=NOW, timeout=2), "/tmp")
    assert time.monotonic() - t0 < 2 * 2 + 3  # two requests, each within its timeout


def test_jaeger_options_become_a_query() -> None:
    parser = argparse.ArgumentParser()
    add_input_arguments(parser)

    def query(*argv: str) -> JaegerQuery | None:
        args = parser.parse_args(list(argv))
        return jaeger_query(args.jaeger, args, now_ns=now)

    now = 1_700_000_000 * 10**9
    q = query("--jaeger", "http://j:16686", "--jaeger-since", "30m", "--jaeger-service", "eng")
    assert q == JaegerQuery("http://j:16686", service="eng", start_ns=now - 1800 * 10**9,
                            end_ns=now)
    q = query("--jaeger", "http://j", "--jaeger-start", "2026-11-29T10:00:00Z", "--jaeger-end",
              "2026-11-29T11:00:00")
    assert q is not None and q.end_ns - q.start_ns == 3600 * 10**9
    q = query("--jaeger", "http://j:16686#pptrace-bad", "--jaeger-limit", "5")
    assert q is not None and (q.url, q.service, q.limit) == ("http://j:16686", "pptrace-bad", 5)
    assert query() is None
    for bad in (["--jaeger", "j:16686"], ["--jaeger", "http://j", "--jaeger-since", "soon"],
                ["--jaeger", "http://j", "--jaeger-start", "yesterday"],
                ["--jaeger", "http://j", "--jaeger-limit", "0"]):
        with pytest.raises(ConfigError):
            query(*bad)


def test_diff_reads_each_side_from_a_path_or_jaeger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = _spans()
    with _jaeger((200, _v3_body(spans)), NOT_FOUND) as (url, seen):
        path = fetch_to_file(JaegerQuery(url, start_ns=NOW - 10**12, end_ns=NOW, timeout=5),
                             str(tmp_path))
        code = main(["diff", path, f"{url}#pptrace-b", "--jaeger-since", "2h", "--no-progress"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "0 differences." in out.out.splitlines()
        asked = [urllib.parse.parse_qs(urllib.parse.urlsplit(p).query) for p in seen]
        assert [q["query.service_name"] for q in asked] == [["pptrace"], ["pptrace-b"]]
        assert main(["diff", url, "not-a-url:16686", "--no-progress"]) == 2
    assert "not-a-url:16686: no such file or directory" in capsys.readouterr().err


@pytest.mark.timeout(60)  # without the cap, the read never ends
@pytest.mark.parametrize("content_length", [None, 10**12], ids=["no length", "10^12 announced"])
def test_an_endless_answer_is_cut_at_the_cap_with_one_line(content_length: int | None) -> None:
    import tracemalloc

    cap = 1 << 20
    with endless_jaeger(content_length) as (url, sent):
        tracemalloc.start()
        try:
            with pytest.raises(TraceInputError) as info:
                fetch_to_file(JaegerQuery(url, start_ns=NOW - 10**9, end_ns=NOW, timeout=5,
                                          max_bytes=cap), "/tmp")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert str(info.value) == (
        f"Jaeger at {url}/api/v3/traces: the answer is larger than the 1 MB that pptrace reads "
        "(a narrower window, a smaller --jaeger-limit, or a larger --jaeger-max-mb)")
    assert peak < 4 * cap  # what was read stayed within the cap
    if content_length is None:
        assert sent[0] > cap  # it kept sending: the client stopped reading
    # An HTTP error's endless body is only ever read in part, as a quote.
    with endless_jaeger(status=500) as (url, _):
        with pytest.raises(TraceInputError, match="neither /api/v3/traces"):
            fetch_to_file(JaegerQuery(url, start_ns=NOW - 10**9, end_ns=NOW, timeout=5), "/tmp")


@pytest.mark.timeout(60)
def test_analyze_names_the_cap_on_a_huge_answer(capsys: pytest.CaptureFixture[str]) -> None:
    with endless_jaeger(10**12) as (url, _):
        assert main(["analyze", "--jaeger", url, "--jaeger-max-mb", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"Jaeger at {url}/api/v3/traces" in err
    assert "larger than the 2 MB that pptrace reads" in err


def test_the_environment_s_proxy_carries_the_request_and_no_proxy_bypasses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY as curl and urllib read it: the proxy gets the whole URL; NO_PROXY names the
    hosts that bypass it; a proxy that cannot be reached is named in the one-line error."""
    spans = _spans()
    seen: list[str] = []

    def proxy(path: str) -> tuple[int, bytes]:  # a proxy that answers as the Jaeger it names
        seen.append(path)
        return (200, _v3_body(spans)) if "/api/v3/" in path else NOT_FOUND

    query = dict(service="pptrace", start_ns=NOW - 3600 * 10**9, end_ns=NOW, timeout=5)
    with fake_jaeger(proxy) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        path = fetch_to_file(JaegerQuery("http://jaeger.example:16686", **query), str(tmp_path))
        assert _summary(e for p in load_paths([path]).processes for e in p.events) == EXPECTED
        assert seen and seen[0].startswith("http://jaeger.example:16686/api/v3/traces?")
    with fake_jaeger(lambda _: (200, _v3_body(spans))) as jaeger_url:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        # A loopback Jaeger is reached directly (a proxy would reach its own loopback).
        path = fetch_to_file(JaegerQuery(jaeger_url, **query), str(tmp_path / "direct"))
        assert len(list(load_paths([path]).processes)) == 2
    remote = JaegerQuery("http://jaeger.invalid:16686", **query)
    with pytest.raises(TraceInputError, match=r"through the proxy 127\.0\.0\.1:9"):
        fetch_to_file(remote, str(tmp_path / "x"))
    monkeypatch.setenv("NO_PROXY", "jaeger.invalid")  # bypassed: the name itself is tried
    with pytest.raises(TraceInputError) as direct:
        fetch_to_file(remote, str(tmp_path / "y"))
    assert "proxy" not in str(direct.value) and "jaeger.invalid" in str(direct.value)
