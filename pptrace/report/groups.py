"""How findings are ordered for people: by kind, worst first, each consequence under its cause.

The text report and the viewer's findings list both read this, so they list one trace's
findings in one order. ``analyze`` returns findings in time order with each consequence right
after its cause (``Finding.cause``); here the causes and the other findings are grouped by kind
(worst severity first, then the earliest), and the consequences are left out of the groups:
they are shown under the finding they follow from.

    for group in kind_groups(findings):
        group.kind, group.severity, group.occurrences
        for i in group.findings:
            findings[i], [findings[j] for j in consequences(findings).get(i, ())]

Indexes refer to the list given (the viewer addresses findings by index). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pptrace.model.findings import Finding, FindingKind, Severity

__all__ = ["KindGroup", "consequences", "first_divergence", "kind_groups", "near_first",
           "occurrences"]


@dataclass(frozen=True, slots=True)
class KindGroup:
    """The findings of one kind that are not a consequence of another finding."""

    kind: FindingKind
    severity: Severity  # the worst among them
    findings: tuple[int, ...]  # their indexes, earliest first
    occurrences: int  # the findings and the occurrences summarised into them


def occurrences(f: Finding) -> int:
    """The occurrences one finding stands for (itself and its cascade)."""
    return 1 + f.cascade


def consequences(findings: Sequence[Finding]) -> dict[int, tuple[int, ...]]:
    """For each finding that is a cause, the indexes of the findings that follow from it."""
    position = {id(f): i for i, f in enumerate(findings)}
    out: dict[int, list[int]] = {}
    for i, f in enumerate(findings):
        if f.cause is not None and id(f.cause) in position:
            out.setdefault(position[id(f.cause)], []).append(i)
    return {i: tuple(js) for i, js in out.items()}


def _is_root(f: Finding, present: set[int]) -> bool:
    return f.cause is None or id(f.cause) not in present


def kind_groups(findings: Sequence[Finding]) -> tuple[KindGroup, ...]:
    """The findings that are no consequence, by kind: worst first, then the earliest."""
    present = {id(f) for f in findings}
    members: dict[FindingKind, list[int]] = {}
    for i, f in enumerate(findings):
        if _is_root(f, present):
            members.setdefault(f.kind, []).append(i)
    groups = []
    for kind, ids in members.items():
        ids.sort(key=lambda i: (findings[i].time_ns or 0, i))
        groups.append(KindGroup(kind, max(findings[i].severity for i in ids), tuple(ids),
                                sum(occurrences(findings[i]) for i in ids)))
    groups.sort(key=lambda g: (-g.severity, findings[g.findings[0]].time_ns or 0,
                               g.findings[0]))
    return tuple(groups)


def first_divergence(findings: Sequence[Finding]) -> int | None:
    """The index of the finding a reader should see first: the earliest error that is no
    consequence (else the earliest finding that is none)."""
    present = {id(f) for f in findings}
    roots = [i for i, f in enumerate(findings) if _is_root(f, present)]
    if not roots:
        return None
    return next((i for i in roots if findings[i].severity is Severity.ERROR), roots[0])


def _process(f: Finding) -> int | None:
    """The process whose clock stamped ``f.time_ns``: its first record's (send and attach
    first)."""
    if f.messages:
        return f.messages[0].process
    return f.events[0].process if f.events else None


def near_first(findings: Sequence[Finding], first: int,
               uncertainty: Callable[[int, int], float]) -> tuple[int, float] | None:
    """Another finding that could be the first divergence but for the clocks: no consequence,
    as severe, on another clock, its time within the two clocks' uncertainty (``uncertainty(a,
    b)``, ns; ``Clocks.uncertainty_ns``) of the first's, so which came first is not known;
    with that uncertainty. None when there is none (also where a clock is not aligned: the
    report's clock line says so)."""
    f, present = findings[first], {id(g) for g in findings}
    a = _process(f)
    if a is None or f.time_ns is None:
        return None
    for i, g in enumerate(findings):
        b = _process(g)
        if (i == first or b is None or g.time_ns is None or g.severity is not f.severity
                or not _is_root(g, present)):
            continue
        bound = uncertainty(a, b)
        if 0 < bound < float("inf") and abs(g.time_ns - f.time_ns) <= bound:
            return i, bound
    return None
