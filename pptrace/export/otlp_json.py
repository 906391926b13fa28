"""OTLP over HTTP as JSON, written by the trace-file encoder: no SDK span, no protobuf.

The SDK path (``pptrace.export.spans`` + ``pptrace.export.otlp``) builds one SDK span per event
and the exporter encodes it to protobuf: about 130 µs of the GIL an event, time an engine's
Python scheduler loses. OTLP/HTTP takes the same requests as JSON (``application/json``, the
``http/json`` protocol of ``OTEL_EXPORTER_OTLP_PROTOCOL``, which OpenTelemetry Collectors,
Jaeger and Tempo accept on port 4318), and the trace file's encoder (``FileSink``) already
writes OTLP/JSON from the recorder's raw tuples at a few µs an event. So:

- ``JsonOtlpSink`` is a recorder sink: a ``FileSink`` whose lines go to a ``JsonShipper``
  instead of a file. Its spans are schema version 1, every attribute on every span (what a
  Jaeger search by tag needs), the resource naming service, host, pid, run id and ranks.
- ``JsonShipper`` holds those lines in a bounded queue (``QUEUE_LINES`` lines of at most
  ``SPANS_PER_LINE`` spans) and posts them on a daemon thread, at most ``BATCH_LINES`` lines a
  request. Endpoint, headers, compression, TLS files and timeout come from the standard
  ``OTEL_EXPORTER_OTLP_(TRACES_)*`` variables, read as the official HTTP exporter reads them.
  Nothing is lost silently and nothing is sent twice: a batch the collector never received
  (refused connection, connect timeout, or an answer of 429/502/503/504, which OTLP says to
  retry) waits at the head of the queue and is posted again after a backoff; any other failure
  (a timeout after sending, another status, an answer cut off) loses the batch, counted and
  handed to ``on_drop(events, cause)``, as the SDK path's processor does. At exit the queue
  gets what is left of the exit budget; what is still waiting then is counted.

    shipper = JsonShipper.from_env(config, on_drop=recorder.exporter_dropped)
    sink = JsonOtlpSink(shipper, rank, run_id)
    sink.export(events)          # a few µs an event, then the shipper's thread posts them
    shipper.shutdown(1.0)
"""

from __future__ import annotations

import collections
import gzip
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pptrace.export.file_sink import SPANS_PER_LINE, FileSink
from pptrace.export.spans import process_resource, scope_version
from pptrace.model.config import Config
from pptrace.model.messages import MessageEvent
from pptrace.model.records import Event, RankInfo, RecorderStats

__all__ = [
    "BATCH_LINES", "QUEUE_LINES", "JsonOtlpSink", "JsonShipper", "Poster", "Target", "next_backoff",
    "otlp_sender", "traces_target",
]

#: Lines waiting for the collector (each at most SPANS_PER_LINE spans); beyond, new ones are
#: dropped and counted.
QUEUE_LINES = 8192 // SPANS_PER_LINE
#: Lines per request: at most BATCH_LINES * SPANS_PER_LINE (512) spans a request.
BATCH_LINES = 8
MAX_BACKOFF = 30.0
DEFAULT_TIMEOUT = 10.0  # seconds a request may take, as the official exporters' default
#: Answers OTLP/HTTP says a client should retry: the collector did not take the batch.
RETRYABLE = frozenset({429, 502, 503, 504})
DropCallback = Callable[[int, str], None]
_HEAD = '{"resourceSpans":['
_CONTENT_TYPES = {"http/json": "application/json", "http/protobuf": "application/x-protobuf"}


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how the shipper posts: the ``OTEL_EXPORTER_OTLP_*`` settings, read once."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    compression: str = "none"  # none, gzip or deflate
    verify: str | bool = True
    cert: tuple[str, str] | str | None = None
    protocol: str = "http/json"  # or http/protobuf: the same spans, encoded as protobuf


