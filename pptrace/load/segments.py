"""A rotated trace: the numbered segments of one process, read as one process, in order.

With rotation on (``PPTRACE_ROTATE_MB``) a process writes ``pptrace-rank3-pid42.000001.otlp.
jsonl``, ``.000002.``, ... (each plain, ``.gz`` or ``.zst``) and deletes its oldest segments to
keep its budget (``PPTRACE_MAX_MB``), counting what they held in its stats span. Here the files
to read are put in order: the segments of one process (one directory, one
``pptrace-rank<R>-pid<P>`` stem) together, in segment order, where the first of them was named,
whatever order the paths came in; the same segment given twice (plain and compressed) is read
once. Leading segments that are gone were rotated away (the stats say how many events went with
them); a segment missing between two that are there is an input problem naming it. A segment
that disappears between listing and reading (``view --follow`` while the engine rotates) is
simply not there.

    files, twice = order_segments(files)        # twice: the repeated segments, skipped
    problems = missing_segments(files)          # InputProblem for every hole
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import NamedTuple

from pptrace.model.trace import InputProblem

__all__ = ["Segment", "is_segment", "missing_segments", "order_segments", "segment_of"]

_NAME = re.compile(r"(pptrace-rank(?:\d+|X)-pid\d+)(?:\.(\d{6,}))?(\.otlp\.jsonl(?:\.gz|\.zst)?)\Z")


class Segment(NamedTuple):
    """Where a file stands in its process's trace."""

    process: tuple[str, str]  # (directory, pptrace-rank<R>-pid<P>)
    number: int  # 0: the file of a process that was not rotated
    ending: str  # ".otlp.jsonl", ".otlp.jsonl.gz", ...


def segment_of(path: str) -> Segment | None:
    """The segment ``path`` names (None: not a pptrace trace file name)."""
    directory, name = os.path.split(path)
    m = _NAME.match(name)
    if m is None:
        return None
    return Segment((directory, m[1]), int(m[2]) if m[2] else 0, m[3])


def is_segment(path: str) -> bool:
    """Whether ``path`` is a numbered segment of a rotated trace (one that rotation deletes)."""
    seg = segment_of(path)
    return seg is not None and seg.number > 0


def order_segments(files: Sequence[str]) -> tuple[list[str], list[InputProblem]]:
    """(the files, each process's segments together in segment order; the segments given
    twice, left out as problems)."""
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    slots: list[str | tuple[str, str]] = []  # a file, or where a process's segments go
    for path in files:
        seg = segment_of(path)
        if seg is None:
            slots.append(path)
            continue
        if seg.process not in groups:
            groups[seg.process] = []
            slots.append(seg.process)
        groups[seg.process].append((seg.number, path))
    out: list[str] = []
    twice: list[InputProblem] = []
    for slot in slots:
        if isinstance(slot, str):
            out.append(slot)
            continue
        seen: dict[int, str] = {}
        for index, path in sorted(groups[slot], key=lambda item: item[0]):  # stable: as named
            if index in seen:
                twice.append(InputProblem(path, None, f"skipped: the same segment as "
                                                      f"{seen[index]} (given twice)"))
                continue
            seen[index] = path
            out.append(path)
    return out, twice


def missing_segments(files: Sequence[str]) -> list[InputProblem]:
    """A problem for every run of segments missing between two segments of one process."""
    kept: dict[tuple[str, str], list[Segment]] = {}
    for path in files:
        seg = segment_of(path)
        if seg is not None and seg.number > 0:
            kept.setdefault(seg.process, []).append(seg)
    problems = []
    for (directory, stem), segs in kept.items():
        segs.sort(key=lambda s: s.number)
        for before, after in zip(segs, segs[1:], strict=False):
            if after.number == before.number + 1:
                continue
            first, last = before.number + 1, after.number - 1
            name = os.path.join(directory, f"{stem}.{first:06d}{before.ending}")
            which = (f"segment {first:06d} is" if first == last
                     else f"segments {first:06d} to {last:06d} ({last - first + 1}) are")
            problems.append(InputProblem(
                name, None,
                f"missing: {which} not there, between {before.number:06d} and "
                f"{after.number:06d} of this process (rotation deletes only the oldest): the "
                "events they held are not in the trace"))
    return problems
