"""Rendering an analysis: a text report for people and a JSON document for CI.

The text report opens with what was read, then the first divergence (the earliest error), then
the findings grouped by kind (worst first, counted), then the input problems. The JSON document
follows ``JSON_SCHEMA`` (documented in the README); its ``schema`` field changes only when a
field is removed or changes meaning.

    text = render_text(trace, findings, fail_on=Severity.ERROR)
    doc = to_json(trace, findings, fail_on=Severity.ERROR)
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pptrace.model.findings import Finding, FindingKind, Severity
from pptrace.model.records import Direction
from pptrace.model.text import inert
from pptrace.model.trace import EventId, Trace

__all__ = [
    "JSON_SCHEMA",
    "event_ref_json",
    "exit_status",
    "finding_json",
    "render_text",
    "to_json",
]

#: The JSON report's schema id.
JSON_SCHEMA = "pptrace.analyze/1"

_SHOWN_PER_KIND = 10


def exit_status(findings: Sequence[Finding], fail_on: Severity) -> int:
    """1 when any finding is at or above ``fail_on``, else 0."""
    return 1 if any(f.severity >= fail_on for f in findings) else 0


def _time(ns: int | None) -> str:
    if not ns:
        return "-"
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%H:%M:%S.%f")[:-3]


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def _summary_line(trace: Trace) -> str:
    attaches = extracts = 0
    for proc in trace.processes:
        for ev in proc.events:
            if ev.direction is Direction.ATTACH:
                attaches += 1
            else:
                extracts += 1
    parts = [
        _plural(len(trace.processes), "process"),
        f"{trace.event_count} pptrace events ({attaches} attach, {extracts} extract)",
    ]
    if trace.foreign:
        parts.append(f"{_plural(len(trace.foreign), 'span')} from other tools set aside")
    if trace.problems:
        parts.append(f"{_plural(len(trace.problems), 'input problem')}")
    return ", ".join(parts)


def _finding_line(f: Finding) -> str:
    where = []
    if f.microbatch is not None:
        where.append(f"mb {f.microbatch}")
    if f.channel:
        where.append(f.channel)
    where.append(_time(f.time_ns))
    return f"  [{', '.join(where)}] {f.message}"


def render_text(trace: Trace, findings: Sequence[Finding], fail_on: Severity) -> str:
    """The human report."""
    lines = [f"pptrace analyze: {_summary_line(trace)}"]
    if trace.event_count == 0:
        lines.append("No pptrace events in this input: nothing to check (was pptrace active?).")
    counts = Counter(f.severity for f in findings)
    if not findings:
        lines.append("No findings: every attach and extract agrees across ranks.")
    else:
        total = sum(1 + f.cascade for f in findings)
        by_sev = ", ".join(
            _plural(counts[s], s.name.lower()) for s in sorted(counts, reverse=True)
        )
        lines.append(f"{_plural(len(findings), 'finding')} ({by_sev}; {total} occurrences).")
        first = next((f for f in findings if f.severity is Severity.ERROR), findings[0])
        lines += ["", f"First divergence ({first.severity.name.lower()}, {first.kind.value}):",
                  _finding_line(first)]
        groups: dict[FindingKind, list[Finding]] = {}
        for f in findings:
            groups.setdefault(f.kind, []).append(f)
        order = sorted(groups, key=lambda k: (-max(f.severity for f in groups[k]),
                                              min(f.time_ns or 0 for f in groups[k])))
        for kind in order:
            items = groups[kind]
            sev = max(f.severity for f in items).name.lower()
            n = sum(1 + f.cascade for f in items)
            lines += ["", f"{sev.upper()} {kind.value}: {kind.description} "
                      f"({_plural(len(items), 'finding')}, {_plural(n, 'occurrence')})"]
            lines += [_finding_line(f) for f in items[:_SHOWN_PER_KIND]]
            if len(items) > _SHOWN_PER_KIND:
                lines.append(f"  ... {len(items) - _SHOWN_PER_KIND} more (see --format json)")
    if trace.problems:
        lines += ["", f"Input problems (skipped and counted): {len(trace.problems)}"]
        lines += [f"  {p}" for p in trace.problems[:_SHOWN_PER_KIND]]
        if len(trace.problems) > _SHOWN_PER_KIND:
            lines.append(f"  ... {len(trace.problems) - _SHOWN_PER_KIND} more")
    failing = exit_status(findings, fail_on)
    verdict = "FAIL" if failing else "OK"
    lines += ["", f"{verdict}: {sum(counts[s] for s in counts if s >= fail_on)} findings at or "
              f"above {fail_on.name.lower()}."]
    # Names and messages come from trace files: a control character or a bidi override is shown
    # as an escape, so that it cannot act on the user's terminal.
    return "\n".join(map(inert, lines)) + "\n"


def event_ref_json(ref: EventId) -> dict[str, Any]:
    """An event reference as the JSON report writes it."""
    return {"process": ref.process, "direction": ref.direction.value, "seq": ref.seq}


def finding_json(f: Finding) -> dict[str, Any]:
    """One finding as the JSON report writes it (the viewer's export uses the same shape)."""
    return {
        "kind": f.kind.value,
        "severity": f.severity.name.lower(),
        "message": f.message,
        "ranks": list(f.ranks),
        "microbatch": f.microbatch,
        "time_ns": f.time_ns,
        "channel": f.channel,
        "cascade": f.cascade,
        "events": [event_ref_json(e) for e in f.events],
    }


def _process_json(index: int, trace: Trace) -> dict[str, Any]:
    proc = trace.processes[index]
    r = proc.rank
    attaches = sum(1 for e in proc.events if e.direction is Direction.ATTACH)
    return {
        "index": index,
        "rank": r.rank,
        "world_size": r.world_size,
        "pp_rank": r.pp_rank,
        "pp_size": r.pp_size,
        "tp_rank": r.tp_rank,
        "tp_size": r.tp_size,
        "host": r.host,
        "pid": r.pid,
        "attaches": attaches,
        "extracts": len(proc.events) - attaches,
        "dropped": proc.stats.dropped if proc.stats else None,
        "sources": list(proc.sources),
    }


def to_json(trace: Trace, findings: Sequence[Finding], fail_on: Severity) -> dict[str, Any]:
    """The JSON report (see ``JSON_SCHEMA`` and the README)."""
    by_sev = Counter(f.severity.name.lower() for f in findings)
    return {
        "schema": JSON_SCHEMA,
        "summary": {
            "processes": len(trace.processes),
            "events": trace.event_count,
            "foreign_spans": len(trace.foreign),
            "input_problems": len(trace.problems),
            "findings": len(findings),
            "occurrences": sum(1 + f.cascade for f in findings),
            "by_severity": {s.name.lower(): by_sev.get(s.name.lower(), 0) for s in Severity},
            "by_kind": dict(Counter(f.kind.value for f in findings)),
            "fail_on": fail_on.name.lower(),
            "failed": bool(exit_status(findings, fail_on)),
        },
        "sources": list(trace.sources),
        "processes": [_process_json(i, trace) for i in range(len(trace.processes))],
        "findings": [finding_json(f) for f in findings],
        "problems": [
            {"source": p.source, "line": p.line, "message": p.message} for p in trace.problems
        ],
    }
