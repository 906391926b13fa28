"""Fetch pptrace spans back from Jaeger's query API (``analyze``/``view``/``diff`` ``--jaeger``).

Jaeger's API v3 (``/api/v3/traces``, OTLP JSON) is tried first; when the server does not have it
(older Jaeger) or answers something else, the older ``/api/traces`` (Jaeger's JSON model) is used.
Every request has a timeout, and what is read of an answer is capped (``max_bytes``, 128 MB by
default: more is a one-line error naming the URL and the cap). The documents are written as
JSON lines, exactly as Jaeger sent them (the loader reads both formats), so a cluster's traces
are analysed without copying files.

    query = JaegerQuery("http://jaeger:16686", service="pptrace", start_ns=t0, end_ns=t1)
    path = fetch_to_file(query, "/tmp/traces")         # -> pptrace.load.loader.load_paths([path])

No torch, no OpenTelemetry, no argparse: only the standard library. The command-line options
that build a ``JaegerQuery`` live in ``pptrace.cli.inputs``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pptrace.model.errors import TraceInputError

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
    timeout: float = 10.0  # seconds per request
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
    where = urllib.parse.urlsplit(url)
    return TraceInputError(
        f"Jaeger at {where.scheme}://{where.netloc}{where.path}: the answer is larger than the "
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


def _get(url: str, timeout: float, cap: int = MAX_ANSWER_BYTES) -> _Answer:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return _Answer(response.status, _read_capped(response, url, cap))
    except urllib.error.HTTPError as exc:
        return _Answer(exc.code, exc.read(_ERROR_BODY_BYTES) or b"", f"HTTP {exc.code}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return _Answer(0, b"", f"cannot reach it: {reason}")


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
    v3 = _get(query.v3_url(), query.timeout, query.max_bytes)
    docs = _documents(v3.body) if v3.body else None
    if v3.status == 200 and docs is not None and _is_v3(docs) and _v3_spans(docs):
        return "v3", [d for d in docs if "result" in d]
    legacy = _get(query.legacy_url(), query.timeout, query.max_bytes)
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
    host = re.sub(r"[^A-Za-z0-9_.-]+", "_", urllib.parse.urlsplit(query.url).netloc or "jaeger")
    path = os.path.join(directory, f"jaeger-{host}-{query.service}-{api}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return path
