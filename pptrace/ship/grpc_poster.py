"""OTLP over gRPC from the shipper: one unary ``TraceService/Export`` call a request.

The request is the one the HTTP posters send (``pptrace.export.otlp_proto``: the trace-file
encoder's spans as an ``ExportTraceServiceRequest``), sent as raw bytes on a channel of the
shipper's own. The shipper's rule is "retry what the collector never received, never resend what
it may have", and over gRPC a failed call does not say which: ``UNAVAILABLE`` comes from a server
that refused the request and from a connection that broke after the request was written alike,
and the status a client library makes up for a broken transport cannot be told from one the
server sent. So the rule is drawn before the call, where it can be known:

- each request is preceded by an empty ``Export`` call on the same channel (an
  ``ExportTraceServiceRequest`` with no spans: nothing a collector can keep twice), within the
  request timeout. It makes the connection (TCP, TLS, HTTP/2) and proves the collector answers.
  If it fails, whatever the reason (nothing listening, no HTTP/2 spoken, a deadline, any
  status), the request itself was never started: "retry: ...", the channel is closed and the
  next attempt connects afresh;
- once the request's own call is started, every failure (any status, a deadline, a broken
  connection, an answer over ``MAX_RESPONSE_BYTES``) may have followed the collector's receipt:
  the request is counted lost, never sent again. A connection that breaks between the empty
  call and the request's costs a request that was never sent: counted lost, never duplicated. A
  collector that answers the request itself ``UNAVAILABLE`` or ``RESOURCE_EXHAUSTED``
  (overloaded: OTLP says retry) is counted lost too, where HTTP's 429/503 are retried: over gRPC
  such an answer cannot be told from a broken transport's.

The connectivity API (``subscribe``, ``channel_ready_future``) is not used: its polling thread
can outlive an unsubscribe and fail on a channel closed meanwhile ("Channel deallocated"), a
traceback on the engine's terminal.

The channel's own retries are off (``grpc.enable_retries``: 0), so nothing resends behind this
rule. Endpoint, headers, TLS files, compression and timeout come from the standard
``OTEL_EXPORTER_OTLP_(TRACES_)*`` variables, read as the official gRPC exporter reads them.

    poster = GrpcPoster(grpc_target(os.environ))     # pptrace.ship.posters.make_poster
    outcome = poster.post(lines)     # "" delivered; "retry: ..." never started; else lost
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import grpc

from pptrace.export.otlp import MAX_RESPONSE_BYTES
from pptrace.export.otlp_json import DEFAULT_TIMEOUT
from pptrace.export.proto_templates import encode_request

__all__ = ["EXPORT_METHOD", "GrpcPoster", "GrpcTarget", "grpc_target"]

#: The OTLP trace service's one method (opentelemetry/proto/collector/trace/v1).
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),  # a hostile answer is cut off
    ("grpc.enable_retries", 0),  # no resend behind the shipper's rule
)


@dataclass(frozen=True, slots=True)
class GrpcTarget:
    """Where and how the gRPC poster calls: the ``OTEL_EXPORTER_OTLP_*`` settings, read once."""

    url: str  # the endpoint as given (the state file and the closing line name it)
    authority: str  # host:port
    insecure: bool = True
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    gzip: bool = False
    certificate: str = ""
    client_key: str = ""
    client_certificate: str = ""


def _env(env: Mapping[str, str], name: str) -> str:
    return (env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
            or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def grpc_target(env: Mapping[str, str]) -> GrpcTarget:
    """The target as the official gRPC exporter reads the environment (``TRACES_`` first)."""
    from opentelemetry.util.re import parse_env_headers

    url = _env(env, "ENDPOINT") or "http://localhost:4317"
    parsed = urlparse(url)
    insecure_var = _env(env, "INSECURE")
    if parsed.scheme == "https":
        insecure = False
    elif insecure_var:
        insecure = insecure_var.lower() == "true"
    else:
        insecure = parsed.scheme == "http"
    compression = _env(env, "COMPRESSION").lower()
    if compression not in ("", "none", "gzip"):
        raise ValueError(f"OTLP gRPC compression {compression!r}: expected gzip or none")
    raw_timeout = _env(env, "TIMEOUT")
    return GrpcTarget(
        url=url, authority=parsed.netloc or url, insecure=insecure,
        headers=tuple((k.lower(), v) for k, v in parse_env_headers(
            _env(env, "HEADERS"), liberal=True).items()),
        timeout=float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT,
        gzip=compression == "gzip", certificate=_env(env, "CERTIFICATE"),
        client_key=_env(env, "CLIENT_KEY"), client_certificate=_env(env, "CLIENT_CERTIFICATE"))


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class GrpcPoster:
    """Call ``TraceService/Export`` with OTLP/JSON lines as one request; say what became of it
    (see the module docstring for which failures are retried)."""

    #: It sends protobuf: lines may come already encoded (``encode_request``'s bytes).
    protobuf = True

    def __init__(self, target: GrpcTarget) -> None:
        self.target = target
        self.requests = 0  # calls started
        self._channel: grpc.Channel | None = None
        self._export: Any = None

    def _open(self) -> grpc.Channel:
        if self._channel is None:
            t = self.target
            if t.insecure:
                channel = grpc.insecure_channel(t.authority, options=_OPTIONS)
            else:
                credentials = grpc.ssl_channel_credentials(
                    _read(t.certificate), _read(t.client_key), _read(t.client_certificate))
                channel = grpc.secure_channel(t.authority, credentials, options=_OPTIONS)
            self._channel = channel
            # Raw bytes both ways: the request is serialized here, the answer is not needed.
            self._export = channel.unary_unary(EXPORT_METHOD, request_serializer=None,
                                               response_deserializer=None)
        return self._channel

    def close(self) -> None:
        """Close the channel (the next post opens a fresh one)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._export = None

    def _call(self, body: bytes) -> None:
        t = self.target
        self._export(body, timeout=t.timeout, metadata=t.headers or None,
                     compression=grpc.Compression.Gzip if t.gzip else None, wait_for_ready=False)

    def post(self, lines: Sequence[str | bytes]) -> str:
        """Make one call; "" when the collector took it, else why not ("retry: " first when the
        request's call was never started)."""
        try:
            body = encode_request(lines)
            self._open()
            try:
                self._call(b"")  # an empty request: the connection, and an answer, first
            except grpc.RpcError as exc:
                self.close()  # the next attempt connects afresh, not after gRPC's own backoff
                code = _code(exc)
                return "retry: " + ("collector unreachable" if code in _UNREACHABLE else
                                    f"collector answered an empty export {code}")
            self.requests += 1
            self._call(body)
        except grpc.RpcError as exc:
            return f"gRPC call ended {_code(exc)}"
        except Exception as exc:
            return f"export raised {type(exc).__name__}"
        return ""


#: An empty call's failures that say no collector answered.
_UNREACHABLE = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _code(exc: grpc.RpcError) -> str:
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    return str(getattr(code, "name", "an error"))

