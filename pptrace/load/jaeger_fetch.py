"""Fetch pptrace spans back from Jaeger's query API (``analyze``/``view``/``diff`` ``--jaeger``).

Jaeger's API v3 (``/api/v3/traces``, OTLP JSON) is tried first; when the server does not have it
(older Jaeger) or answers something else, the older ``/api/traces`` (Jaeger's JSON model) is used.
Every request has a deadline on the whole of it (``timeout``: connecting, the headers and the
body together; a server that trickles a byte at a time is cut there, never waited on per byte),
and what is read of an answer is capped (``max_bytes``, 128 MB by default: more is a one-line
error naming the URL and the cap). A redirect is never followed (it is said, with where it
points), and an answer that is not HTTP (a bad status line, too many or too long headers) is one
line too. The documents are written as
JSON lines, exactly as Jaeger sent them (the loader reads both formats), so a cluster's traces
are analysed without copying files.

    query = JaegerQuery("http://jaeger:16686", service="pptrace", start_ns=t0, end_ns=t1)
    path = fetch_to_file(query, "/tmp/traces")         # -> pptrace.load.loader.load_paths([path])

No torch, no OpenTelemetry, no argparse: only the standard library. The command-line options
that build a ``JaegerQuery`` live in ``pptrace.cli.inputs``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pptrace.model.errors import TraceInputError
from pptrace.model.text import clip

__all__ = ["MAX_ANSWER_BYTES", "JaegerQuery", "fetch_documents", "fetch_to_file", "rfc3339"]

V3_PATH = "/api/v3/traces"
LEGACY_PATH = "/api/traces"
#: The most pptrace reads of one answer by default: a broken or hostile server (a huge
#: Content-Length, an endless body) must not exhaust memory. Parsing costs about ten times this.
MAX_ANSWER_BYTES = 128 << 20
_ERROR_BODY_BYTES = 1 << 16  # of an HTTP error's body, only ever quoted
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class JaegerQuery:
    """Which spans to fetch: a service in a time window (wall clock, nanoseconds)."""

    url: str  # Jaeger's query service, e.g. http://localhost:16686
    service: str = "pptrace"
    start_ns: int = 0
    end_ns: int = 0
    limit: int = 1000  # traces; each pptrace span is its own trace
    timeout: float = 10.0  # seconds for each whole request (connect, headers, body)
    max_bytes: int = MAX_ANSWER_BYTES  # of one answer; more is an error, never read

    def v3_url(self) -> str:
        """The API v3 search URL."""
        params = {
            "query.service_name": self.service,
            "query.start_time_min": rfc3339(self.start_ns),
            "query.start_time_max": rfc3339(self.end_ns),
            "query.num_traces": str(self.limit),
        }
        return self.url.rstrip("/") + V3_PATH + "?" + urllib.parse.urlencode(params)

    def legacy_url(self) -> str:
        """The ``/api/traces`` search URL (times in microseconds)."""
        params = {
            "service": self.service,
            "start": str(self.start_ns // 1000),
            "end": str(self.end_ns // 1000),
            "limit": str(self.limit),
        }
        return self.url.rstrip("/") + LEGACY_PATH + "?" + urllib.parse.urlencode(params)


def rfc3339(ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 in UTC: ``2026-11-29T16:00:00.000000000Z``."""
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


class _Answer:
    def __init__(self, status: int, body: bytes, error: str = "") -> None:
        self.status = status
        self.body = body
        self.error = error


def _too_big(url: str, cap: int) -> TraceInputError:
    return TraceInputError(
        f"Jaeger at {_where(url)}: the answer is larger than the "
        f"{cap / (1 << 20):g} MB that pptrace reads (a narrower window, a smaller "
        "--jaeger-limit, or a larger --jaeger-max-mb)")


