"""Content fingerprints cut out of a span's text, so fingerprinted spans share templates.

With fingerprinting on, every call's values carry hashes of their content, which differ from one
call to the next: left in a fast path's template key (``pptrace.load.fast``,
``pptrace.load.fast_messages``), each span would be a shape of its own, parsed the slow way. The
fingerprints array is cut out of the text like the numbers are, and put back into the template's
tensors on a hit.

    text, fps = cut(text, MARKER, JOINED)    # fps: None when there is none to cut (or not safely)
    tensors = put_back(template.tensors, fps)

Why cutting is sound: the array is accepted only when it is exactly a list of
``{"stringValue":"..."}`` objects whose strings hold no character JSON escapes (or, in schema
version 3, one such string of them joined, ``pptrace.model.joined``), and only when the span has
no other value under the key, so the text left is, outside the cut strings, the text of the
span the template was learned from.
"""

from __future__ import annotations

import re
from typing import Any

from pptrace.model.joined import SEPARATOR
from pptrace.model.records import TensorMeta

__all__ = ["cut", "joined_marker", "marker", "put_back"]

_VALUE = rb'\{"stringValue":"([0-9A-Za-z:+/=_.-]{0,200})"\}'
# The characters of _VALUE, and the separator.
_JOINED = re.compile(rb"[0-9A-Za-z:+/=_." + re.escape(SEPARATOR.encode()) + rb"-]*")
_ARRAY = re.compile(rb"(?:" + _VALUE + rb",)*" + _VALUE)
_ONE = re.compile(_VALUE)
_END = b"]}}}"
_new = tuple.__new__
_AT = TensorMeta._fields.index("fingerprint")
_EITHER: dict[tuple[bytes, bytes], bytes] = {}  # (array marker, joined marker) -> their start


def marker(key: str) -> bytes:
    """The text that opens a string array attribute ``key``, as pptrace's writer puts it."""
    return ('{"key":"' + key + '","value":{"arrayValue":{"values":[').encode()


def joined_marker(key: str) -> bytes:
    """The text that opens a version 3 span's joined string attribute ``key``."""
    return ('{"key":"' + key + '","value":{"stringValue":"').encode()


def cut(text: bytes, mark: bytes, joined: bytes | None = None
        ) -> tuple[bytes, list[str] | None]:
    """(``text`` without the strings of the array ``mark`` opens, or of the joined string
    ``joined`` opens, those strings); the text as it is and None when it has neither, or one
    that is not plainly a list of strings, or more than one value under the key."""
    if joined is not None:
        # Both open with the attribute's key: one pass over a span without any (most spans)
        # rather than one per marker.
        either = _EITHER.get((mark, joined))
        if either is None:
            n = next((i for i, (x, y) in enumerate(zip(mark, joined, strict=False)) if x != y),
                     min(len(mark), len(joined)))
            either = _EITHER[(mark, joined)] = mark[:n]
        if text.find(either) < 0:
            return text, None
    at = text.find(mark)
    if at < 0:
        return (text, None) if joined is None else _cut_joined(text, joined)
    if joined is not None and text.find(joined) >= 0:
        return text, None
    s = at + len(mark)
    e = text.find(_END, s)
    if e < 0 or _ARRAY.fullmatch(text, s, e) is None or text.find(mark, e) >= 0:
        return text, None
    fps = _ONE.findall(text, s, e)
    return b"%b%d%b" % (text[:s], len(fps), text[e:]), [f.decode() for f in fps]


def _cut_joined(text: bytes, joined: bytes) -> tuple[bytes, list[str] | None]:
    at = text.find(joined)
    if at < 0:
        return text, None
    s = at + len(joined)
    e = text.find(b'"', s)
    if e < 0 or _JOINED.fullmatch(text, s, e) is None or text.find(joined, e) >= 0:
        return text, None
    fps = text[s:e].decode().split(SEPARATOR)
    return b"%b%d%b" % (text[:s], len(fps), text[e:]), fps


def put_back(tensors: tuple[TensorMeta, ...], fps: list[str],
             shared: dict[Any, Any] | None = None) -> tuple[TensorMeta, ...]:
    """``tensors`` with the cut fingerprints (an empty one: none, as the decoders read it);
    ``shared``: a loader's tuples by value, so that a send and its receive (an attach and its
    extract), equal to the last fingerprint, hold one tuple (a million calls' own tensors are
    most of a fingerprinted trace's memory)."""
    out = tuple([_new(TensorMeta, (*t[:_AT], f or None, *t[_AT + 1:]))
                 for t, f in zip(tensors, fps, strict=True)])
    return out if shared is None else shared.setdefault(out, out)

