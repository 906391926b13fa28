"""Hostile answers from a Jaeger query service: pptrace reads them like any other input.

A local HTTP server plays Jaeger and answers the v3 and legacy APIs with broken, wrongly typed,
deeply nested or random bodies, or never answers at all. ``fetch_to_file`` (and loading what it
wrote) may only succeed or raise the one-line ``TraceInputError``, within its timeout.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptrace.load.jaeger_fetch import JaegerQuery, fetch_to_file
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from tests.fake_jaeger import fake_jaeger


class _Answers:
    v3: tuple[int, bytes] = (404, b"")
    legacy: tuple[int, bytes] = (404, b"")


@contextlib.contextmanager
def _jaeger() -> Iterator[tuple[str, type[_Answers]]]:
    answers = type("Answers", (_Answers,), {})

    def answer(path: str) -> tuple[int, bytes]:
        return answers.v3 if path.startswith("/api/v3/") else answers.legacy

    with fake_jaeger(answer) as url:
        yield url, answers


@pytest.fixture(scope="module")
def jaeger() -> Iterator[tuple[str, type[_Answers]]]:
    with _jaeger() as served:
        yield served


def _fetch_and_load(url: str, directory: Path) -> object:
    query = JaegerQuery(url=url, start_ns=1, end_ns=2 * 10**18, timeout=5.0)
    try:
        path = fetch_to_file(query, str(directory))
        return load_paths([path])
    except TraceInputError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000, str(exc)[:300]
        return exc


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BODIES = {
    "deep list": _deep(100_000),
    "deep result": b'{"result":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001,
    "non-object resourceSpans": b'{"result":{"resourceSpans":[5]}}',
    "string scopeSpans": b'{"result":{"resourceSpans":[{"scopeSpans":"xyz"}]}}',
    "non-list spans": b'{"result":{"resourceSpans":[{"scopeSpans":[{"spans":7}]}]}}',
    "result list": b'{"result":[1,2]}',
    "lines of junk": b'{"result":{}}\n[1]\n"x"\n',
    "not json": b"<html>502 Bad Gateway</html>",
    "non-utf8": b'{"result":{"resourceSpans":[{"x":"\xff\xfe"}]}}',
    "nan": b'{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":NaN}]}]}]}}',
}
LEGACY = {
    "legacy spans not a list": b'{"data":[{"spans":5,"processes":{}}]}',
    "legacy data not a list": b'{"data":5}',
    "legacy data items not objects": b'{"data":[1,"x",null]}',
    "legacy processes wrong": b'{"data":[{"spans":[{"spanID":"1","processID":"p"}],'
                              b'"processes":{"p":5}}]}',
    "legacy deep": b'{"data":' + _deep(100_000) + b"}",
    "legacy tags deep json": b'{"data":[{"spans":[{"spanID":"1","traceID":"2","tags":[{"key":'
                             b'"pptrace.tensor.names","type":"string","value":"'
                             + b"[" * 100_000 + b'"}]}],"processes":{}}]}',
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_hostile_v3_answers(jaeger: tuple[str, type[_Answers]], tmp_path: Path,
                            name: str) -> None:
    url, answers = jaeger
    answers.v3, answers.legacy = (200, BODIES[name]), (404, b"")
    _fetch_and_load(url, tmp_path)


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_hostile_legacy_answers(jaeger: tuple[str, type[_Answers]], tmp_path: Path,
                                name: str) -> None:
    url, answers = jaeger
    answers.v3, answers.legacy = (404, b"not found"), (200, LEGACY[name])
    _fetch_and_load(url, tmp_path)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["result", "resourceSpans", "scopeSpans", "spans", "data", "processes",
                         "tags", "key", "value", "attributes", "error", "x"]), inner, max_size=3),
    max_leaves=15,
)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(v3=JSONISH, legacy=JSONISH)
def test_random_json_answers(jaeger: tuple[str, type[_Answers]], tmp_path: Path,
                             v3: object, legacy: object) -> None:
    url, answers = jaeger
    answers.v3 = (200, json.dumps(v3).encode())
    answers.legacy = (200, json.dumps(legacy).encode())
    _fetch_and_load(url, tmp_path)


@pytest.mark.parametrize("kind", ["silent", "down"])
def test_jaeger_that_never_answers_times_out(tmp_path: Path, kind: str) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if kind == "silent":
        sock.listen(8)  # accepts connections, never answers
    else:
        sock.close()
    try:
        query = JaegerQuery(url=f"http://127.0.0.1:{port}", start_ns=1, end_ns=2, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(TraceInputError) as info:
            fetch_to_file(query, str(tmp_path))
        # Two requests (v3, then legacy) of at most 0.5 s each; generous for a busy machine.
        assert time.monotonic() - started < 10
        assert "\n" not in str(info.value)
    finally:
        sock.close()
