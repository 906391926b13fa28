"""OTLP export that can never hold the engine: a bounded queue, short timeouts, counted drops.

``otlp_processor(config)`` returns a span processor for pptrace's own tracer provider. It sends
over gRPC or HTTP/protobuf when ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``..._PROTOCOL`` say so
(``protocol()``; the default, ``http/json``, goes the cheaper way of ``pptrace.export.otlp_json``,
with no SDK span); endpoint, headers, TLS and
compression come from the standard ``OTEL_EXPORTER_OTLP_*`` variables, read by the official
exporters. Unlike the SDK's ``BatchSpanProcessor``, nothing is lost silently: a full queue, a
failed batch or a batch still waiting when the exit time runs out is counted and handed to
``on_drop(events, cause)`` (the recorder's counters).

Whatever the collector answers, pptrace reads at most ``MAX_RESPONSE_BYTES`` of it (an OTLP
response is a few bytes, an error page a few hundred): over HTTP the body is read in pieces, up
to that size and within the request's timeout, and the connection is closed on anything longer
(a success whose answer is cut off counts as a failed export: delivery is not confirmed); over
gRPC the channel refuses a longer message (``grpc.max_receive_message_length``).

    provider.add_span_processor(otlp_processor(config, on_drop=recorder.exporter_dropped))
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pptrace.model import schema
from pptrace.model.config import Config
from pptrace.model.errors import ConfigError

__all__ = [
    "DEFAULT_PROTOCOL",
    "MAX_RESPONSE_BYTES",
    "FailOpenProcessor",
    "ResponseTooLarge",
    "make_exporter",
    "otlp_processor",
    "protocol",
]

PROTOCOLS = ("grpc", "http/protobuf", "http/json")
#: The protocol when none is set: OTLP/HTTP with JSON bodies, encoded by the trace-file encoder
#: (``pptrace.export.otlp_json``) at a few µs an event instead of an SDK span's 130.
DEFAULT_PROTOCOL = "http/json"
QUEUE_SIZE = 8192  # spans waiting for the collector; beyond this new ones are dropped, counted
BATCH_SIZE = 512
MAX_BACKOFF = 30.0  # seconds between attempts while the collector keeps failing
DropCallback = Callable[[int, str], None]
#: The most pptrace reads of a collector's answer to one export, on either protocol.
MAX_RESPONSE_BYTES = 64 * 1024
_READ_PIECE = 16 * 1024


class ResponseTooLarge(OSError):
    """A collector's answer longer than ``MAX_RESPONSE_BYTES``: cut off, the connection closed."""