def _env(env: Mapping[str, str], name: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>`` (stripped)."""
    return (env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
            or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def traces_target(env: Mapping[str, str] | None = None, protocol: str = "http/json") -> Target:
    """The shipper's target as the official HTTP exporter would read the environment;
    ``protocol``: ``http/json`` or ``http/protobuf``, the body's encoding."""
    env = os.environ if env is None else env
    url = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if not url:
        base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip() or "http://localhost:4318/"
        url = base + ("v1/traces" if base.endswith("/") else "/v1/traces")
    from opentelemetry.util.re import parse_env_headers

    headers = tuple(parse_env_headers(_env(env, "HEADERS"), liberal=True).items())
    raw_timeout = _env(env, "TIMEOUT")
    # The Python exporters read this variable in seconds; unset, their default (10 s): the wait
    # is the shipper thread's, and at exit a batch still in flight is counted, not waited for.
    timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT
    compression = _env(env, "COMPRESSION").lower() or "none"
    if compression not in ("none", "gzip", "deflate"):
        compression = "none"
    verify: str | bool = _env(env, "CERTIFICATE") or True
    cert_file, key_file = _env(env, "CLIENT_CERTIFICATE"), _env(env, "CLIENT_KEY")
    cert: tuple[str, str] | str | None = (cert_file, key_file) if cert_file and key_file else (
        cert_file or None)
    return Target(url, headers, timeout, compression, verify, cert, protocol)


def otlp_sender(config: Config, on_drop: DropCallback | None = None) -> Any:
    """What sends OTLP for ``protocol()``: a ``JsonShipper`` over ``http/json`` (the default),
    else the SDK path's fail-open processor (``pptrace.export.otlp.otlp_processor``)."""
    from pptrace.export.otlp import otlp_processor, protocol

    if protocol() == "http/json":
        return JsonShipper.from_env(config, on_drop=on_drop)
    return otlp_processor(config, on_drop=on_drop)


def _never_sent(exc: BaseException) -> bool:
    """Whether a failed post never reached the collector (no connection was made)."""
    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:  # requests wraps urllib3's error in a MaxRetryError in its args
        err = stack.pop()
        if not isinstance(err, BaseException) or id(err) in seen:
            continue
        seen.add(id(err))
        # By name: urllib3's classes, without importing the network client here.
        if type(err).__name__ in ("NewConnectionError", "ConnectTimeoutError"):
            return True
        stack += [getattr(err, "reason", None), err.__cause__, err.__context__, *err.args]
    return False


class Poster:
    """Post OTLP/JSON lines as one request to a ``Target``, as JSON or protobuf as its
    protocol says; say what became of it.

    The one place a request is made and its outcome classified: ``JsonShipper`` (in the engine
    process) and the file shipper (``pptrace.ship``, its own process) both post through it.
    """

    def __init__(self, target: Target, session: Any = None) -> None:
        self.target = target
        self.session = session
        self.requests = 0

    @property
    def protobuf(self) -> bool:
        """Whether it posts protobuf: lines may come already encoded (bytes) with the rest."""
        return self.target.protocol == "http/protobuf"

    def body(self, lines: Sequence[str | bytes]) -> bytes:
        """One request's body: the lines' resourceSpans together, compressed as configured."""
        if self.target.protocol == "http/protobuf":
            from pptrace.export.proto_templates import encode_request

            data = encode_request(lines)
        else:
            data = _json_body(lines)
        if self.target.compression == "gzip":
            return gzip.compress(data, compresslevel=1)
        if self.target.compression == "deflate":
            return zlib.compress(data, 1)
        return data

    def post(self, lines: Sequence[str | bytes]) -> str:
        """Post one request; "" when the collector took it, else why not ("retry: " first
        when it never got it)."""
        target = self.target
        try:
            if self.session is None:
                from pptrace.export.otlp import bounded_session

                self.session = bounded_session()
            headers = {"Content-Type": _CONTENT_TYPES[target.protocol], **dict(target.headers)}
            if target.compression != "none":
                headers["Content-Encoding"] = target.compression
            self.requests += 1
            response = self.session.post(target.url, data=self.body(lines), headers=headers,
                                         timeout=target.timeout, verify=target.verify,
                                         cert=target.cert)
        except Exception as exc:
            never = _never_sent(exc)
            return ("retry: " if never else "") + (
                "collector unreachable" if never else f"export raised {type(exc).__name__}")
        status = int(getattr(response, "status_code", 0))
        if 200 <= status < 300:
            return ""
        if status in RETRYABLE:
            return f"retry: collector answered {status}"
        return f"collector answered {status}"


def _json_body(lines: Sequence[str | bytes]) -> bytes:
    """One OTLP/JSON request of the lines' resourceSpans (each line is one request)."""
    pieces = [_HEAD]
    for line in lines:
        if not isinstance(line, str):
            raise TypeError("a line written as protobuf cannot go into a JSON request")
        pieces += (line[len(_HEAD):-2], ",")
    if lines:
        pieces.pop()  # the last comma
    pieces.append("]}")
    return "".join(pieces).encode("ascii")  # the encoder escapes to ASCII


def next_backoff(backoff: float) -> float:
    """The wait before asking a failing collector again: 1 s, doubling to ``MAX_BACKOFF``."""
    return min(MAX_BACKOFF, max(1.0, backoff * 2))


@dataclass(slots=True)
class _Batch:
    lines: list[str]
    events: int


class JsonShipper:
    """Post OTLP/JSON lines from a bounded queue on a daemon thread; count every loss."""

    def __init__(self, target: Target, exit_timeout: float = 2.0,
                 on_drop: DropCallback | None = None, queue_lines: int = QUEUE_LINES,
                 batch_lines: int = BATCH_LINES, session: Any = None) -> None:
        self._poster = Poster(target, session)
        self.exit_timeout = exit_timeout
        self.on_drop = on_drop
        self.queue_lines = queue_lines
        self.batch_lines = batch_lines
        self._queue: collections.deque[tuple[str, int]] = collections.deque()
        self._retry: _Batch | None = None  # a batch the collector never got, posted again
        self._in_flight: _Batch | None = None  # the batch being posted
        self._cond = threading.Condition()
        self._closed = False
        self._abandoned = False
        self.sent_events = 0  # attach/extract events the collector accepted
        self.sent_lines = 0
        self.dropped_events = 0
        self.dropped_lines = 0
        self.failed_batches = 0
        self.causes: collections.Counter[str] = collections.Counter()
        self._thread = threading.Thread(target=self._run, name="pptrace-otlp-json", daemon=True)
        self._thread.start()

    @property
    def target(self) -> Target:
        """Where the shipper posts."""
        return self._poster.target

    @target.setter
    def target(self, target: Target) -> None:
        self._poster.target = target

    @property
    def requests(self) -> int:
        """Requests made so far."""
        return self._poster.requests

    @classmethod
    def from_env(cls, config: Config, on_drop: DropCallback | None = None) -> JsonShipper:
        """The shipper activation builds when OTLP goes over ``http/json``."""
        # The exit budget is shared with the file flush: keep a small margin for it.
        return cls(traces_target(), exit_timeout=max(0.1, config.exit_timeout - 0.25),
                   on_drop=on_drop)

    # --- the recorder's side (its thread): append, never wait -------------------------------

    def put_lines(self, lines: Sequence[str], events: int = 0) -> None:
        """Queue the lines of one export; ``events``: the attach/extract events among their
        spans (the lines hold SPANS_PER_LINE spans each, the last what is left)."""
        lost = lost_lines = 0
        with self._cond:
            for i, line in enumerate(lines):
                share = max(0, min(SPANS_PER_LINE, events - i * SPANS_PER_LINE))
                if self._closed or len(self._queue) >= self.queue_lines:
                    lost += share
                    lost_lines += 1
                    continue
                self._queue.append((line, share))
            self._cond.notify_all()
            closed = self._closed
        if lost_lines:
            self._drop(lost, lost_lines, "after shutdown" if closed else "queue full")

    # --- the shipper's thread ---------------------------------------------------------------

    def _drop(self, events: int, lines: int, cause: str) -> None:
        with self._cond:
            self.dropped_events += events
            self.dropped_lines += lines
            self.causes[cause] += events
        if self.on_drop is not None and events:
            try:
                self.on_drop(events, cause)
            except Exception:  # a reporting hook must not kill the shipper
                pass

    def _next(self) -> _Batch | None:
        with self._cond:
            while not self._queue and self._retry is None and not self._closed:
                self._cond.wait()
            if self._retry is not None:
                batch, self._retry = self._retry, None
            elif self._queue:
                take = [self._queue.popleft()
                        for _ in range(min(self.batch_lines, len(self._queue)))]
                batch = _Batch([line for line, _ in take], sum(n for _, n in take))
            else:
                return None
            self._in_flight = batch
            return batch

    def _run(self) -> None:
        backoff = 0.0
        while True:
            batch = self._next()
            if batch is None:
                return
            outcome = self._post(batch.lines)  # "" sent, "retry: ..." not received, else lost
            retried = False
            with self._cond:
                self._in_flight = None
                if self._abandoned:
                    return  # shutdown counted this batch already
                if not outcome:
                    self.sent_events += batch.events
                    self.sent_lines += len(batch.lines)
                elif outcome.startswith("retry: ") and not self._closed:
                    self._retry, retried = batch, True
                else:
                    self.failed_batches += 1
                self._cond.notify_all()
            if outcome and not retried:
                self._drop(batch.events, len(batch.lines), outcome.removeprefix("retry: "))
            if outcome:
                # A failing collector is not asked again at once: fewer wasted timeouts.
                backoff = next_backoff(backoff)
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, timeout=backoff)
            else:
                backoff = 0.0

    def _post(self, lines: Sequence[str]) -> str:
        return self._poster.post(lines)

    # --- waiting and closing ----------------------------------------------------------------

    def _wait_idle(self, deadline: float) -> bool:
        with self._cond:
            while self._queue or self._retry is not None or self._in_flight is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (bounded) until every queued line was sent or counted lost."""
        return self._wait_idle(time.monotonic() + timeout_millis / 1000)

    def shutdown(self, timeout: float | None = None) -> None:
        """Post what is queued within ``timeout`` (default: the exit timeout); count the rest."""
        deadline = time.monotonic() + (self.exit_timeout if timeout is None else timeout)
        with self._cond:
            if self._closed:
                return
            self._closed = True  # also ends a backoff: what waits gets one more attempt now
            self._cond.notify_all()
        self._wait_idle(deadline)
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
            events = sum(n for _, n in left)
            lines = len(left)
            for batch in (self._retry, self._in_flight):
                if batch is not None:
                    events, lines = events + batch.events, lines + len(batch.lines)
            self._retry = None
            self._abandoned = self._in_flight is not None
        if lines:
            self._drop(events, lines, "exit timeout")


class _Outbox:
    """What ``FileSink`` writes to (``pptrace.export.file_sink.LineOut``): the shipper."""

    refused = None
    rotated = 0
    rotated_segments = 0
    base = "otlp"

    def __init__(self, shipper: JsonShipper) -> None:
        self.shipper = shipper
        self.lock = threading.RLock()

    def write_lines(self, lines: Sequence[str], events: int = 0) -> None:
        self.shipper.put_lines(lines, events)

    def encode(self, lines: Sequence[str]) -> bytes:
        return "\n".join(lines).encode("ascii")

    def make_room(self, nbytes: int) -> bool:
        return False  # nothing to rotate

    def write(self, data: bytes, events: int = 0) -> None:
        self.shipper.put_lines([line for line in data.decode("ascii").split("\n") if line],
                               events)

    def close(self) -> None:
        return None


class JsonOtlpSink:
    """A recorder sink whose events go to a ``JsonShipper`` as version 1 OTLP/JSON spans."""

    def __init__(self, shipper: JsonShipper, rank: RankInfo, run_id: str = "",
                 owns_shipper: bool = False) -> None:
        self.shipper = shipper
        self._owns = owns_shipper
        # Version 1: every span complete in itself, searchable by any of its attributes.
        self._encoder = FileSink(_Outbox(shipper), process_resource(rank, run_id, 1),
                                 scope_version())

    def export(self, events: Sequence[Event]) -> None:
        self._encoder.export(events)

    def export_stats(self, stats: RecorderStats) -> None:
        self._encoder.export_stats(stats)

    def export_messages(self, events: Sequence[MessageEvent], rank: RankInfo,
                        run_id: str) -> None:
        self._encoder.export_messages(events, rank, run_id)

    def shutdown(self, timeout: float) -> None:
        if self._owns:
            self.shipper.shutdown(timeout)
