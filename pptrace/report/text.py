"""Rendering an analysis: a text report for people and a JSON document for CI.

The text report opens with what was read, then the first divergence (the earliest error), then
the findings grouped by kind (worst first, counted), then the input problems. The JSON document
follows ``JSON_SCHEMA`` (documented in the README); its ``schema`` field changes only when a
field is removed or changes meaning. Both show at most ``PER_KIND`` findings of a kind (and as
many consequences under each): a million distinct findings make neither a report of gigabytes;
the counts stay exact, and the JSON's ``truncated`` says what was left out.

    text = render_text(trace, findings, fail_on=Severity.ERROR)
    doc = to_json(trace, findings, fail_on=Severity.ERROR, per_kind=None)  # None: every one
"""

from __future__ import annotations

import datetime as _dt
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pptrace.analyze.aligned import Clocks, Unit
from pptrace.analyze.rules import run_of
from pptrace.analyze.runs import join_runs
from pptrace.model.findings import Finding, MessageId, Severity
from pptrace.model.messages import MessageOp
from pptrace.model.records import Direction
from pptrace.model.text import clip, clip_name, inert, json_safe, plural
from pptrace.model.trace import EventId, Trace
from pptrace.report.groups import (
    consequences,
    first_divergence,
    kind_groups,
    near_first,
    occurrences,
)

__all__ = [
    "JSON_SCHEMA",
    "PER_KIND",
    "event_ref_json",
    "exit_status",
    "finding_json",
    "message_ref_json",
    "render_text",
    "shown",
    "to_json",
]

#: The JSON report's schema id (2: ``findings`` holds at most ``PER_KIND`` of a kind unless
#: asked for all, and ``truncated`` says what was left out).
JSON_SCHEMA = "pptrace.analyze/2"

#: The most findings of one kind a report shows by default (and consequences under each).
PER_KIND = 10
#: The most input problems the text report lists.
_SHOWN_PROBLEMS = 10


def exit_status(findings: Sequence[Finding], fail_on: Severity) -> int:
    """1 when any finding is at or above ``fail_on``, else 0."""
    return 1 if any(f.severity >= fail_on for f in findings) else 0


def _time(ns: int | None) -> str:
    if not ns:
        return "-"
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%H:%M:%S.%f")[:-3]


def _summary_line(trace: Trace) -> str:
    attaches = extracts = 0
    for proc in trace.processes:
        for ev in proc.events:
            if ev.direction is Direction.ATTACH:
                attaches += 1
            else:
                extracts += 1
    parts = [
        plural(len(trace.processes), "process") + _runs_seen(trace),
        f"{plural(trace.event_count, 'pptrace event')} ({attaches} attach, {extracts} extract)",
    ]
    sends, recvs, failed, waiting = _message_counts(trace)
    if sends or recvs or failed or waiting:
        line = f"{plural(sends, 'message')} sent, {recvs} received"
        # A receive that failed at its timeout, or never returned, received nothing: counted
        # apart, so that "received" never exceeds what was sent on a healthy channel.
        if failed:
            line += f", {plural(failed, 'receive')} failed"
        if waiting:
            line += f", {plural(waiting, 'receive')} still waiting"
        parts.append(line)
    if trace.foreign:
        parts.append(f"{plural(len(trace.foreign), 'span')} from other tools set aside")
    if trace.problems:
        parts.append(plural(len(trace.problems), "input problem"))
    return ", ".join(parts)


def _runs_seen(trace: Trace) -> str:
    """`` from 2 runs (run a1b2: 2 processes, run c3d4: 2)``: traces of several runs in one
    input are judged run by run (their channel names start with the run), and the report says
    so rather than count "4 processes" for a 2-rank script run twice. Empty for one run."""
    runs = Counter(run_of(proc) for proc in trace.processes)
    if len(runs) < 2:
        return ""
    seen = ", ".join(f"run {inert(clip_name(run)) if run else '?'}: {plural(n, 'process')}"
                     for run, n in runs.items())
    return f" from {len(runs)} runs ({seen})"


def _message_counts(trace: Trace) -> tuple[int, int, int, int]:
    """Sends, receives that returned a message, receives that failed, and receives that began
    and never ended, across every process."""
    sends = recvs = failed = waiting = 0
    for proc in trace.processes:
        begun: set[tuple[bool, int]] = set()  # a broadcast is numbered apart
        for m in proc.messages:
            if m.op is MessageOp.SEND:
                sends += 1
            elif m.phase == "begin":
                begun.add((m.broadcast, m.seq))
            else:
                begun.discard((m.broadcast, m.seq))
                if m.ok:
                    recvs += 1
                else:
                    failed += 1
        waiting += len(begun)
    return sends, recvs, failed, waiting


