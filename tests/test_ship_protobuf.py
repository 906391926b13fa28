"""An ``http/protobuf`` or ``grpc`` shipper writes a line's protobuf from the values it read, and
the collector gets the same bytes as from the version 1 text's encoding.

``pptrace.ship.reencode.Reencoder(protobuf=True)`` writes a trace-file line whose spans have
templates as protobuf requests' bytes, straight from the values it read (what halves such a
shipper's CPU: ``benchmarks/bench_ship.py`` prints it), where the version 1 text was written,
cut again and encoded before (``proto_templates.encode_request``). These tests hold the new way to
that one byte for byte, ids included (``random`` seeded alike: the sinks draw the same ids), over
lines of every kind the writer makes, lines damaged by hand, and a whole shipper's requests.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from pptrace.export.otlp_json import Poster, Target
from pptrace.export.otlp_proto import request
from pptrace.export.proto_templates import encode_request
from pptrace.ship.reencode import Reencoded, Reencoder
from pptrace.ship.shipper import Shipper
from tests.helpers_ship import trace_lines


def _both(lines: list[str], seed: int = 7) -> list[tuple[Reencoded | type, Reencoded | type]]:
    """Each line as the version 1 reencoder and the protobuf one write it (ids alike)."""
    out: list[list[Reencoded | type]] = []
    for protobuf in (False, True):
        random.seed(seed)
        reencoder = Reencoder(protobuf=protobuf)
        got: list[Reencoded | type] = []
        for line in lines:
            try:
                got.append(reencoder.line(line))
            except ValueError as exc:
                got.append(type(exc))
        out.append(got)
    return list(zip(out[0], out[1], strict=True))


def _bytes(lines: list[str | bytes]) -> bytes | type:
    try:
        return encode_request(lines)
    except ValueError as exc:
        return type(exc)


def _long_way(lines: list[str | bytes]) -> bytes | type:
    assert all(isinstance(line, str) for line in lines)
    try:
        return request([line for line in lines if isinstance(line, str)]).SerializeToString()
    except ValueError as exc:
        return type(exc)


def test_a_line_written_from_its_values_is_the_version_1_lines_request(tmp_path: Path) -> None:
    lines = trace_lines(tmp_path)
    random.seed(7)
    proto = Reencoder(protobuf=True)
    for line in lines:
        proto.line(line)
    written = 0
    for text, pb in _both(lines):
        assert isinstance(text, Reencoded) and isinstance(pb, Reencoded)
        assert (text.events, text.messages, text.stats, text.skipped, text.final) == (
            pb.events, pb.messages, pb.stats, pb.skipped, pb.final)
        assert len(pb.lines) == len(text.lines)  # a request holds as many lines either way
        assert _bytes(pb.lines) == _long_way(text.lines)
        written += all(isinstance(line, bytes) for line in pb.lines) and bool(pb.lines)
    # The shapes repeat (drops, errors and negative durations with them): most lines were
    # written from their values; stats spans and error spans go the text's way.
    events = [line for line in lines if "pptrace.stats" not in line]
    assert written == proto.proto_lines >= len(events) // 2


@pytest.mark.parametrize(("mark", "bad", "held"), [
    ('"pptrace.mono_ns","value":{"intValue":"', "99999999999999999999", False),  # past int64
    ('"pptrace.seq","value":{"intValue":"', "-", True),  # a negative seq: int64, ten bytes
    ('"startTimeUnixNano":"', "-", False),  # a time below zero: no fixed64 holds it
    ('"endTimeUnixNano":"', "1" * 21, False),  # past 64 bits
])
def test_a_value_protobuf_cannot_hold_is_what_the_text_s_encoding_makes_of_it(
        tmp_path: Path, mark: str, bad: str, held: bool) -> None:
    lines = [line for line in trace_lines(tmp_path) if "pptrace.stats" not in line]
    line = next(line for line in reversed(lines) if mark in line)
    damaged = line.replace(mark, mark + bad, 1)
    assert damaged != line
    got = _both([*lines, damaged])
    text, pb = got[-1]
    assert isinstance(text, Reencoded) and isinstance(pb, Reencoded)
    # Written from its values where protobuf holds them, else the text's way (its encoding
    # says what it makes of it).
    assert all(isinstance(x, bytes if held else str) for x in pb.lines)
    assert _bytes(pb.lines) == _long_way(text.lines)
    assert any(all(isinstance(x, bytes) for x in p.lines)  # the others from their values
               for _, p in got[:-1] if isinstance(p, Reencoded))


class _Session:
    """Takes every request (200) and keeps its body."""

    def __init__(self) -> None:
        self.posts: list[bytes] = []

    def post(self, url: str, data: bytes, **_: Any) -> Any:
        self.posts.append(data)
        return type("Response", (), {"status_code": 200})()


def _ship(directory: Path, from_values: bool) -> tuple[list[bytes], dict[str, Any]]:
    session = _Session()
    random.seed(11)
    shipper = Shipper(str(directory), Poster(Target("http://127.0.0.1:9/v1/traces",
                                                    protocol="http/protobuf"), session),
                      drain=30.0, linger=0.0, poll=0.01, alive=lambda pid: False)
    if not from_values:  # the way before: version 1 text, encoded when posted
        shipper.reencoder = Reencoder()
    state = shipper.run()
    return session.posts, state.totals()


def test_a_shipper_posts_the_same_requests_either_way(tmp_path: Path) -> None:
    """Requests of up to 8 lines, the line that does not fit read again for the next: the
    same bodies, byte for byte, as the text's encoding posts."""
    lines = trace_lines(tmp_path / "corpus")
    runs = []
    for name in ("values", "text"):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "pptrace-rank1-pid7.otlp.jsonl").write_text(
            "\n".join(lines * 3) + "\n", encoding="ascii")
        runs.append(_ship(directory, from_values=name == "values"))
        shutil.rmtree(directory)
    (values, totals), (text, text_totals) = runs
    assert len(values) > 3 and values == text
    assert totals == text_totals and totals["events_sent"] > 0 and totals["events_lost"] == 0
    spans = sum(len(re.findall(b"pptrace\\.(?:attach|extract)", body)) for body in values)
    assert spans >= totals["events_sent"]  # every event went out (names once a span, or more)
