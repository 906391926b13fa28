"""A real OTLP receiver for tests: gRPC (the official TraceService), HTTP/protobuf and
HTTP/JSON (``json``: OTLP/JSON bodies, hex ids as the OTLP specification writes them, parsed
strictly into the official ``ExportTraceServiceRequest`` by ``google.protobuf.json_format``).

Both listen on 127.0.0.1 at a free port and collect every ``ExportTraceServiceRequest``. Modes
stand in for a collector's failures:

- ``ok``: accept and keep the spans;
- ``down``: nothing listens on the port;
- ``refuse``: a TCP listener that accepts and closes at once (no OTLP spoken);
- ``error``: answer every export with HTTP 500 / gRPC INTERNAL;
- ``busy`` (gRPC): answer every call ``UNAVAILABLE``, empty ones included;
- ``hang``: accept the request and never answer (until the receiver stops);
- hostile answers to every export, each counted in ``body_sent`` (bytes of body written):
  ``flood``: ``200 OK`` with ``Content-Length: 10^12``, then zeros until the client hangs up
  (or ``FLOOD_CAP``); ``chunked``: the same without a length, in chunks; ``trickle``: ``200 OK``
  with a 1 MB length, one byte every 50 ms; ``bloat`` (gRPC): a valid response carrying a 1 MiB
  error message.

Over gRPC an empty request (no spans: the shipper's call before each request, see
``pptrace.ship.grpc_poster``) is counted in ``probes`` and answered OK in every mode but
``down``, ``refuse`` and ``busy``: the other modes stand for a collector failing on the spans.

    with Receiver("grpc") as rx:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.endpoint
        ...
        spans = rx.spans()        # [(resource attributes, span attributes, span name)]
"""

from __future__ import annotations

import base64
import gzip
import http.server
import json
import socket
import threading
import time
import zlib
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

MODES = ("ok", "down", "refuse", "error", "busy", "hang", "flood", "chunked", "trickle", "bloat")
#: The most a flooding receiver sends per request: bounds the harm of a client that reads it all.
FLOOD_CAP = 256 * 2**20
BLOAT = 2**20


def any_value(v: AnyValue) -> Any:
    """Decode an OTLP ``AnyValue`` to a Python value."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attributes(items: Any) -> dict[str, Any]:
    """Decode a list of ``KeyValue`` to a dict."""
    return {kv.key: any_value(kv.value) for kv in items if isinstance(kv, KeyValue)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: Receiver) -> None:
        self.rx = receiver

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (the proto's name)
        if self.rx.mode == "busy":
            context.abort(grpc.StatusCode.UNAVAILABLE, "test collector: busy")
        if not request.resource_spans:
            self.rx.probes += 1
            return trace_service_pb2.ExportTraceServiceResponse()
        self.rx.attempts += 1
        if self.rx.mode == "error":
            context.abort(grpc.StatusCode.INTERNAL, "test collector: internal error")
        if self.rx.mode == "hang":
            self.rx.released.wait()
            context.abort(grpc.StatusCode.UNAVAILABLE, "test collector stopped")
        self.rx.add(request)
        response = trace_service_pb2.ExportTraceServiceResponse()
        if self.rx.mode == "bloat":
            response.partial_success.error_message = "x" * BLOAT
            self.rx.body_sent += BLOAT
        return response


def _ids_as_base64(request: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping has base64:
    turn them over (a collector does the same), failing on an id of the wrong length."""
    for rs in request.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
                    if span.get(key):
                        raw = bytes.fromhex(span[key])
                        if len(raw) != size:
                            raise ValueError(f"{key} {span[key]!r} is not {size} bytes")
                        span[key] = base64.b64encode(raw).decode()
    return request