def _finding_line(f: Finding, indent: str = "  ", head: str = "") -> str:
    where = []
    if f.microbatch is not None:
        where.append(f"mb {f.microbatch}")
    if f.channel:
        where.append(clip_name(f.channel))  # (it holds the run id when there are several runs)
    where.append(_time(f.time_ns))
    # One finding prints at most MESSAGE_LIMIT characters of its message, saying what it cut.
    return f"{indent}{head}[{', '.join(where)}] {clip(f.message)}"


def shown(findings: Sequence[Finding], per_kind: int | None) -> set[int]:
    """The indexes a report shows: the first ``per_kind`` of each kind's group, and the first
    ``per_kind`` consequences of each (``None``: every finding)."""
    if per_kind is None:
        return set(range(len(findings)))
    effects = consequences(findings)
    out: set[int] = set()
    for group in kind_groups(findings):
        for i in group.findings[:per_kind]:
            out.add(i)
            out.update(effects.get(i, ())[:per_kind])
    return out


def _more(n: int, what: str) -> str:
    return f"... {n} more{what} (--max-per-kind 0 lists every one)"


def _group_lines(findings: Sequence[Finding], per_kind: int | None) -> list[str]:
    lines: list[str] = []
    effects = consequences(findings)
    limit = len(findings) if per_kind is None else per_kind
    for group in kind_groups(findings):
        kind = group.kind
        lines += ["", f"{group.severity.name} {kind.value}: {kind.description} "
                  f"({plural(len(group.findings), 'finding')}, "
                  f"{plural(group.occurrences, 'occurrence')})"]
        for i in group.findings[:limit]:
            lines.append(_finding_line(findings[i]))
            followers = effects.get(i, ())
            for j in followers[:limit]:
                f = findings[j]
                lines.append(_finding_line(f, "    ", f"then {f.kind.value} "))
            if len(followers) > limit:
                lines.append("    " + _more(len(followers) - limit, " that follow from it"))
        if len(group.findings) > limit:
            lines.append("  " + _more(len(group.findings) - limit, ""))
    return lines


def channel_legend(findings: Sequence[Finding]) -> list[str]:
    """What the channel names the findings use mean, one line per form in use (an example of
    each): ``pp0<-pp1/tp0`` on its own says little to a newcomer."""
    forms = (
        ("<-itself", "{c}: a process's attaches paired with its own extracts (a round trip)"),
        ("<-pp", "{c}: attaches on the right-hand rank, extracted on the left-hand stage"),
        ("->", "{c}: PP messages the left-hand rank sent to the right-hand one"),
        ("~", "{c}: the payloads the TP ranks of one stage attached, compared"),
        ("?", "pp?: a rank whose PP stage the trace does not say"),
    )
    channels = [f.channel for f in findings if f.channel]
    lines = []
    for mark, text in forms:
        example = next((c for c in channels if mark in c), None)
        if example is not None:
            lines.append("  " + text.format(c=example))
    return ["", "Channels (where a finding sits; tpN: the TP rank):", *lines] if lines else []


def _fit(line: str, width: int) -> list[str]:
    """One report line in ``width`` columns, broken between words (never inside a name, a
    fingerprint or a path), continued 4 columns further in."""
    if len(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line, width, initial_indent="", subsequent_indent=lead + "    ",
                         break_long_words=False, break_on_hyphens=False,
                         drop_whitespace=True) or [line]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:+.3f} ms"


def _clock(u: Unit) -> str:
    """``host b +250.012 ms (±0.041 ms)``, or what bounds it when it was not applied."""
    o = u.offset
    if o.certain:
        return f"{u.name} {_ms(o.offset_ns)} (±{(o.high_ns - o.low_ns) / 2e6:.3f} ms)"
    if o.low_ns > -float("inf") or o.high_ns < float("inf"):
        return f"{u.name} {_ms(o.offset_ns)} (bounded one way: moved only as causality needs)"
    return f"{u.name} not aligned (no pair bounds its clock)"


