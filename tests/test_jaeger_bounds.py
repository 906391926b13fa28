"""``--jaeger`` against hostile or broken servers (real sockets on 127.0.0.1): a deadline on the
whole request, redirects never followed, and every ``http.client`` failure one line, exit 2.

Each server here would hold a client for a minute or more (a byte every 0.5 s); the checks are
that the command ends with its one-line error long before the server would have finished.
"""

from __future__ import annotations

import socket
import time
import urllib.parse
from pathlib import Path

import pytest

from pptrace.cli.main import main
from pptrace.load.jaeger_fetch import JaegerQuery, fetch_to_file
from pptrace.load.loader import load_paths
from pptrace.model.errors import TraceInputError
from tests.fake_jaeger import fake_jaeger, scripted_jaeger, trickle
from tests.test_jaeger_fetch import _spans, _v3_body

NOW = time.time_ns()
_SLOW = 120.0  # seconds each trickling server would go on for


def _query(url: str, timeout: float = 2.0) -> JaegerQuery:
    return JaegerQuery(url, start_ns=NOW - 10**9, end_ns=NOW, timeout=timeout)


def _head(status: str = "200 OK", length: int = 100_000) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _slow_body(conn: socket.socket) -> None:
    conn.sendall(_head())
    trickle(conn, b" " * 100_000, 0.5, _SLOW)


def _slow_headers(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    trickle(conn, b"X-Slow: " + b"y" * 10_000 + b"\r\n\r\n", 0.5, _SLOW)


def _slow_error_body(conn: socket.socket) -> None:
    conn.sendall(_head("500 Internal Server Error"))
    trickle(conn, b"e" * 100_000, 0.5, _SLOW)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script", [_slow_body, _slow_headers, _slow_error_body],
                         ids=["body", "headers", "500 body"])
def test_timeout_is_a_deadline_on_the_whole_request(
    script: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with scripted_jaeger(script) as (url, requests):  # type: ignore[arg-type]
        began = time.monotonic()
        status = main(["analyze", "--jaeger", url, "--jaeger-timeout", "2", "--no-progress"])
        took = time.monotonic() - began
    err = capsys.readouterr().err
    assert status == 2
    assert err == (f"pptrace: error: Jaeger at {url}/api/v3/traces: no whole answer within 2 s "
                   "(--jaeger-timeout bounds each request: connecting, headers and body)\n")
    assert len(requests) == 1  # the v3 request: a server that trickles is not asked again
    assert took < _SLOW / 4  # ended by the deadline, not by the server


def test_a_redirect_to_another_host_is_not_followed() -> None:
    with fake_jaeger(lambda path: (200, b'{"data": []}')) as other:
        seen: list[str] = []

        def redirect(conn: socket.socket) -> None:
            seen.append("asked")
            conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {other}/api/traces\r\n"
                         "Content-Length: 0\r\n\r\n".encode())

        with scripted_jaeger(redirect) as (url, requests):
            with pytest.raises(TraceInputError) as info:
                fetch_to_file(_query(url), "/tmp")
    message = str(info.value)
    assert message.count(f"HTTP 302, a redirect to {other}/api/traces: not followed "
                         "(give --jaeger the address it names)") == 2, message
    assert "\n" not in message and len(requests) == 2


_NOT_HTTP = {
    "bad status line": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "over 100 headers": b"HTTP/1.1 200 OK\r\n" + b"".join(
        b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n",
    "a 64 KB header": b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * (64 << 10) + b"\r\n\r\n",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer", list(_NOT_HTTP))
def test_an_answer_that_is_not_http_is_one_line(
    answer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with scripted_jaeger(lambda conn: conn.sendall(_NOT_HTTP[answer])) as (url, _):
        status = main(["analyze", "--jaeger", url, "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"pptrace: error: Jaeger at {url}: neither /api/v3/traces "
                          "(not an HTTP answer ("), err
    assert len(err) < 1000


@pytest.mark.parametrize("service", ["a/b", "../../x", "s" * 300])
def test_a_service_name_is_a_name_never_a_path(tmp_path: Path, service: str) -> None:
    """``--jaeger-service a/b`` is a name to ask for (FileNotFoundError before): the spans it
    names are fetched into a file under the folder given, whatever the name holds."""
    asked: list[str] = []
    body = _v3_body(_spans())

    def answer(path: str) -> tuple[int, bytes]:
        asked.append(path)
        return 200, body

    with fake_jaeger(answer) as url:
        path = fetch_to_file(JaegerQuery(url, service=service, start_ns=NOW - 10**9,
                                         end_ns=NOW, timeout=5), str(tmp_path))
    assert Path(path).parent == tmp_path and Path(path).is_file()
    assert len(Path(path).name) < 120
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(asked[0]).query)[
        "query.service_name"] == [service]
    assert load_paths([path]).event_count == 6