def _read_capped(response: Any, url: str, cap: int) -> bytes:
    """The whole body, or TraceInputError as soon as it is known to exceed ``cap`` bytes."""
    length = response.headers.get("Content-Length", "")
    if length.strip().isdigit() and int(length) > cap:
        raise _too_big(url, cap)  # said up front: not one byte of it is read
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read(min(_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            raise _too_big(url, cap)
        chunks.append(chunk)


class _Deadline:
    """Shuts a connection's socket down when a request's time is up: a read blocked on a
    server that sends a byte now and then returns at once, whatever ``http.client`` is doing."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn = conn
        self.passed = False
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        self.passed = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


class _TimedOut(Exception):
    """The request's deadline passed."""


def _where(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _proxy_for(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The proxy the environment names for this URL (``HTTP_PROXY``/``HTTPS_PROXY``, with
    ``NO_PROXY`` honoured, as curl and urllib read them), or None. A loopback address never
    goes through one (as Go's ``ProxyFromEnvironment`` decides): a proxy would reach its own."""
    host = parts.hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        return None
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.netloc or ""):
        return None
    return urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)


def _get(url: str, timeout: float, cap: int = MAX_ANSWER_BYTES) -> _Answer:
    """GET ``url`` within ``timeout`` seconds in all (``_TimedOut`` past it), through the
    environment's proxy when it names one."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    headers = {"Accept": "application/json"}
    start = time.monotonic()
    try:
        proxy = _proxy_for(parts)
        host, port = parts.hostname or "", parts.port
        if proxy is not None:
            host, port = proxy.hostname or "", proxy.port or 8080
            if proxy.username is not None:
                cred = urllib.parse.unquote(proxy.username) + ":" + urllib.parse.unquote(
                    proxy.password or "")
                headers["Proxy-Authorization"] = "Basic " + base64.b64encode(
                    cred.encode()).decode("ascii")
        # Each constructor named as it is (not through an alias), so that the network-call scan
        # (tests/test_reliability_leaks.py) sees both, with their timeouts.
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout)
            if proxy is not None:  # a CONNECT tunnel: TLS runs end to end through it
                tunnel_headers = {k: v for k, v in headers.items() if k.startswith("Proxy-")}
                conn.set_tunnel(parts.hostname or "", parts.port, headers=tunnel_headers)
                headers.pop("Proxy-Authorization", None)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            if proxy is not None:  # a plain proxy takes the whole URL
                target = urllib.parse.urlunsplit(parts._replace(fragment=""))
    except ValueError as exc:  # a port that is not a number
        return _Answer(0, b"", f"cannot reach it: {exc}")
    deadline = _Deadline(conn, timeout)
    response: http.client.HTTPResponse | None = None
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        status = response.status
        if 300 <= status < 400:
            location = clip(response.headers.get("Location", "") or "nowhere", 200)
            return _Answer(status, b"", f"HTTP {status}, a redirect to {location}: not followed "
                                        "(give --jaeger the address it names)")
        if status >= 400:
            answer = _Answer(status, response.read(_ERROR_BODY_BYTES) or b"", f"HTTP {status}")
        else:
            answer = _Answer(status, _read_capped(response, url, cap))
        if deadline.passed:  # the cut socket reads as the end of the body: not a whole one
            raise _TimedOut
        return answer
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if deadline.passed or time.monotonic() - start >= timeout:
            raise _TimedOut from None
        if isinstance(exc, http.client.HTTPException) and not isinstance(
                exc, http.client.RemoteDisconnected):
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return _Answer(0, b"", f"not an HTTP answer ({clip(what, 200)})")
        via = f" through the proxy {proxy.netloc} (HTTP(S)_PROXY; NO_PROXY bypasses it)" if (
            proxy is not None) else ""
        return _Answer(0, b"", f"cannot reach it{via}: "
                               f"{clip(str(exc) or type(exc).__name__, 200)}")
    finally:
        deadline.cancel()
        if response is not None:
            response.close()  # (it holds the socket even after the connection lets go of it)
        conn.close()


def _get_in_time(url: str, query: JaegerQuery) -> _Answer:
    try:
        return _get(url, query.timeout, query.max_bytes)
    except _TimedOut:
        raise TraceInputError(
            f"Jaeger at {_where(url)}: no whole answer within {query.timeout:g} s "
            "(--jaeger-timeout bounds each request: connecting, headers and body)") from None


def _documents(body: bytes) -> list[Any] | None:
    """Parse one JSON document or JSON lines; None when the body is not JSON."""
    try:
        return [json.loads(body)]
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        pass
    docs = []
    for line in body.splitlines():
        if line.strip():
            try:
                docs.append(json.loads(line))
            except (ValueError, RecursionError):
                return None
    return docs or None


def _items(node: Any, key: str) -> list[Any]:
    """``node[key]`` when node is an object holding a list there, else [] (answers are input)."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, list) else []


def _v3_spans(docs: list[Any]) -> int:
    count = 0
    for doc in docs:
        result = doc.get("result") if isinstance(doc, dict) else None
        for rs in _items(result, "resourceSpans"):
            for ss in _items(rs, "scopeSpans"):
                count += len(_items(ss, "spans"))
    return count


def _is_v3(docs: list[Any]) -> bool:
    return all(isinstance(d, dict) and ("result" in d or "error" in d) for d in docs)


def fetch_documents(query: JaegerQuery) -> tuple[str, list[Any]]:
    """Fetch the spans; return the API used ("v3" or "legacy") and the JSON documents."""
    v3 = _get_in_time(query.v3_url(), query)
    docs = _documents(v3.body) if v3.body else None
    if v3.status == 200 and docs is not None and _is_v3(docs) and _v3_spans(docs):
        return "v3", [d for d in docs if "result" in d]
    legacy = _get_in_time(query.legacy_url(), query)
    ldocs = _documents(legacy.body) if legacy.body else None
    if legacy.status == 200 and ldocs and isinstance(ldocs[0], dict) and "data" in ldocs[0]:
        return "legacy", ldocs[:1]
    if v3.status == 200 and docs is not None and _is_v3(docs):
        return "v3", [d for d in docs if "result" in d]  # v3 answered: there is nothing
    why = legacy.error or (f"HTTP {legacy.status}, not Jaeger JSON" if legacy.status else "")
    raise TraceInputError(
        f"Jaeger at {query.url}: neither {V3_PATH} ({v3.error or 'not the v3 API'}) nor "
        f"{LEGACY_PATH} ({why or 'not Jaeger JSON'}) answered with traces"
    )


def _file_part(text: str) -> str:
    """``text`` as part of a file name: no separators (a service ``a/b``), no dot-only names,
    at most 64 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip(".")[:64] or "_"


def fetch_to_file(query: JaegerQuery, directory: str) -> str:
    """Fetch the spans into a JSON-lines file under ``directory``; return its path."""
    api, docs = fetch_documents(query)
    found = _v3_spans(docs) if api == "v3" else sum(
        len(_items(t, "spans")) for d in docs for t in _items(d, "data"))
    if not found:
        raise TraceInputError(
            f"Jaeger at {query.url} has no spans of service {query.service!r} between "
            f"{rfc3339(query.start_ns)} and {rfc3339(query.end_ns)}"
        )
    os.makedirs(directory, exist_ok=True)
    host = _file_part(urllib.parse.urlsplit(query.url).netloc or "jaeger")
    path = os.path.join(directory, f"jaeger-{host}-{_file_part(query.service)}-{api}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return path