def clock_note(clocks: Clocks | None) -> str | None:
    """The line saying which clock offsets the times and decisions shown rest on (None when
    there is one clock)."""
    if clocks is None or len(clocks.units) < 2:
        return None
    ref, others = clocks.units[0].name, clocks.units[1:]
    if not clocks.pairs:
        return (f"clocks not aligned: no message or attach/extract pair joins the clocks of "
                f"{ref} and {', '.join(u.name for u in others[:8])}: times are each one's own")
    if not clocks.consistent:
        return (f"clocks not aligned: the {plural(clocks.pairs, clocks.source)} contradict each "
                "other, also process by process (a clock stepped or drifted within the "
                "trace?): times are each host's own")
    per = " per process (one host name, several clocks)" if clocks.by == "process" else ""
    shown = [_clock(u) for u in others]
    return (f"clock offsets applied{per}, from {plural(clocks.pairs, clocks.source)}, against "
            f"{ref}: {'; '.join(shown[:8])}{' ...' if len(shown) > 8 else ''}; times are on "
            f"{ref}'s clock")


def clocks_json(clocks: Clocks | None) -> dict[str, Any] | None:
    """The clock offsets applied, and what bounds each clock (``null`` where unbounded)."""
    if clocks is None:
        return None

    def bound(ns: float) -> int | None:
        return int(ns) if abs(ns) != float("inf") else None

    return {
        "applied": clocks.applied, "consistent": clocks.consistent, "by": clocks.by,
        "source": clocks.source, "pairs": clocks.pairs, "offsets_ns": list(clocks.offsets),
        "clocks": [{"name": u.name, "processes": list(u.processes),
                    "offset_ns": u.offset.offset_ns, "low_ns": bound(u.offset.low_ns),
                    "high_ns": bound(u.offset.high_ns)} for u in clocks.units],
    }


def _ranks(f: Finding) -> str:
    """``rank 3``, ``ranks 0, 3``."""
    return ("rank " if len(f.ranks) == 1 else "ranks ") + ", ".join(map(str, f.ranks))


def render_text(trace: Trace, findings: Sequence[Finding], fail_on: Severity, *,
                per_kind: int | None = PER_KIND, width: int | None = None,
                clocks: Clocks | None = None) -> str:
    """The human report (``per_kind``: the most findings of a kind it lists; None: all);
    ``width``: break lines between words to fit it (None: a line per finding, for grep and
    logs; the CLI passes the terminal's width when it writes to one); ``clocks``: the offsets
    the analysis applied (``Analysis.clocks``), said when there are several clocks."""
    lines = [f"pptrace analyze: {_summary_line(trace)}"]
    runs = join_runs(trace.processes)
    if runs.reason:
        lines.append(inert(clip(runs.reason)))
    note = clock_note(clocks)
    if note is not None:
        lines.append(note)
    if trace.event_count == 0 and not any(p.messages for p in trace.processes):
        lines.append("No pptrace events in this input: nothing to check (was pptrace active?).")
    counts = Counter(f.severity for f in findings)
    first = first_divergence(findings)
    if first is None:
        lines.append("No findings: every attach and extract agrees with its other end"
                     + (", and every message with its receive." if any(
                         p.messages for p in trace.processes) else "."))
    else:
        total = sum(occurrences(f) for f in findings)
        by_sev = ", ".join(
            plural(counts[s], s.name.lower()) for s in sorted(counts, reverse=True)
        )
        lines.append(f"{plural(len(findings), 'finding')} ({by_sev}; "
                     f"{plural(total, 'occurrence')}).")
        f = findings[first]
        tie = near_first(findings, first, clocks.uncertainty_ns) if clocks else None
        unsure = "" if tie is None else (
            f"; within the clocks' uncertainty (±{tie[1] / 1e6:.3f} ms) of the "
            f"{findings[tie[0]].kind.value} on {_ranks(findings[tie[0]])}: which came first "
            "is not known")
        lines += ["", f"First divergence ({f.severity.name.lower()}, {f.kind.value}{unsure}):",
                  _finding_line(f)]
        lines += _group_lines(findings, per_kind)
    if trace.problems:
        lines += ["", f"Input problems (skipped and counted): {len(trace.problems)}"]
        lines += [f"  {clip(str(p))}" for p in trace.problems[:_SHOWN_PROBLEMS]]
        if len(trace.problems) > _SHOWN_PROBLEMS:
            lines.append(f"  ... {len(trace.problems) - _SHOWN_PROBLEMS} more")
    lines += channel_legend(findings)
    failing = exit_status(findings, fail_on)
    verdict = "FAIL" if failing else "OK"
    at_or_above = sum(counts[s] for s in counts if s >= fail_on)
    lines += ["", f"{verdict}: {plural(at_or_above, 'finding')} at or above "
              f"{fail_on.name.lower()}."]
    # Names and messages come from trace files: a control character or a bidi override is shown
    # as an escape, so that it cannot act on the user's terminal.
    lines = list(map(inert, lines))
    if width is not None:
        lines = [part for line in lines for part in _fit(line, width)]
    return "\n".join(lines) + "\n"