def protocol(env: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol the environment asks for."""
    env = os.environ if env is None else env
    raw = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
           or DEFAULT_PROTOCOL).strip().lower()
    if raw not in PROTOCOLS:
        raise ConfigError(f"OTLP protocol {raw!r}: pptrace exports grpc, http/protobuf or "
                          "http/json")
    return raw


def _request_timeout(config: Config, env: Mapping[str, str]) -> float | None:
    # None lets the exporter read OTEL_EXPORTER_OTLP(_TRACES)_TIMEOUT itself.
    if env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TIMEOUT"):
        return None
    return max(0.1, min(1.0, config.exit_timeout))


def make_exporter(config: Config, env: Mapping[str, str] | None = None) -> SpanExporter:
    """The official OTLP span exporter for the configured protocol, with a short timeout."""
    env = os.environ if env is None else env
    timeout = _request_timeout(config, env)
    if protocol(env) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        options: Any = (("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),)
        return GrpcExporter(timeout=timeout, channel_options=options)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(timeout=timeout, session=bounded_session(env))


def _timeout_seconds(timeout: Any) -> float:
    """The read timeout in seconds, from what requests passes an adapter (None: 10 s)."""
    if isinstance(timeout, tuple):
        timeout = timeout[-1]
    read = getattr(timeout, "read_timeout", timeout)  # a urllib3 Timeout
    return float(read) if isinstance(read, (int, float)) else 10.0


def _read_bounded(response: Any, limit: int, timeout: float) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body, in pieces, within ``timeout`` seconds of reading;
    and whether the body ended there (False: longer, or too slow, and cut off)."""
    length = response.headers.get("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        return b"", False
    raw = response.raw
    read = getattr(raw, "read1", None) or raw.read  # read1: returns what one recv brings
    deadline = time.monotonic() + timeout
    pieces: list[bytes] = []
    size = 0
    while size <= limit:
        if time.monotonic() > deadline:
            return b"".join(pieces), False
        piece = read(min(_READ_PIECE, limit + 1 - size), decode_content=False)
        if not piece:
            return b"".join(pieces), True
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)[:limit], False


def bounded_session(env: Mapping[str, str] | None = None) -> Any:
    """A ``requests.Session`` whose responses are read as the module docstring says.

    When a credential provider is configured
    (``OTEL_PYTHON_EXPORTER_OTLP_HTTP_(TRACES_)CREDENTIAL_PROVIDER``), its session is the one
    bounded, as the exporter would have loaded it.
    """
    import requests
    from requests.adapters import HTTPAdapter

    class BoundedAdapter(HTTPAdapter):
        def send(self, request: Any, stream: bool = False, timeout: Any = None,
                 verify: Any = True, cert: Any = None,
                 proxies: Any = None) -> requests.Response:
            response = super().send(request, stream=True, timeout=timeout, verify=verify,
                                    cert=cert, proxies=proxies)
            try:
                body, whole = _read_bounded(response, MAX_RESPONSE_BYTES,
                                            _timeout_seconds(timeout))
            except BaseException:
                response.close()
                raise
            if whole:
                response.raw.release_conn()
            else:
                response.close()  # not consumed: closes the connection, drains nothing
            response._content = body
            response._content_consumed = True
            if not whole and response.ok:
                raise ResponseTooLarge(
                    f"collector at {request.url} answered {response.status_code} with more than "
                    f"{MAX_RESPONSE_BYTES} bytes, or too slowly: cut off, delivery unconfirmed")
            return response

    env = os.environ if env is None else env
    session: requests.Session | None = None
    if (env.get("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER")
            or env.get("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER")):
        try:  # the exporter's own loader (private; absent where the variables were unknown)
            from opentelemetry.exporter.otlp.proto.http import _common

            load = _common._load_session_from_envvar
        except (ImportError, AttributeError):
            load = None
        if load is not None:
            session = load("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER")
    session = session or requests.Session()
    adapter = BoundedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _events_in(spans: list[ReadableSpan]) -> int:
    return sum(1 for s in spans if s.name != schema.SPAN_STATS)


class FailOpenProcessor(SpanProcessor):
    """Queue ended spans (bounded) and export them on a daemon thread; count every loss."""

    def __init__(
        self,
        exporter: SpanExporter,
        exit_timeout: float = 2.0,
        on_drop: DropCallback | None = None,
        queue_size: int = QUEUE_SIZE,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self.exporter = exporter
        self.exit_timeout = exit_timeout
        self.on_drop = on_drop
        self.queue_size = queue_size
        self.batch_size = batch_size
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._cond = threading.Condition()
        self._in_flight: list[ReadableSpan] = []
        self._abandoned = False  # shutdown gave up on the batch in flight and counted it
        self._closed = False
        self.sent = 0  # spans the collector accepted
        self.dropped_spans = 0
        self.dropped_events = 0  # attach/extract spans among the dropped ones
        self.failed_batches = 0
        self.causes: collections.Counter[str] = collections.Counter()
        self._thread = threading.Thread(target=self._run, name="pptrace-otlp", daemon=True)
        self._thread.start()

    def on_start(self, span: object, parent_context: object = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._cond:
            if self._closed or len(self._queue) >= self.queue_size:
                full = not self._closed
            else:
                self._queue.append(span)
                self._cond.notify_all()
                return
        self._drop([span], "queue full" if full else "after shutdown")

    def _drop(self, spans: list[ReadableSpan], cause: str) -> None:
        events = _events_in(spans)
        with self._cond:
            self.dropped_spans += len(spans)
            self.dropped_events += events
            self.causes[cause] += len(spans)
        if self.on_drop is not None:
            try:
                self.on_drop(events, cause)
            except Exception:  # a reporting hook must not kill the export thread
                pass

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = [self._queue.popleft()
                         for _ in range(min(self.batch_size, len(self._queue)))]
                self._in_flight = batch
            try:
                result = self.exporter.export(batch)
                cause = "" if result is SpanExportResult.SUCCESS else "collector rejected or " \
                    "unreachable"
            except Exception as exc:
                cause = f"export raised {type(exc).__name__}"
            with self._cond:
                self._in_flight = []
                if self._abandoned:
                    return  # already counted as lost by shutdown
                if not cause:
                    self.sent += len(batch)
                else:
                    self.failed_batches += 1
                self._cond.notify_all()
            if cause:
                self._drop(batch, cause)
                # A collector that failed is not asked again at once: fewer wasted timeouts and
                # fewer error lines from the exporter. Spans wait (bounded) meanwhile.
                backoff = min(MAX_BACKOFF, max(1.0, backoff * 2))
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, timeout=backoff)
            else:
                backoff = 0.0

    def _wait_idle(self, deadline: float) -> bool:
        with self._cond:
            while self._queue or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (bounded) until every queued span was sent or dropped."""
        return self._wait_idle(time.monotonic() + timeout_millis / 1000)

    def shutdown(self, timeout: float | None = None) -> None:
        """Send what is queued within ``timeout`` (default: the exit timeout); count the rest."""
        deadline = time.monotonic() + (self.exit_timeout if timeout is None else timeout)
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._wait_idle(deadline)
        with self._cond:
            left = self._in_flight + list(self._queue)
            self._queue.clear()
            self._abandoned = bool(self._in_flight)
        if left:
            self._drop(left, "exit timeout")
        # Closing the channel may wait on the network: do it off this thread, bounded.
        closer = threading.Thread(target=self._close_exporter, name="pptrace-otlp-close",
                                  daemon=True)
        closer.start()
        closer.join(max(0.0, min(0.2, deadline - time.monotonic())))

    def _close_exporter(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception:
            pass


def otlp_processor(config: Config, on_drop: DropCallback | None = None) -> FailOpenProcessor:
    """The fail-open OTLP processor ``build_sink`` and activation add when ``otlp`` is exported."""
    # The exit budget is shared with the file flush: keep a small margin for it.
    budget = max(0.1, config.exit_timeout - 0.25)
    return FailOpenProcessor(make_exporter(config), exit_timeout=budget, on_drop=on_drop)
