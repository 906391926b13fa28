"""Which runs a trace holds, and whether several run ids are one job (issue 22).

Each node's ``pptrace run`` draws its own run id unless the nodes share one, so the traces of
one multi-node job can carry several. Processes of different run ids are one job when they
complement each other: every process knows its global rank and one world size, no global rank
appears in two runs, and the runs' times overlap. Otherwise each run is analysed apart, and
the report says why (never silently):

    join = join_runs(trace.processes)
    join.job_of[i]   # the job process i is analysed in ("a+b" when runs a and b were joined)
    join.reason      # one line: how the runs were joined or kept apart
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.analyze.rules import runs_of as named_runs
from pptrace.model.trace import ProcessTrace

__all__ = ["RunJoin", "join_runs"]


@dataclass(frozen=True, slots=True)
class RunJoin:
    """The run ids seen, the job each process is analysed in, and why."""

    runs: tuple[str, ...]  # every run id seen, sorted
    job_of: tuple[str, ...]  # per process (in ``Trace.processes`` order)
    joined: bool  # several runs, analysed as one job
    reason: str  # one line for the report ("" with a single run)


def _span(proc: ProcessTrace) -> tuple[int, int] | None:
    """(first, last) wall-clock time the process recorded, or None without events."""
    times = [ev.start_ns for ev in proc.events] + [m.wall_ns for m in proc.messages]
    return (min(times), max(times)) if times else None


def _why_apart(procs: Sequence[ProcessTrace], runs_of: Sequence[str]) -> str:
    """What keeps the runs apart ("" when they complement each other as one job)."""
    if any(p.rank.rank is None or p.rank.world_size is None for p in procs):
        return "a process does not know its global rank or world size"
    sizes = {p.rank.world_size for p in procs}
    if len(sizes) > 1:
        return f"their world sizes differ ({', '.join(map(str, sorted(s or 0 for s in sizes)))})"
    owner: dict[int, str] = {}
    for p, run in zip(procs, runs_of, strict=True):
        rank = p.rank.rank or 0
        if owner.setdefault(rank, run) != run:
            return f"global rank {rank} appears in runs {owner[rank]} and {run}"
    spans: dict[str, tuple[int, int]] = {}
    for p, run in zip(procs, runs_of, strict=True):
        found = _span(p)
        if found is not None:
            lo, hi = spans.get(run, found)
            spans[run] = (min(lo, found[0]), max(hi, found[1]))
    # Clocks of different hosts may differ by seconds: only runs a minute apart are apart.
    slack = 60_000_000_000
    if spans and max(lo for lo, _ in spans.values()) > min(hi for _, hi in spans.values()) + slack:
        return "their times do not overlap"
    return ""


def join_runs(procs: Sequence[ProcessTrace]) -> RunJoin:
    """Join the runs that complement each other into one job; keep the others apart."""
    # (A process that names no run joins the one the others name: rules.runs_of.)
    runs_of = named_runs(procs)
    runs = tuple(sorted(set(runs_of)))
    if len(runs) <= 1:
        return RunJoin(runs, tuple(runs_of), False, "")
    shown = ", ".join(r or "?" for r in runs)
    why = _why_apart(procs, runs_of)
    if why:
        return RunJoin(runs, tuple(runs_of), False,
                       f"runs {shown} analysed apart: {why} (export one PPTRACE_RUN_ID on every "
                       "node to join them)")
    job = "+".join(r or "?" for r in runs)
    return RunJoin(runs, (job,) * len(procs), True,
                   f"runs {shown} joined as one job: one world size, disjoint global ranks, "
                   "overlapping times")
