"""Healthy traces and the holes a real trace can have, for the partial-trace tests.

    src = healthy_trace_dir()              # one real gloo run of the sample pipeline a session
    holed = punch(load_paths([str(src)]), random.Random(seed))

``punch`` does to a loaded trace what a real run can do to its files: records dropped (counted in
the stats, or only seen as a sequence gap), a process killed at some moment (what it recorded
after is gone, and its stats are not final), a window cut at the start (rotated away, counted).
"""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from pathlib import Path

from pptrace.model.messages import MessageOp
from pptrace.model.records import Direction, RecorderStats
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["healthy_trace_dir", "punch"]


@functools.cache
def healthy_trace_dir() -> Path:
    """A healthy 3-rank run of the sample pipeline (real gloo processes), once a session."""
    from tests.helpers_core import scratch
    from tests.helpers_samples import run_sample

    out = Path(scratch("pptrace-partial-"))
    result, _ = run_sample(str(out), ranks=3, steps=12)
    assert result.ok, result
    return out


def _stats(p: ProcessTrace, **counts: int) -> RecorderStats:
    base = p.stats or RecorderStats(rank=p.rank, time_ns=0, final=True)
    return replace(base, **{k: getattr(base, k) + v for k, v in counts.items()})


def _drop(p: ProcessTrace, rng: random.Random, counted: bool) -> ProcessTrace:
    """Lose a few records at random, counted by the recorder or not."""
    msgs, events = list(p.messages), list(p.events)
    lost_msgs = rng.sample(range(len(msgs)), k=min(len(msgs), rng.randint(1, 3)))
    lost_events = rng.sample(range(len(events)), k=min(len(events), rng.randint(0, 2)))
    msgs = [m for i, m in enumerate(msgs) if i not in set(lost_msgs)]
    events = [e for i, e in enumerate(events) if i not in set(lost_events)]
    stats = p.stats
    if counted:
        stats = _stats(p, messages_dropped=len(lost_msgs), dropped=len(lost_events))
    return replace(p, messages=tuple(msgs), events=tuple(events), stats=stats)


def _kill(p: ProcessTrace, rng: random.Random) -> ProcessTrace:
    """The process stops at some moment of its trace: nothing after it, no final stats."""
    times = [m.wall_ns for m in p.messages] + [e.start_ns for e in p.events]
    if not times:
        return p
    stop = rng.choice(sorted(times))
    stats = None if rng.random() < 0.5 or p.stats is None else replace(p.stats, final=False)
    return replace(p, messages=tuple(m for m in p.messages if m.wall_ns <= stop),
                   events=tuple(e for e in p.events if e.start_ns <= stop), stats=stats)


def _cut(p: ProcessTrace, rng: random.Random) -> ProcessTrace:
    """The oldest records rotated away, as the writer counts them (events by number, and the
    segments: a stage with messages only counts no records)."""
    first = {d: rng.randint(0, 3) for d in Direction}
    kept = tuple(e for e in p.events if e.seq >= first[e.direction])
    first_msg = {op: rng.randint(0, 6) for op in MessageOp}
    msgs = tuple(m for m in p.messages if m.seq >= first_msg[m.op])
    if len(kept) == len(p.events) and len(msgs) == len(p.messages):
        return p
    return replace(p, events=kept, messages=msgs,
                   stats=_stats(p, rotated=len(p.events) - len(kept), rotated_segments=1))


def punch(trace: Trace, rng: random.Random) -> Trace:
    """The same run with holes in some of its processes' traces."""
    procs = []
    for p in trace.processes:
        roll = rng.random()
        if roll < 0.25:
            p = _drop(p, rng, counted=True)
        elif roll < 0.45:
            p = _drop(p, rng, counted=False)
        elif roll < 0.6:
            p = _kill(p, rng)
        elif roll < 0.7:
            p = _cut(p, rng)
        procs.append(p)
    return Trace(processes=tuple(procs), foreign=trace.foreign, problems=trace.problems,
                 sources=trace.sources)
