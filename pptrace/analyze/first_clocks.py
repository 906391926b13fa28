"""The clocks, estimated before the analysis from the pairs found by order alone (issue 22).

Sends pair with receives, and attaches with extracts, by order, never by time: the pairs can be
found first, cheaply (nothing compared, no finding made), and each gives a causal constraint
from which ``pptrace.analyze.aligned`` estimates every clock's offset; the analysis then runs
once, on the trace with its times moved. The message pairs are ``check_messages``' own
(``messages.message_pairs``); a trace without any is aligned on its attach/extract pairs.

Within one host name the attach/extract pairing takes a hint from time (an extract that began
before an attach is not its partner), which holds only if the host's processes share a clock:
containers that report one hostname on two machines do not. So here a channel within one host
is paired both ways, and by order alone where that leaves fewer calls unpaired; its pairs then
contradict one clock, the host's processes get a clock each, and the analysis pairs them by
order (``Clocks.shared``). Pure: no I/O.

    clocks = message_clocks(trace, runs, holes)          # None: no send reached a receive
    clocks = channel_clocks(trace, [(sender, receiver, attaches, extracts), ...])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pptrace.analyze.aligned import Clocks, clocks_from
from pptrace.analyze.clocks import Before
from pptrace.analyze.holes import Holes
from pptrace.analyze.messages import Paired, message_pairs
from pptrace.analyze.pairing import Alignment, align
from pptrace.model.records import Event
from pptrace.model.trace import Trace

__all__ = ["ChannelCalls", "channel_clocks", "message_clocks"]

#: One attach/extract channel: (sending process, receiving process, its attaches, its extracts),
#: inside the window both ends cover.
ChannelCalls = tuple[int, int, Sequence[Event], Sequence[Event]]


def message_clocks(trace: Trace, runs: Sequence[str], holes: Sequence[Holes],
                   paired: Paired | None = None) -> Clocks | None:
    """The clocks from the message pairs (a send begins before its receive ends); None when
    no send reached a receive. Each channel's alignment goes into ``paired``."""
    matches = message_pairs(trace, runs, holes, paired)
    if not matches:
        return None
    # Only the tightest constraint between two processes counts: kept as a weight (a
    # constraint object per pair costs more than the pairing).
    # The matches come channel by channel: the two processes change only between channels.
    tightest: dict[tuple[int, int], int] = {}
    ends: tuple[object, object] = (None, None)
    key, best = (-1, -1), None
    for (s, m), (r, e) in matches:
        if s is not ends[0] or r is not ends[1]:
            if best is not None:
                tightest[key] = best
            ends, key = (s, r), (s.index, r.index)
            best = tightest.get(key)
        d = e.duration_ns  # (-1 for a begin: it ends where it starts; no max() per pair)
        weight = e.wall_ns + (d if d > 0 else 0) - m.wall_ns
        if best is None or weight < best:
            best = weight
    if best is not None:
        tightest[key] = best
    return clocks_from(trace, [Before(a, 0, b, w) for (a, b), w in tightest.items()],
                       "message pair", len(matches))


def _unpaired(found: Alignment) -> int:
    return len(found.orphans) + len(found.unmatched)


def channel_clocks(trace: Trace, channels: Iterable[ChannelCalls]) -> Clocks:
    """The clocks from the attach/extract pairs (an attach begins before its extract ends)."""
    out = []
    hosts = [p.rank.host for p in trace.processes]
    for sender, receiver, attaches, extracts in channels:
        found = align(attaches, extracts)
        if hosts[sender] and hosts[sender] == hosts[receiver] and found.unmatched:
            plain = align(attaches, extracts, shared=False)  # in case the host has two clocks
            if _unpaired(plain) < _unpaired(found):
                found = plain
        for i, j in found.pairs():
            a, e = attaches[i], extracts[j]
            out.append(Before(sender, a.start_ns, receiver, e.start_ns + max(e.duration_ns, 0)))
    return clocks_from(trace, out, "attach/extract pair")
