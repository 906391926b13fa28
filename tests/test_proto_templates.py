"""The protobuf request written from templates is the long way's, byte for byte.

``pptrace.export.proto_templates`` writes a line's spans from per-shape templates, without
decoding the line (what keeps an ``http/protobuf`` or ``grpc`` shipper's CPU down:
``benchmarks/bench_engine_cost.py`` prints it). These tests hold it to
``pptrace.export.otlp_proto.request`` (itself held to ``google.protobuf.json_format`` by
``tests/test_otlp_proto.py``) over the lines a shipper posts: the reencoder's, of a trace file
with repeated shapes, drops, errors, a negative duration, a changed resource and stats, and
lines damaged by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pptrace.export.proto_templates as proto_templates
from pptrace.export.otlp_proto import request
from pptrace.export.proto_templates import Encoder
from pptrace.ship.reencode import Reencoder
from tests.helpers_ship import trace_lines


def _posted(tmp_path: Path) -> list[str]:
    """The lines a shipper posts for the trace file (version 1, ids its own)."""
    reencoder = Reencoder()
    return [out for line in trace_lines(tmp_path) for out in reencoder.line(line).lines]


def _same(encoder: Encoder, line: str) -> None:
    """The encoder's bytes are the long way's, or both refuse the line (``ValueError``)."""
    try:
        want: bytes | type[BaseException] = request([line]).SerializeToString()
    except ValueError as exc:
        want = type(exc)
    try:
        got: bytes | type[BaseException] = encoder.line(line)
    except ValueError as exc:
        got = type(exc)
    assert got == want


def test_requests_written_from_templates_are_the_long_ways_bytes(tmp_path: Path) -> None:
    posted = _posted(tmp_path)
    encoder = Encoder()
    for line in posted:
        _same(encoder, line)
    assert encoder.fast_lines >= len(posted) // 2  # the shapes repeat: most took no decoding
    batch = posted[:8]  # a request of several lines: each line's bytes, end to end
    assert proto_templates.encode_request(batch) == request(batch).SerializeToString()


@pytest.mark.parametrize(("mark", "bad"), [
    ('"pptrace.seq","value":{"intValue":"', "x"),  # no number
    ('"pptrace.seq","value":{"intValue":"', "-"),  # a negative one (int64: ten bytes)
    ('"pptrace.mono_ns","value":{"intValue":"', "99999999999999999999"),  # past int64
    ('"startTimeUnixNano":"', "-"),  # a time below zero (fixed64)
    ('"spanId":"', "ab"),  # an id one byte too long
])
def test_a_damaged_value_is_what_the_long_way_makes_of_it(tmp_path: Path, mark: str,
                                                          bad: str) -> None:
    posted = _posted(tmp_path)
    encoder = Encoder()
    for line in posted:  # every template made
        encoder.line(line)
    line = next(line for line in posted if mark in line and "exception" not in line)
    damaged = line.replace(mark, mark + bad, 1)
    assert damaged != line
    _same(encoder, damaged)


def test_the_templates_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proto_templates, "_LIMIT", 4)
    encoder = Encoder()
    for line in _posted(tmp_path):
        _same(encoder, line)
        assert len(encoder.heads) <= 4 and len(encoder.spans) <= 4 + 64  # a line's new shapes
