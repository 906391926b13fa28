"""From raw findings to the findings ``analyze`` returns: one per distinct problem, causes first.

The analysis (``pptrace.analyze.analyzer``) records a ``Raw`` finding per occurrence. Here they
become ``Finding`` records:

- the first raw finding per (kind, channel, subject) is kept, and the rest are counted into it
  (``Finding.cascade``, "and 29 more like this through microbatch 31");
- an absence finding on a channel whose own trace lost events is lowered one severity step;
- a payload finding on a channel one of whose ends lacks events inside its window (dropped, a
  sequence gap, damaged data) is a warning at most: the pairing may have walked across the
  hole (docs/partial-traces.md);
- a finding that follows from another (a content mismatch at stage 0 on a microbatch whose
  last-stage TP ranks disagreed: stage 0 re-assembled a mix of their slices) names its cause
  (``Finding.cause``) and is placed right after it; every other finding is in time order, a
  cause before its effects at the same moment.

    link_peer_errors(raws)  # before counting: a hang names the error its peer raised
    findings = summarise(counted, lowered, misaligned)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pptrace.model.findings import Category, Finding, FindingKind, MessageId, Severity
from pptrace.model.records import Direction
from pptrace.model.trace import EventId

__all__ = ["Counted", "Raw", "Ref", "link_peer_errors", "summarise"]

# An EventId's fields: a trace with a fault on every event gives a raw finding per event, and
# only the findings kept (the first of each group) need real EventIds.
Ref = tuple[int, Direction, int]


@dataclass(frozen=True, slots=True)
class Raw:
    """One occurrence of a problem, as the analysis found it."""

    kind: FindingKind
    message: str
    ranks: tuple[int, ...]
    microbatch: int | None
    time_ns: int | None
    events: tuple[Ref, ...]
    channel: str
    subject: str = ""  # what separates findings of one kind on one channel (e.g. the name)
    severity: Severity | None = None
    cause: int | None = None  # the index of the raw finding this one follows from
    messages: tuple[MessageId, ...] = ()  # the message-layer records involved


# A raw finding, how many identical ones on the following pairs it stands for, the last of
# those pairs' microbatch, and its own microbatch (learnt from the pairing when it had none).
Counted = tuple[Raw, int, "int | None", "int | None"]

_GroupKey = tuple[FindingKind, str, str]


def _key(raw: Raw) -> _GroupKey:
    return (raw.kind, raw.channel, raw.subject)


#: Message findings about a peer (the second rank they name) that may have stopped: a wait for
#: it, a message it never received.
_PEER_STOPPED = frozenset({FindingKind.MSG_HANG, FindingKind.MSG_NEVER_RECEIVED})


def link_peer_errors(raws: list[Raw]) -> None:
    """A wait for a peer, or a message its receiver never took, follows from the engine error
    that peer raised: its engine stopped there, and neither sent nor received again (the
    ``duplicate`` fault's hang is listed under the attach that raised, not beside it)."""
    raised: dict[int, int] = {}  # global rank -> its earliest engine error's raw finding
    for index, raw in enumerate(raws):
        if raw.kind.category is Category.ENGINE_ERROR and raw.ranks and raw.cause is None:
            first = raised.get(raw.ranks[0])
            if first is None or (raw.time_ns or 0) < (raws[first].time_ns or 0):
                raised[raw.ranks[0]] = index
    if not raised:
        return
    for index, raw in enumerate(raws):
        if raw.kind in _PEER_STOPPED and raw.cause is None and len(raw.ranks) == 2:
            cause = raised.get(raw.ranks[1])
            if cause is not None:
                raws[index] = replace(raw, cause=cause)


def summarise(raws: Sequence[Counted], lowered: dict[str, str],
              misaligned: dict[str, str] | None = None) -> list[Finding]:
    """Keep the first finding per (kind, channel, subject); count the rest as its cascade; put
    each consequence after its cause."""
    ordered = sorted(range(len(raws)), key=lambda i: (raws[i][0].time_ns or 0, raws[i][3] or 0))
    groups: dict[_GroupKey, list[int]] = {}
    for i in ordered:
        groups.setdefault(_key(raws[i][0]), []).append(i)
    out: dict[_GroupKey, Finding] = {}
    for key, items in groups.items():
        out[key] = _finding(raws, items, lowered, misaligned or {})
    # At the same moment a cause goes before its effects (TP ranks disagreeing before the
    # content stage 0 re-assembled from them).
    roots = sorted(out, key=lambda k: _order(out[k]))
    caused: dict[_GroupKey, list[_GroupKey]] = {}
    for key, items in groups.items():
        cause = raws[items[0]][0].cause
        if cause is not None:
            by = _key(raws[cause][0])
            if by in out and by != key and raws[cause][0].cause is None:
                caused.setdefault(by, []).append(key)
    effects = {k for ks in caused.values() for k in ks}
    findings: list[Finding] = []
    for key in roots:
        if key in effects:
            continue
        root = out[key]
        findings.append(root)
        for effect in sorted(caused.get(key, ()), key=lambda k: _order(out[k])):
            f = out[effect]
            findings.append(replace(f, cause=root, message=f"{f.message} (follows from "
                                    f"{root.kind.value} on {root.channel})"))
    return findings


def _order(f: Finding) -> tuple[int, bool, int, str, str]:
    return (f.time_ns or 0, f.kind is not FindingKind.TP_DISAGREE, -f.severity, f.kind.value,
            f.channel)


def _finding(raws: Sequence[Counted], items: list[int], lowered: dict[str, str],
             misaligned: dict[str, str]) -> Finding:
    first, _, _, first_mb = raws[items[0]]
    kind, channel = first.kind, first.channel
    cascade = sum(1 + raws[i][1] for i in items) - 1
    severity = first.severity or kind.default_severity
    message = first.message
    if kind.category is Category.ABSENCE and channel in lowered:
        severity = Severity(max(Severity.INFO, severity - 10))
        message += f" ({lowered[channel]}: this may be a recording gap)"
    if kind.category is Category.PAYLOAD and channel in misaligned:
        severity = min(severity, Severity.WARNING)
        message += (f" ({misaligned[channel]}: the pair may have been matched across the hole, "
                    "this may be a recording gap)")
    if cascade:
        _, repeats, last_mb, mb = raws[items[-1]]
        if repeats:
            mb = last_mb
        until = f" through microbatch {mb}" if mb is not None else ""
        message += f" (and {cascade} more like this{until})"
    return Finding(
        kind=kind,
        severity=severity,
        message=message,
        ranks=first.ranks,
        microbatch=first_mb,
        time_ns=first.time_ns,
        events=tuple(EventId(*ref) for ref in first.events),
        channel=channel,
        cascade=cascade,
        messages=first.messages,
        more_events=tuple(EventId(*ref) for i in items[1:] for ref in raws[i][0].events),
        more_messages=tuple(m for i in items[1:] for m in raws[i][0].messages),
    )
