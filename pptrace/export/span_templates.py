"""Span templates: a shape's span text with holes for what varies, cut from a probe's encoding.

``pptrace.export.file_sink`` encodes one event of each shape the ordinary way with the probe's
values (``P_*``, digits that cannot come out of anything else in a span), splits the text at
them (``PROBE_RE``) and keeps ``renderer(parts, order)``: the next events of that shape are one
call each, with no record built.

    parts, order = PROBE_RE.split(text), [PROBES[m] for m in PROBE_RE.findall(text)]
    render = renderer(parts, order)     # render(out, trace_hex, span_hex, start, end, ...)

A reader of such spans cuts them at the same values (``cut_span``): what is left is the same
from one span of a shape to the next (the shipper's re-encoding and its protobuf encoding key
their own templates by it).

    head, spans = line_spans(line)      # a FileSink line: its resource text, its spans' texts
    cut = cut_span(spans[0])            # Cut(texts, holes, values)
    match = cut_pattern(cut.texts).fullmatch(spans[1])   # groups: cut_span(spans[1]).values
                                                         # when it is cut the same

A reader that has seen a shape asks ``cut_pattern`` whether the next span is cut the same: one
pass over the span, where ``cut_span`` looks for every mark twice.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from itertools import chain
from typing import Any, NamedTuple

from pptrace.model import schema

__all__ = [
    "HOLE_KEYS", "PROBES", "PROBE_RE", "P_DROPPED", "P_DUR", "P_MONO", "P_SEQ", "P_SPAN", "P_START",
    "P_TRACE", "Cut", "Render", "cut_pattern", "cut_span", "line_spans", "renderer",
]

#: A template: ``render(out, *values)`` extends the list ``out`` with the span's text, in pieces
#: (joined once per line), from the values that vary: trace id and span id in hex, start, end,
#: seq, mono_ns, duration_ns, dropped_before (in this order, as positional arguments).
Render = Callable[..., None]

# The template of a shape is cut from the encoding of a probe: an event of that shape with these
# values, whose digits cannot come out of anything else in a span (19 digits within int64;
# end = start + duration). The check against the ordinary encoding catches any coincidence.
P_TRACE, P_SPAN = int("7ace" * 8, 16), int("5eed" * 4, 16)
P_START, P_DUR = 4_669_201_609_102_990_671, 1_414_213_562_373_095_048
P_SEQ, P_MONO = 3_141_592_653_589_793_238, 2_718_281_828_459_045_235
P_DROPPED = 1_732_050_807_568_877_293
PROBES = {
    f"{P_TRACE:032x}": 0,
    f"{P_SPAN:016x}": 1,
    str(P_START): 2,
    str(P_START + P_DUR): 3,
    str(P_SEQ): 4,
    str(P_MONO): 5,
    str(P_DUR): 6,
    str(P_DROPPED): 7,
}
PROBE_RE = re.compile("|".join(map(re.escape, PROBES)))


def renderer(parts: list[str], order: list[int]) -> Render | None:
    """Interleave ``parts`` with the values ``order`` names (None if there are none)."""
    if len(order) < 2:
        return None
    if order == list(range(6)):  # version 2, no drops: ids, times, seq, mono_ns

        s0, s1, s2, s3, s4, s5, s6 = parts

        def render6(out: list[str], a: str, b: str, c: int, d: int, e: int, f: int, g: int,
                    h: int) -> None:
            out += (s0, a, s1, b, s2, str(c), s3, str(d), s4, str(e), s5, str(f), s6)

        return render6
    if order == list(range(8)):  # version 1 without an error, its values in the order passed

        s0, s1, s2, s3, s4, s5, s6, s7, s8 = parts

        def render8(out: list[str], a: str, b: str, c: int, d: int, e: int, f: int, g: int,
                    h: int) -> None:
            out += (s0, a, s1, b, s2, str(c), s3, str(d), s4, str(e), s5, str(f), s6, str(g),
                    s7, str(h), s8)

        return render8
    pick = operator.itemgetter(*order)
    head, last = parts[:-1], parts[-1]

    def render(out: list[str], *values: Any) -> None:
        out += chain.from_iterable(zip(head, map(str, pick(values)), strict=True))
        out.append(last)

    return render


# A trace-file line (``FileSink``'s): one resource, one scope, its spans, this tail.
_SPANS, _TAIL, _FIRST, _NEXT = '"spans":[', "]}]}]}", '{"traceId":"', '},{"traceId":"'
#: The attribute whose integer value each hole past the times is.
HOLE_KEYS = {4: schema.SEQ, 5: schema.MONO_NS, 6: schema.DURATION_NS, 7: schema.DROPPED_BEFORE}
#: The values a span's template leaves as holes, found by the text before each (a quote inside
#: a JSON string is escaped, so none of these can be found inside one), and the hole each fills
#: (a span's trace id, which opens it, is hole 0).
_MARKS = (('","spanId":"', 1), ('"startTimeUnixNano":"', 2), ('"endTimeUnixNano":"', 3),
          *((f'{{"key":"{key}","value":{{"intValue":"', hole) for hole, key in HOLE_KEYS.items()))


class Cut(NamedTuple):
    """A span (less its opening ``{"traceId":"``) cut at its values."""

    texts: tuple[str, ...]  # what is left, its key: the marks (and the holes they name) in it
    holes: tuple[int, ...]  # the hole each value fills, in order
    values: list[str]


def cut_span(span: str) -> Cut | None:
    """``span`` cut at its values (None when one is there twice)."""
    cuts = []
    for mark, hole in _MARKS:
        at = span.find(mark)
        if at >= 0:
            start = at + len(mark)
            end = span.find('"', start)
            if end < 0 or span.find(mark, end) >= 0:
                return None
            cuts.append((start, end, hole))
    cuts.sort()
    prev = span.find('"')
    texts, holes, values = [], [0], [span[:prev]]
    for start, end, hole in cuts:
        texts.append(span[prev:start])
        holes.append(hole)
        values.append(span[start:end])
        prev = end
    texts.append(span[prev:])
    return Cut(tuple(texts), tuple(holes), values)


#: A value ``cut_pattern`` takes: hex digits and minus signs, nothing any mark holds.
_VALUE = "([0-9a-fA-F-]*)"


def cut_pattern(texts: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern whose ``fullmatch`` of a span gives the values of ``cut_span(span)`` when its
    texts are ``texts`` (a ``Cut``'s), and None when the span is not those texts around values
    of hex digits and minus signs.

    Such values hold no quote, no brace and nothing else of a mark, so every mark in a span it
    matches lies inside its texts, as in the span that ``texts`` were cut from: ``cut_span``
    finds the same marks there and cuts the span the same (a value it cannot vouch for, such
    as ``1_000``, is no match: ``cut_span`` says what it makes of it). Each text opens with its
    value's closing quote, so a match is one pass.
    """
    return re.compile(_VALUE + _VALUE.join(map(re.escape, texts)))


def line_spans(line: str) -> tuple[str, list[str]] | None:
    """A ``FileSink`` line's resource text (up to its spans) and its spans, each less its
    opening ``{"traceId":"``; None when the line is not one resource's and one scope's spans."""
    at = line.find(_SPANS)
    if at < 0 or not line.endswith(_TAIL) or line.find(_SPANS, at + 1) >= 0:
        return None
    body = line[at + len(_SPANS):-len(_TAIL)]
    if not body.startswith(_FIRST) or not body.endswith("}"):
        return None
    return line[:at], body[len(_FIRST):-1].split(_NEXT)
