"""Which processes are the two ends of each attach -> extract channel, layouts included.

A channel joins the last PP stage, where attach runs, to stage 0, where extract runs. Two
layouts are recognised from what the traces show:

- **per TP rank** (SGLang's PP loops): every TP rank of the last stage attaches its own copy,
  and stage 0's TP rank j extracts what the last stage's TP rank j sent: channel
  ``pp0<-pp3/tp1``;
- **TP broadcast** (upstream's VPP path, disaggregated prefill): only attention-TP rank 0 of
  the last stage attaches, the dict reaches its other TP ranks by ``broadcast_tensor_dict``,
  and every stage-0 TP rank extracts. It shows as last-stage TP ranks that are traced, complete
  (final stats, nothing lost, no cut window) and never call attach, next to a TP rank that
  attaches; stage 0's TP rank j then pairs with that rank: channel ``pp0/tp1<-pp3/tp0``.

A last-stage TP rank that left no trace at all is no evidence of the broadcast layout: its
stage-0 partner's channel has no sender (``missing-rank``). Roles come from the PP layout when
it is known, else from what a process did.

A process that is both ends (it attaches and extracts: no PP layout, or pp_size 1, as in an
engine's own unit test of its transport) is a **round trip**: its own channel, its attaches
paired with its own extracts in call order (``rank0<-itself``), before any other process of its
TP rank is paired.

    channels = plan(members, several_runs=False)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptrace.analyze.rules import tp_of
from pptrace.analyze.window import Window, channel_start
from pptrace.model.records import RankInfo

__all__ = ["Channel", "Member", "Roles", "plan"]


@dataclass(frozen=True, slots=True)
class Member:
    """What the channel plan reads of one process."""

    index: int  # in ``Trace.processes``
    rank: RankInfo
    run: str  # its run id
    attaches: bool  # it has payload-carrying attaches that returned
    extracts: bool  # it has payload-carrying extracts
    attach_calls: bool  # it called attach at all
    complete: bool  # final stats, nothing lost: a call it has no record of did not happen
    window: Window


@dataclass(frozen=True, slots=True)
class Channel:
    """One channel: its name, its two ends (process indexes; None: that end left no trace) and
    the first microbatch both ends still cover (``pptrace.analyze.window``)."""

    name: str  # "pp0<-pp3/tp1"; "pp0/tp1<-pp3/tp0" when the dict reached tp 1 by broadcast
    sender: int | None
    receiver: int | None
    tp: int  # the receiver's TP rank (the sender's too, unless ``broadcast``)
    start: int = 0
    broadcast: bool = False  # the receiver's TP rank is not the sender's: a TP-broadcast layout


class Roles:
    """Which processes are the last stage and which are stage 0."""

    def __init__(self, members: Sequence[Member]) -> None:
        sizes = [m.rank.pp_size for m in members if m.rank.pp_size is not None]
        ranks = [m.rank.pp_rank for m in members if m.rank.pp_rank is not None]
        self.pp_size = max(sizes) if sizes else None
        self.max_pp = max(ranks) if ranks else None

    def is_last(self, m: Member) -> bool:
        """The process is on the last PP stage (where attach runs)."""
        r = m.rank
        if r.pp_rank is None:
            return m.attaches
        size = r.pp_size if r.pp_size is not None else self.pp_size
        if size is not None:
            return r.pp_rank == size - 1
        return r.pp_rank == self.max_pp and m.attaches

    def is_first(self, m: Member) -> bool:
        """The process is PP stage 0 (where extract runs)."""
        if m.rank.pp_rank is None:
            return m.extracts
        return m.rank.pp_rank == 0


def broadcast_source(lasts: Sequence[Member]) -> Member | None:
    """The one last-stage TP rank that attaches for all, when the layout is TP broadcast."""
    calling = [m for m in lasts if m.attach_calls]
    if len(calling) != 1 or not calling[0].attaches:
        return None
    source = calling[0]
    others = [m for m in lasts if tp_of(m.rank) != tp_of(source.rank)]
    # Evidence: a traced TP rank whose complete trace holds no attach call.
    if not any(m.complete and not m.window.cut for m in others):
        return None
    return source


def plan(members: Sequence[Member], several_runs: bool) -> list[Channel]:
    """Every channel of every run, in run and TP order (``several_runs``: names carry the
    run)."""
    roles = Roles(members)
    runs: dict[str, list[Member]] = {}
    for m in members:  # traces of several runs may be loaded together: pair within one run
        runs.setdefault(m.run, []).append(m)
    out: list[Channel] = []
    for run, procs in runs.items():
        prefix = f"{run or '?'}:" if several_runs else ""
        lasts = [m for m in procs if roles.is_last(m)]
        firsts = [m for m in procs if roles.is_first(m)]
        source = broadcast_source(lasts)
        for tp in sorted({tp_of(m.rank) for m in lasts + firsts}):
            # A last stage whose window kept no attach is a sender all the same.
            senders = [m for m in lasts if tp_of(m.rank) == tp and (m.attaches or m.window.cut)]
            receivers = [m for m in firsts if tp_of(m.rank) == tp]
            if not senders and source is not None:  # the dict reached tp by broadcast
                senders, broadcast = [source], True
            else:
                broadcast = False
            if not senders and not any(m.extracts for m in receivers):
                continue
            both = [m for m in senders if any(m is r for r in receivers)]
            for m in both:  # a round trip: the process pairs with itself
                out.append(_channel(prefix, m, m, tp, False))
            senders = [m for m in senders if not any(m is b for b in both)]
            receivers = [m for m in receivers if not any(m is b for b in both)]
            for k in range(max(len(senders), len(receivers))):
                s = senders[k] if k < len(senders) else None
                r = receivers[k] if k < len(receivers) else None
                out.append(_channel(prefix, s, r, tp, broadcast))
    return out


def _channel(prefix: str, s: Member | None, r: Member | None, tp: int,
             broadcast: bool) -> Channel:
    last = s.rank.pp_rank if s is not None and s.rank.pp_rank is not None else "?"
    if s is not None and s is r:  # "pp0<-pp?/tp0" said nothing of a process paired with itself
        who = f"rank{s.rank.rank}" if s.rank.rank is not None else f"pid{s.rank.pid}"
        name = f"{prefix}{who}<-itself"
    elif broadcast and s is not None:
        name = f"{prefix}pp0/tp{tp}<-pp{last}/tp{tp_of(s.rank)}"
    else:
        name = f"{prefix}pp0<-pp{last}/tp{tp}"
    start = channel_start(s.window, r.window) if s is not None and r is not None else 0
    return Channel(name, s.index if s else None, r.index if r else None, tp, start, broadcast)
