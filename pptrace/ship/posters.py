"""The shipper's poster for the protocol the environment asks for.

``http/json`` and ``http/protobuf`` are posted by the in-process path's own ``Poster``
(``pptrace.export.otlp_json``: the same request, encoded as JSON or as protobuf), ``grpc`` by
``pptrace.ship.grpc_poster`` (the same request, a unary ``Export`` call), each with the rule:
"retry: " what the collector never received, never resend what it may have.

    poster = make_poster()          # OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, ENDPOINT, ...
    outcome = poster.post(lines)    # "" delivered; "retry: ..." never received; else lost

A poster that sends protobuf (``protobuf``) takes lines the reencoder wrote as protobuf
requests' bytes beside OTLP/JSON ones (``pptrace.export.proto_templates.encode_request``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol

from pptrace.export.otlp import protocol
from pptrace.export.otlp_json import Poster, traces_target

__all__ = ["Sender", "make_poster"]


class _Where(Protocol):
    @property
    def url(self) -> str: ...


class Sender(Protocol):
    """What the shipper posts through: one request of lines, and what became of it."""

    @property
    def target(self) -> _Where: ...

    @property
    def protobuf(self) -> bool:
        """Whether it sends protobuf, and takes lines already encoded (bytes) with the rest."""
        ...

    def post(self, lines: Sequence[str | bytes]) -> str: ...


def make_poster(env: Mapping[str, str] | None = None) -> Sender:
    """The poster for the environment's OTLP protocol and endpoint."""
    env = os.environ if env is None else env
    wire = protocol(env)
    if wire == "grpc":
        from pptrace.ship.grpc_poster import GrpcPoster, grpc_target

        return GrpcPoster(grpc_target(env))
    return Poster(traces_target(env, wire))