#: Most references to later occurrences one finding lists in the JSON report, each list.
MORE_REFS = 1000


def event_ref_json(ref: EventId) -> dict[str, Any]:
    """An event reference as the JSON report writes it."""
    return {"process": ref.process, "direction": ref.direction.value, "seq": ref.seq}


def message_ref_json(ref: MessageId) -> dict[str, Any]:
    """A message-layer record reference as the JSON report writes it (``broadcast``: true for
    a broadcast's send or receive, numbered apart from point-to-point ones)."""
    out: dict[str, Any] = {"process": ref.process, "op": ref.op.value, "seq": ref.seq}
    if ref.broadcast:
        out["broadcast"] = True
    return out


def finding_json(f: Finding, cause: int | None = None) -> dict[str, Any]:
    """One finding as the JSON report writes it (the viewer's export uses the same shape);
    ``cause``: the index of ``f.cause`` in the report's findings."""
    return {
        "kind": f.kind.value,
        "severity": f.severity.name.lower(),
        "message": clip(f.message),
        "ranks": list(f.ranks),
        "microbatch": f.microbatch,
        "time_ns": f.time_ns,
        "channel": None if f.channel is None else clip_name(f.channel),
        "cascade": f.cascade,
        "events": [event_ref_json(e) for e in f.events],
        "messages": [message_ref_json(m) for m in f.messages],
        # Where the later occurrences summarised into this one are (capped: their count is
        # ``cascade``; an identical difference repeated on the following pairs has no record).
        "more_events": [event_ref_json(e) for e in f.more_events[:MORE_REFS]],
        "more_messages": [message_ref_json(m) for m in f.more_messages[:MORE_REFS]],
        "cause": cause,
    }


def _findings_json(findings: Sequence[Finding], kept: set[int]) -> list[dict[str, Any]]:
    order = [i for i in range(len(findings)) if i in kept]  # analyze's order: causes first
    position = {id(findings[i]): k for k, i in enumerate(order)}
    out = []
    for i in order:
        f = findings[i]
        out.append(finding_json(f, position.get(id(f.cause)) if f.cause is not None else None))
    return out


def _truncated(findings: Sequence[Finding], kept: set[int],
               per_kind: int | None) -> dict[str, Any] | None:
    """What the JSON's ``findings`` left out, or None when it holds every finding."""
    cut = [f for i, f in enumerate(findings) if i not in kept]
    if not cut:
        return None
    return {"per_kind": per_kind, "findings": len(cut),
            "occurrences": sum(1 + f.cascade for f in cut),
            "by_kind": dict(Counter(f.kind.value for f in cut))}


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
        "host": clip_name(r.host),
        "pid": r.pid,
        "attaches": attaches,
        "extracts": len(proc.events) - attaches,
        "sends": sum(1 for m in proc.messages if m.op is MessageOp.SEND),
        "receives": sum(1 for m in proc.messages if m.op is MessageOp.RECV and m.phase == "end"),
        "dropped": proc.stats.dropped if proc.stats else None,
        "sources": list(proc.sources),
    }


def to_json(trace: Trace, findings: Sequence[Finding], fail_on: Severity, *,
            per_kind: int | None = PER_KIND, clocks: Clocks | None = None) -> dict[str, Any]:
    """The JSON report (see ``JSON_SCHEMA`` and the README); ``per_kind``: the most findings
    of a kind it holds (None: all); ``clocks``: the offsets the analysis applied. The summary
    counts every finding."""
    by_sev = Counter(f.severity.name.lower() for f in findings)
    kept = shown(findings, per_kind)
    # Text from trace files is clipped as the text report clips it, and a lone surrogate (which
    # no strict JSON reader takes) is written as its escape.
    return json_safe({
        "schema": JSON_SCHEMA,
        "summary": {
            "processes": len(trace.processes),
            "events": trace.event_count,
            "messages": sum(_message_counts(trace)[:3]),  # sends and ended receives
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
        "findings": _findings_json(findings, kept),
        "truncated": _truncated(findings, kept, per_kind),
        "problems": [
            {"source": p.source, "line": p.line, "message": clip(p.message)}
            for p in trace.problems
        ],
        "clocks": clocks_json(clocks),
    })
