"""The shipper's re-encoding from templates writes what the long way writes, ids aside.

``pptrace.ship.reencode`` writes a trace-file line whose every span has a template without
decoding it (what keeps the shipper's CPU down: ``benchmarks/bench_engine_cost.py`` prints it).
These tests hold that path to the long one (decode each span, encode it again) over lines of
every kind the writer makes: shapes repeated step after step, drops, errors, a negative
duration, a rank and run id that change, stats spans, and lines damaged by hand.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from pptrace.ship.reencode import Reencoded, Reencoder
from tests.helpers_ship import trace_lines

_IDS = re.compile(r'"(traceId|spanId)":"[0-9a-f]+"')


def _same(long_way: Reencoder, fast: Reencoder, line: str) -> None:
    """Both write the same lines and counts, or both refuse the line (``ValueError``)."""
    outs: list[Reencoded | type[BaseException]] = []
    for reencoder in (long_way, fast):
        try:
            outs.append(reencoder.line(line))
        except ValueError as exc:
            outs.append(type(exc))
    a, b = outs
    if not isinstance(a, Reencoded) or not isinstance(b, Reencoded):
        assert a == b
        return
    assert [_IDS.sub("", x) for x in a.lines] == [_IDS.sub("", x) for x in b.lines]
    assert (a.events, a.messages, a.stats, a.skipped, a.final) == (
        b.events, b.messages, b.stats, b.skipped, b.final)


def test_lines_written_from_templates_are_the_long_ways_lines(tmp_path: Path) -> None:
    lines = trace_lines(tmp_path)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in lines:
        _same(long_way, fast, line)
    assert long_way.fast_lines == 0
    # The shapes repeat (a step's drops and errors with them): most lines took no decoding.
    events = [line for line in lines if "pptrace.stats" not in line]
    assert fast.fast_lines >= len(events) // 2


def test_a_damaged_value_goes_the_long_way(tmp_path: Path) -> None:
    """A value that is no number (the long way refuses the line), or one that names a drop of 0
    where a template holds drops: as the long way has it."""
    lines = [line for line in trace_lines(tmp_path) if "pptrace.stats" not in line]
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in lines:  # every template made
        fast.line(line)
    before = fast.fast_lines
    seq = '{"key":"pptrace.seq","value":{"intValue":"'
    drops = '{"key":"pptrace.dropped_before","value":{"intValue":"'
    damaged = [lines[-1].replace(seq + "1", seq + "x1", 1),
               re.sub(re.escape(drops) + r"\d+", drops + "0", lines[-1], count=1)]
    assert all(d != lines[-1] for d in damaged)
    for line in damaged:
        _same(long_way, fast, line)
    assert fast.fast_lines == before


def test_the_templates_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past ``_KEY_LIMIT`` start the reencoder again with none (a file whose spans never
    repeat costs memory for none of them), and it still writes what the long way writes."""
    import pptrace.ship.reencode as reencode

    monkeypatch.setattr(reencode, "_KEY_LIMIT", 8)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for line in trace_lines(tmp_path):
        _same(long_way, fast, line)
        assert len(fast._templates or {}) <= 8


def test_a_key_first_seen_with_a_drop_of_0_makes_no_template(tmp_path: Path) -> None:
    """A writer names a drop only when there was one: a line by hand that names 0 must not
    teach a template without a hole for it, or the next real drop would be written as 0."""
    drops = '{"key":"pptrace.dropped_before","value":{"intValue":"'
    line = next(line for line in trace_lines(tmp_path) if drops in line and "exception" not in line)
    zero = re.sub(re.escape(drops) + r"\d+", drops + "0", line)
    long_way, fast = Reencoder(templates=False), Reencoder()
    for text in (zero, zero, line, line):
        _same(long_way, fast, text)


def test_a_span_matched_to_a_key_s_pattern_is_cut_as_that_key(tmp_path: Path) -> None:
    """``cut_pattern``: whatever values a span of a key's texts holds, a match gives what
    ``cut_span`` gives (its texts, its values), or there is no match; values tried include
    braces, quotes, commas, underscores and marks' own words, which could make or hide a mark."""
    from pptrace.export.span_templates import cut_pattern, cut_span, line_spans

    rng = random.Random(5)
    hexes = ["0", "7", "f", "A", "-"]
    alphabet = [*hexes, "{", '"', ",", "_", " ", "x", ":", "key", '{"key"', '"value":{']
    spans = [span for line in trace_lines(tmp_path) for span in (line_spans(line) or ("", []))[1]]
    matched = 0
    for span in spans:
        cut = cut_span(span)
        assert cut is not None
        pattern = cut_pattern(cut.texts)
        match = pattern.fullmatch(span)
        assert match is not None and list(match.groups()) == cut.values  # its own key
        for trial in range(20):
            chars = hexes if trial % 2 else alphabet
            values = ["".join(rng.choices(chars, k=rng.randint(0, 4))) for _ in cut.values]
            other = "".join(v + t for v, t in zip(values, cut.texts, strict=True))
            match = pattern.fullmatch(other)
            if match is not None:
                again = cut_span(other)
                assert again is not None
                assert (again.texts, list(again.values)) == (cut.texts, list(match.groups()))
                matched += 1
    assert matched >= 10 * len(spans)  # every span of hex digits and minus signs matched