class _HttpHandler(http.server.BaseHTTPRequestHandler):
    rx: Receiver
    # The answer's head and body in one write, as a collector sends them: written apart, the
    # body waits for the head's ACK, which the client delays (40 ms a request). The hostile
    # answers flush what they mean to send at once.
    wbufsize = -1

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None

    def do_POST(self) -> None:  # noqa: N802
        rx = self.rx
        rx.attempts += 1
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rx.headers.append(dict(self.headers))
        if rx.mode == "hang":
            rx.released.wait()
            return
        if rx.mode in ("flood", "chunked", "trickle"):
            self._hostile(rx)
            return
        if rx.mode == "error" or self.path != "/v1/traces":
            self.send_response(500 if rx.mode == "error" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = trace_service_pb2.ExportTraceServiceRequest()
        json_body = self.headers.get("Content-Type", "") == "application/json"
        if json_body:
            rx.json_requests += 1
            json_format.Parse(json.dumps(_ids_as_base64(json.loads(body))), request)
        else:
            request.ParseFromString(body)
        rx.add(request)
        response = trace_service_pb2.ExportTraceServiceResponse()
        out = (json_format.MessageToJson(response).encode() if json_body
               else response.SerializeToString())
        self.send_response(200)
        self.send_header("Content-Type",
                         "application/json" if json_body else "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _hostile(self, rx: Receiver) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        if rx.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(10**12 if rx.mode == "flood" else 10**6))
        self.end_headers()
        zeros = bytes(64 * 1024)
        piece = (b"%x\r\n" % len(zeros)) + zeros + b"\r\n" if rx.mode == "chunked" else zeros
        sent = 0
        try:
            while sent < FLOOD_CAP and not rx.released.is_set():
                if rx.mode == "trickle":
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    rx.body_sent += 1
                    sent += 1
                    time.sleep(0.05)
                    continue
                self.wfile.write(piece)
                rx.body_sent += len(zeros)
                sent += len(zeros)
        except OSError:  # the client hung up: what a bounded client does
            pass
        self.close_connection = True


class Receiver:
    """One OTLP receiver (``grpc``, ``http`` or ``json``, which is HTTP too) in one failure
    mode."""

    def __init__(self, protocol: str, mode: str = "ok", port: int = 0) -> None:
        """``port``: 0 for a free one; a given one to start a receiver where one was down."""
        assert protocol in ("grpc", "http", "json") and mode in MODES
        self.protocol = protocol
        self.mode = mode
        self.requests: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.attempts = 0
        self.probes = 0  # gRPC: empty requests (no spans) answered
        self.json_requests = 0  # requests whose body was OTLP/JSON
        self.body_sent = 0  # hostile modes: bytes of answer written to clients
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._stoppers: list[Any] = []
        self.port = port

    @property
    def endpoint(self) -> str:
        """The base URL an exporter is given (HTTP appends /v1/traces itself)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def env_protocol(self) -> str:
        """The value of ``OTEL_EXPORTER_OTLP_PROTOCOL`` for this receiver."""
        return {"grpc": "grpc", "http": "http/protobuf", "json": "http/json"}[self.protocol]

    def add(self, request: Any) -> None:
        with self._lock:
            self.requests.append(request)

    def start(self) -> Receiver:
        if self.mode == "down":
            self.port = self.port or free_port()
        elif self.mode == "refuse":
            self._start_refuser()
        elif self.protocol == "grpc":
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), server)
            self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
            server.start()
            self._stoppers.append(lambda: server.stop(0))
        else:
            handler = type("Handler", (_HttpHandler,), {"rx": self})
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
            httpd.daemon_threads = True
            self.port = httpd.server_address[1]
            thread = threading.Thread(target=httpd.serve_forever, daemon=True)
            thread.start()

            def stop() -> None:
                httpd.shutdown()
                httpd.server_close()

            self._stoppers.append(stop)
        return self

    def _start_refuser(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(16)
        sock.settimeout(0.1)
        self.port = sock.getsockname()[1]
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except OSError:
                    continue
                self.attempts += 1
                conn.close()
            sock.close()

        threading.Thread(target=loop, daemon=True).start()
        self._stoppers.append(stop.set)

    def stop(self) -> None:
        self.released.set()
        for stop in self._stoppers:
            stop()
        self._stoppers.clear()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spans(self) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
        """Every span received: (resource attributes, span attributes, span name)."""
        out = []
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append((resource, attributes(span.attributes), span.name))
        return out
