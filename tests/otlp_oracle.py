"""The test oracle for OTLP/JSON: the official encoding of SDK spans, as one line.

``encode_spans`` (``opentelemetry-exporter-otlp-proto-common``, what the SDK's OTLP exporters
send) builds the ``ExportTraceServiceRequest`` from the official protobuf definitions
(``opentelemetry-proto``); ``google.protobuf.json_format`` renders it as JSON. Protobuf's generic
JSON mapping writes ``bytes`` fields as base64, where OTLP/JSON (the specification) writes trace
and span ids as hex: that is the one rewrite made here. Then compact separators and ASCII
escapes, as ``json.dumps`` writes them.

    line = official_line(spans)       # '{"resourceSpans":[...]}'
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

ID_KEYS = ("traceId", "spanId", "parentSpanId")
_ID_RE = re.compile(r'"(traceId|spanId|parentSpanId)":"[0-9a-f]+"')


def hex_ids(node: Any) -> None:
    """Rewrite protobuf-JSON base64 ids as the hex strings OTLP/JSON requires, in place."""
    if isinstance(node, dict):
        for key in ID_KEYS:
            value = node.get(key)
            if isinstance(value, str) and value:
                node[key] = base64.b64decode(value).hex()
        for value in node.values():
            hex_ids(value)
    elif isinstance(node, list):
        for value in node:
            hex_ids(value)


def official_line(spans: Sequence[ReadableSpan], compact: bool = False) -> str:
    """The spans as one OTLP/JSON ``TracesData`` line, through the official encoder;
    ``compact``: with a compact trace file's envelope (``compact_envelope``)."""
    data = json_format.MessageToDict(encode_spans(spans), preserving_proto_field_name=False)
    hex_ids(data)
    if compact:
        compact_envelope(data)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True)


def compact_envelope(data: dict[str, Any]) -> None:
    """A compact trace file's span envelope, in place: the kind by its enum number (OTLP/JSON
    takes either), no empty status (its default), no flags."""
    for rs in data.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                if span.get("kind") == "SPAN_KIND_INTERNAL":
                    span["kind"] = 1
                if span.get("status") == {}:
                    del span["status"]
                span.pop("flags", None)


def without_ids(line: str) -> str:
    """A line with every (hex) id replaced by a placeholder: random ids apart, lines compare."""
    return _ID_RE.sub(lambda m: f'"{m.group(1)}":"-"', line)
