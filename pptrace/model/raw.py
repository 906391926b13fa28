"""The raw record's layout: the tuple the hot path appends, one name per position, defined once.

A raw record is a plain tuple (building one costs the engine's thread a single C call), so its
fields are read by position. The positions are named here and nowhere else: Python reads them as
``raw[SEQ]``, the native reader (``pptrace/record/native_meta.cpp``) builds the same tuple from
its own copy of these numbers, and ``pptrace.record.native`` refuses a library whose layout is
not ``RAW_FIELDS`` (its self-test compares them). Adding a field here therefore fails the native
self-test and ``tests/test_recorder_layout.py`` until every builder is changed with it.
This module imports the standard library only, so that a sink can read raws without torch.

    from pptrace.model import raw
    raw.make(direction=..., seq=..., ...)     # a cold path's record, by name
    record[raw.SEQ]                           # a field, by name

Fields, in order:

- ``direction``: ``Direction.ATTACH`` or ``Direction.EXTRACT``
- ``seq``: per process and direction, from 0
- ``wall_ns``, ``mono_ns``, ``duration_ns``: ``time.time_ns`` and ``time.monotonic_ns`` at the
  call, and its duration
- ``thread``: the calling ``threading.Thread`` (an int ident is accepted too)
- ``subject``: the type of the output (attach) or observer (extract)
- ``keys_before``, ``keys_after``: the dict's keys around the call (``()`` for a non-dict)
- ``items``: ``((key, meta), ...)`` where meta is ``(shape, dtype, device, contiguous)`` or a
  non-tensor's type; or the wrappers' flat list ``[key, shape, dtype, device, contiguous, key,
  ...]`` for plain tensors; or ``bytes`` packed by the native reader, without keys (an attach's
  are the keys after those before, an extract's the prefixed keys before)
- ``returned_none``: the call returned None
- ``error``: ``(qualified exception type, message)`` when the call raised, else None
- ``dropped``: events this process had dropped when this one was recorded
- ``fingerprints``: pending content fingerprints, one per item, or None
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DIRECTION",
    "DROPPED",
    "DURATION_NS",
    "ERROR",
    "FINGERPRINTS",
    "ITEMS",
    "KEYS_AFTER",
    "KEYS_BEFORE",
    "MONO_NS",
    "RAW_FIELDS",
    "RAW_LEN",
    "RETURNED_NONE",
    "SEQ",
    "SUBJECT",
    "THREAD",
    "WALL_NS",
    "Raw",
    "make",
]

#: A raw record (see the module docstring for its fields).
Raw = tuple[Any, ...]

#: The field names, in their positions.
RAW_FIELDS = (
    "direction",
    "seq",
    "wall_ns",
    "mono_ns",
    "duration_ns",
    "thread",
    "subject",
    "keys_before",
    "keys_after",
    "items",
    "returned_none",
    "error",
    "dropped",
    "fingerprints",
)
RAW_LEN = len(RAW_FIELDS)

DIRECTION = 0
SEQ = 1
WALL_NS = 2
MONO_NS = 3
DURATION_NS = 4
THREAD = 5
SUBJECT = 6
KEYS_BEFORE = 7
KEYS_AFTER = 8
ITEMS = 9
RETURNED_NONE = 10
ERROR = 11
DROPPED = 12
FINGERPRINTS = 13


def make(*, direction: Any, seq: int, wall_ns: int, mono_ns: int, duration_ns: int,
         thread: Any, subject: type, keys_before: tuple[Any, ...], keys_after: tuple[Any, ...],
         items: Any, returned_none: bool, error: tuple[str, str] | None, dropped: int,
         fingerprints: tuple[Any, ...] | None) -> Raw:
    """A raw record from its fields by name (for the cold paths; the hot ones build the tuple)."""
    return (direction, seq, wall_ns, mono_ns, duration_ns, thread, subject, keys_before,
            keys_after, items, returned_none, error, dropped, fingerprints)
