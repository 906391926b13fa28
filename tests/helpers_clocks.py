"""What other hosts would have written: a trace's processes renamed to hosts, one host's clock
skewed, and the checks that a receive never ends before its send began.

    trace = on_hosts(load_paths([dir]), lambda p: f"node{p.rank.pp_rank}")
    late = skewed(trace, {1}, 250 * MS)     # process 1's host 250 ms ahead
    backwards(result.trace, result.message_pairs)   # [] after alignment
    said(result) == said(base); first(result) == first(base)   # judged alike
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pptrace.model.findings import MessageId
from pptrace.model.messages import MessageOp
from pptrace.model.records import RankInfo
from pptrace.model.trace import ProcessTrace, Trace
from pptrace.report.groups import first_divergence

if TYPE_CHECKING:
    from pptrace.analyze.analyzer import Analysis

__all__ = ["MS", "arrows_back", "backwards", "first", "on_hosts", "said", "skewed"]

MS = 1_000_000


def _retrace(trace: Trace, procs: list[ProcessTrace]) -> Trace:
    return Trace(processes=tuple(procs), foreign=trace.foreign, problems=trace.problems,
                 sources=trace.sources)


def skewed(trace: Trace, processes: Collection[int], skew_ns: int) -> Trace:
    """The trace as it would read with those processes' wall clock ``skew_ns`` ahead: every
    wall-clock field of their events, messages and stats moves; the monotonic clock does not."""
    procs = list(trace.processes)
    for i in processes:
        p = procs[i]
        procs[i] = replace(
            p,
            events=tuple(ev._replace(start_ns=ev.start_ns + skew_ns) for ev in p.events),
            messages=tuple(m._replace(wall_ns=m.wall_ns + skew_ns) if m.wall_ns else m
                           for m in p.messages),
            stats=replace(p.stats, time_ns=p.stats.time_ns + skew_ns) if p.stats else None)
    return _retrace(trace, procs)


def on_hosts(trace: Trace, host: Callable[[ProcessTrace], str],
             pid: Callable[[ProcessTrace], int] | None = None) -> Trace:
    """The trace as if each process had run on host ``host(p)`` (with pid ``pid(p)``): its
    resource, its events' and its stats' rank say so; its instance id stays its own."""
    procs = []
    for p in trace.processes:
        rank: RankInfo = replace(p.rank, host=host(p),
                                 pid=pid(p) if pid is not None else p.rank.pid)
        procs.append(replace(
            p, rank=rank, events=tuple(ev._replace(rank=rank) for ev in p.events),
            stats=replace(p.stats, rank=rank) if p.stats else None))
    return _retrace(trace, procs)


def backwards(trace: Trace, pairs: Mapping[MessageId, MessageId]) -> list[str]:
    """Each paired receive that ends before its send began (an arrow back in time)."""
    ends = [{(m.op, m.seq): m for m in p.messages if m.phase == "end"} for p in trace.processes]
    out = []
    for send, recv in pairs.items():
        s = ends[send.process].get((MessageOp.SEND, send.seq))
        r = ends[recv.process].get((MessageOp.RECV, recv.seq))
        if s is not None and r is not None and r.wall_ns + max(r.duration_ns, 0) < s.wall_ns:
            out.append(f"send #{send.seq} of process {send.process} -> receive #{recv.seq} of "
                       f"process {recv.process}: ends {(s.wall_ns - r.wall_ns) / MS:.3f} ms "
                       "before the send began")
    return out


def arrows_back(doc: Mapping[str, Any], name: str) -> list[str]:
    """Each flow ``name`` of a Chrome trace document whose target slice ends before its source
    slice begins (µs, as drawn: rounded to the ns, so sums of two are compared to the ns)."""
    events = doc["traceEvents"]
    slices = {(e["pid"], e["tid"], e["ts"]): e["dur"] for e in events if e["ph"] == "X"}
    ends: dict[int, dict[str, tuple[int, int, float]]] = {}
    for e in events:
        if e["ph"] in ("s", "f") and e["name"] == name:
            ends.setdefault(e["id"], {})[e["ph"]] = (e["pid"], e["tid"], e["ts"])
    out = []
    for flow, pair in ends.items():
        src, dst = pair["s"], pair["f"]
        if round(dst[2] + slices[dst], 3) < src[2]:
            out.append(f"flow {flow}: ends at {dst[2] + slices[dst]} us, its source began at "
                       f"{src[2]} us")
    return out


def said(result: Analysis) -> list[tuple[Any, ...]]:
    """Every finding as the report names it, its seconds left out (they move within the
    alignment's uncertainty; "before" and "after", and "within the clocks' uncertainty", must
    not)."""
    return sorted((f.kind.value, f.channel, f.ranks, f.microbatch, f.cascade,
                   re.sub(r"\d+\.\d{3} s", "N s", f.message)) for f in result.findings)


def near_firsts(result: Analysis, within_ns: int) -> set[tuple[Any, ...] | None]:
    """The first divergence and each other one that could have been first in another run of the
    same fault: no consequence, as severe, its time within ``within_ns`` of the first's (two
    ranks that both end up waiting, a few milliseconds apart, take turns being first)."""
    index = first_divergence(result.findings)
    if index is None:
        return {None}
    top = result.findings[index]
    present = {id(f) for f in result.findings}
    return {(f.kind.value, f.channel, f.ranks, f.microbatch) for f in result.findings
            if (f.cause is None or id(f.cause) not in present) and f.severity is top.severity
            and abs(f.time_ns - top.time_ns) <= within_ns}


def first(result: Analysis) -> tuple[Any, ...] | None:
    """The first divergence (the report's first finding) as the report names it."""
    index = first_divergence(result.findings)
    if index is None:
        return None
    f = result.findings[index]
    return (f.kind.value, f.channel, f.ranks, f.microbatch)
