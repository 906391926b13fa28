"""Cutting a span of another layout by markers: pptrace's files written before their attributes
were reordered, and pptrace spans of other writers (``pptrace.load.fast``'s slower cut).

``cut_usual`` finds the changing numbers of the layout pptrace's exporter wrote before in four
searches; ``cut`` finds each marker in turn, in the order pptrace writes them. Both give the
span's text without those numbers (the key of a template) and the numbers.

    key, values = cut_usual(chunk) or cut(chunk)   # values: bytes or None, in MARKERS order
"""

from __future__ import annotations

from collections.abc import Callable

from pptrace.model import schema

__all__ = ["DROPPED", "DUR", "END", "MARKERS", "MONO", "SEQ", "SPAN_ID", "START", "THREAD",
           "Fallback", "attr", "cut", "cut_usual", "walk"]


def attr(key: str) -> bytes:
    """The text that opens an integer attribute ``key``, as pptrace's writer puts it."""
    return ('{"key":"' + key + '","value":{"intValue":"').encode()


# What is cut out of a span's text, in the order pptrace's exporter writes them.
MARKERS = (
    b'"startTimeUnixNano":"',
    b'"endTimeUnixNano":"',
    attr(schema.SEQ),
    attr(schema.THREAD_ID),
    attr(schema.MONO_NS),
    attr(schema.DURATION_NS),
    attr(schema.DROPPED_BEFORE),
)
START, END, SEQ, THREAD, MONO, DUR, DROPPED = range(len(MARKERS))
SPAN_ID = b'"spanId":"'


class Fallback(Exception):
    """This line is not for the fast path."""



def walk(chunk: bytes, last: int, markers: tuple[bytes, ...], number: Callable[[bytes], bool]
         ) -> tuple[list[bytes], list[bytes | None]] | None:
    """From ``last`` on, each marker's string value cut out, in ``markers`` order: (the text
    between them, ending with the rest of the span; the values, None for a marker that is
    absent); None when a marker comes out of order (not pptrace's writer) or a value is not a
    ``number``."""
    find = chunk.find
    pieces: list[bytes] = []
    values: list[bytes | None] = []
    for marker in markers:
        p = find(marker, last)
        if p < 0:
            if find(marker) >= 0:
                return None
            values.append(None)
            continue
        s = p + len(marker)
        e = find(b'"', s)
        v = chunk[s:e]
        if not number(v):
            return None
        pieces.append(chunk[last:s])
        values.append(v)
        last = e
    pieces.append(chunk[last:])
    return pieces, values


def cut(chunk: bytes) -> tuple[bytes, list[bytes | None]]:
    """Split a span's text (after its leading traceId marker) into a key and the cut values.

    The markers must come in ``MARKERS`` order (as pptrace writes them); anything else falls
    back to the ordinary path. Values must be ASCII digits, ids ASCII letters and digits.
    """
    find = chunk.find
    last = find(b'"')
    tid = chunk[:last]
    if not tid.isalnum():
        raise Fallback
    p = find(SPAN_ID, last)
    if p < 0:
        raise Fallback
    s = p + len(SPAN_ID)
    e = find(b'"', s)
    sid = chunk[s:e]
    if not sid.isalnum():
        raise Fallback
    walked = walk(chunk, e, MARKERS, bytes.isdigit)  # (bytes: ASCII digits only)
    if walked is None:
        raise Fallback
    pieces, values = walked
    return b"G\0" + b"\0".join([chunk[last:s], *pieces]), values  # "\0" never occurs raw in JSON


_START_END = b'"startTimeUnixNano":"'
_END_AFTER = b'","endTimeUnixNano":"'
_SEQ_AT = attr(schema.SEQ)
_MONO_AT = attr(schema.MONO_NS)
_DUR_AFTER = b'"}},' + attr(schema.DURATION_NS)


def cut_usual(chunk: bytes) -> tuple[bytes, list[bytes | None]] | None:
    """``cut`` for the layout pptrace's exporter writes, in four searches; None otherwise.

    It cuts out the span id, the start and end times (adjacent), the sequence number, and the
    monotonic clock and duration (adjacent). The thread id and ``dropped_before`` stay in the
    key: they rarely change, and a change only costs one more template.
    """
    find = chunk.find
    tid_end = find(b'"')
    if not chunk.startswith(b'","spanId":"', tid_end):
        return None
    s0 = tid_end + 12
    e0 = find(b'"', s0)
    p = find(_START_END, e0)
    if p < 0:
        return None
    s1 = p + len(_START_END)
    e1 = find(b'"', s1)
    if not chunk.startswith(_END_AFTER, e1):
        return None
    s2 = e1 + len(_END_AFTER)
    e2 = find(b'"', s2)
    p = find(_SEQ_AT, e2)
    if p < 0:
        return None
    s3 = p + len(_SEQ_AT)
    e3 = find(b'"', s3)
    p = find(_MONO_AT, e3)
    if p < 0:
        return None
    s4 = p + len(_MONO_AT)
    e4 = find(b'"', s4)
    if not chunk.startswith(_DUR_AFTER, e4):
        return None
    s5 = e4 + len(_DUR_AFTER)
    e5 = find(b'"', s5)
    tid, sid = chunk[:tid_end], chunk[s0:e0]
    start, end, seq = chunk[s1:e1], chunk[s2:e2], chunk[s3:e3]
    mono, dur = chunk[s4:e4], chunk[s5:e5]
    if not (tid.isalnum() and sid.isalnum() and start.isdigit() and end.isdigit()
            and seq.isdigit() and mono.isdigit() and dur.isdigit()):
        return None
    key = b"\0".join((b"U", chunk[tid_end:s0], chunk[e0:s1], chunk[e1:s2], chunk[e2:s3],
                       chunk[e3:s4], chunk[e4:s5], chunk[e5:]))
    return key, [start, end, seq, None, mono, dur, None]
