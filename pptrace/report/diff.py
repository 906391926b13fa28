"""Comparing two runs (a good and a bad commit; pp=2 against pp=4): what changed in the protocol.

A run is reduced to a ``RunProfile``: its layout, the auxiliary names per direction with their
dtypes and shape patterns (a dimension that varies within the run, like the batch, shows as
``*``), the payload bytes per step (mean and standard deviation), the message layer's kinds
with the keys their sends carried and each key's dtypes, shape pattern and slicing, and the
engine errors and findings per kind. ``diff`` lists every compared row with a ``changed`` flag,
set by the rule ``CHANGE_RULE`` states: a difference in what the protocol carries always counts;
a shift of the mean bytes counts only when a different batch mix cannot explain it. Pure: no I/O.

    rows = diff(profile(trace_a, analyze(trace_a)), profile(trace_b, analyze(trace_b)))
    print(render_text(rows, "good/", "bad/"))
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pptrace.analyze.analyzer import classify_error
from pptrace.model.findings import Finding
from pptrace.model.messages import MessageOp
from pptrace.model.records import Direction, Event
from pptrace.model.text import clip, clip_name, inert, json_safe, plural
from pptrace.model.trace import Trace

__all__ = [
    "BYTES_SHIFT",
    "CHANGE_RULE",
    "DiffRow",
    "RunProfile",
    "bytes_changed",
    "diff",
    "profile",
    "render_text",
    "to_json",
]

#: The JSON diff's schema id.
JSON_SCHEMA = "pptrace.diff/1"

#: The relative shift of the mean payload bytes per step below which it is never a change.
BYTES_SHIFT = 0.10

#: What ``changed`` means, in one sentence (the text footer, ``--help`` and the JSON say it).
CHANGE_RULE = (
    "a row is marked changed when the layout, the names, or a name's dtypes or shape pattern "
    "differ, when a message kind's keys or a key's dtypes, shape pattern or slicing differ "
    "(where both runs recorded the message layer), or when an engine error or finding kind "
    "occurs in one run only; the mean payload "
    "bytes per step are marked only when the two means differ by more than "
    f"{BYTES_SHIFT:.0%} of the smaller and by more than their pooled per-step standard "
    "deviation (a different batch mix moves the mean within that spread)"
)


@dataclass(frozen=True, slots=True)
class NameProfile:
    """One auxiliary name as one direction carried it through a run."""

    dtypes: tuple[str, ...]
    shape: str  # "[*, 5]": dims that vary within the run are "*"
    count: int


@dataclass(frozen=True)
class RunProfile:
    """What a run's protocol looked like, reduced for comparison."""

    layout: str
    processes: int
    payload_calls: dict[str, int]  # direction -> calls carrying auxiliary tensors
    names: dict[str, dict[str, NameProfile]]  # direction -> name -> profile (first-seen order)
    bytes_per_step: dict[str, float]  # direction -> mean payload bytes per payload call
    bytes_spread: dict[str, float]  # direction -> their standard deviation (population)
    errors: Counter[str] = field(default_factory=Counter)  # engine error kind -> calls
    findings: Counter[str] = field(default_factory=Counter)  # finding kind -> occurrences
    #: message kind -> the sends of that kind, the keys of their dicts (first-seen order) and
    #: per described value its profile ("/tp" after the shape where it travelled as TP slices);
    #: empty when the run recorded no message layer
    messages: dict[str, tuple[int, tuple[str, ...], dict[str, NameProfile]]] = field(
        default_factory=dict)


@dataclass(frozen=True, slots=True)
class DiffRow:
    """One compared quantity: its section, subject, both values as text, and whether it changed."""

    section: str
    subject: str
    a: str
    b: str
    changed: bool


def _shape_pattern(shapes: set[tuple[int, ...]]) -> str:
    ndims = {len(s) for s in shapes}
    if len(ndims) != 1:
        return " | ".join(sorted({f"{len(s)}-d" for s in shapes}))
    (ndim,) = ndims
    dims = []
    for i in range(ndim):
        values = {s[i] for s in shapes}
        dims.append(str(values.pop()) if len(values) == 1 else "*")
    return f"[{', '.join(dims)}]"


def _layout(trace: Trace) -> str:
    pp = {p.rank.pp_size for p in trace.processes if p.rank.pp_size is not None}
    tp = {p.rank.tp_size for p in trace.processes if p.rank.tp_size is not None}
    return f"pp {_set(pp)}, tp {_set(tp)}"


def _set(values: set[int]) -> str:
    return "/".join(map(str, sorted(values))) if values else "?"


def profile(trace: Trace, findings: Sequence[Finding]) -> RunProfile:
    """Reduce a run (and its findings) to what ``diff`` compares."""
    calls: dict[str, int] = {}
    names: dict[str, dict[str, NameProfile]] = {}
    bytes_: dict[str, float] = {}
    spread: dict[str, float] = {}
    errors: Counter[str] = Counter()
    for direction in Direction:
        shapes: dict[str, set[tuple[int, ...]]] = {}
        dtypes: dict[str, list[str]] = {}
        counts: Counter[str] = Counter()
        total = squares = n = 0  # ints: exact however many steps
        for proc in trace.processes:
            for ev in proc.events:
                if ev.direction is not direction:
                    continue
                if not ev.ok:
                    errors[classify_error(ev).value] += 1
                if not _carries(ev):
                    continue
                n += 1
                step = 0
                for t in ev.tensors:
                    step += t.nbytes
                    shapes.setdefault(t.name, set()).add(t.shape)
                    seen = dtypes.setdefault(t.name, [])
                    if t.dtype not in seen:
                        seen.append(t.dtype)
                    counts[t.name] += 1
                total += step
                squares += step * step
        calls[direction.value] = n
        bytes_[direction.value] = total / n if n else 0.0
        spread[direction.value] = math.sqrt(n * squares - total * total) / n if n else 0.0
        names[direction.value] = {
            name: NameProfile(tuple(dtypes[name]), _shape_pattern(shapes[name]), counts[name])
            for name in dtypes
        }
    found: Counter[str] = Counter()
    for f in findings:
        found[f.kind.value] += 1 + f.cascade
    return RunProfile(_layout(trace), len(trace.processes), calls, names, bytes_, spread, errors,
                      found, _messages(trace))


def _messages(trace: Trace) -> dict[str, tuple[int, tuple[str, ...], dict[str, NameProfile]]]:
    """Per message kind, the sends that returned and what their dicts held, key by key."""
    sends: Counter[str] = Counter()
    shapes: dict[str, dict[str, set[tuple[int, ...]]]] = {}
    dtypes: dict[str, dict[str, list[str]]] = {}
    sliced: dict[str, dict[str, bool]] = {}
    tensor: dict[str, dict[str, bool]] = {}
    counts: dict[str, Counter[str]] = {}
    keys: dict[str, dict[str, None]] = {}
    for proc in trace.processes:
        for m in proc.messages:
            if m.op is not MessageOp.SEND or not m.ok:
                continue
            kind = m.kind or "(untyped)"
            sends[kind] += 1
            keys.setdefault(kind, {}).update(dict.fromkeys(m.keys))
            for t in m.tensors:
                shapes.setdefault(kind, {}).setdefault(t.key, set()).add(t.shape)
                seen = dtypes.setdefault(kind, {}).setdefault(t.key, [])
                if t.dtype not in seen:
                    seen.append(t.dtype)
                by_key = sliced.setdefault(kind, {})
                by_key[t.key] = by_key.get(t.key, False) or t.sliced
                tensor.setdefault(kind, {})[t.key] = t.is_tensor
                counts.setdefault(kind, Counter())[t.key] += 1

    def pattern(kind: str, key: str) -> str:
        if not tensor[kind][key]:
            return "(not a tensor)"
        return _shape_pattern(shapes[kind][key]) + ("/tp" if sliced[kind][key] else "")

    return {kind: (n, tuple(keys.get(kind, {})),
                   {key: NameProfile(tuple(dtypes[kind][key]), pattern(kind, key),
                                     counts[kind][key]) for key in dtypes.get(kind, {})})
            for kind, n in sends.items()}


def _carries(ev: Event) -> bool:
    return bool(ev.tensors) and (ev.ok or ev.direction is Direction.EXTRACT)


def _names(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "-"


def bytes_changed(mean_a: float, sd_a: float, mean_b: float, sd_b: float) -> bool:
    """Whether a shift of the mean payload bytes per step is a change (see ``CHANGE_RULE``)."""
    shift = abs(mean_b - mean_a)  # relative to the smaller mean, so A/B and B/A agree
    return (shift > BYTES_SHIFT * min(mean_a, mean_b)
            and shift > math.sqrt((sd_a * sd_a + sd_b * sd_b) / 2))


def _in_one(a: int, b: int) -> bool:
    return (a == 0) != (b == 0)


def diff(a: RunProfile, b: RunProfile) -> list[DiffRow]:
    """Every compared row, in report order."""
    rows = [
        DiffRow("run", "layout", a.layout, b.layout, a.layout != b.layout),
        DiffRow("run", "processes", str(a.processes), str(b.processes),
                a.processes != b.processes),
    ]
    for d in (Direction.ATTACH.value, Direction.EXTRACT.value):
        rows.append(DiffRow("run", f"{d} calls with auxiliary tensors",
                            str(a.payload_calls[d]), str(b.payload_calls[d]), False))
        na, nb = a.names[d], b.names[d]
        rows.append(DiffRow("names", f"{d}ed" if d == "attach" else "extracted",
                            _names(list(na)), _names(list(nb)), set(na) != set(nb)))
        for name in list(na) + [n for n in nb if n not in na]:
            pa, pb = na.get(name), nb.get(name)
            ta = f"{'/'.join(pa.dtypes)} {pa.shape}" if pa else "absent"
            tb = f"{'/'.join(pb.dtypes)} {pb.shape}" if pb else "absent"
            rows.append(DiffRow(f"per name ({d})", name, ta, tb, ta != tb))
        ba, bb = a.bytes_per_step[d], b.bytes_per_step[d]
        sa, sb = a.bytes_spread[d], b.bytes_spread[d]
        ratio = f", x{bb / ba:.2f}" if ba and bb else ""
        rows.append(DiffRow("bytes per step", d, f"{ba:.1f} (sd {sa:.1f})",
                            f"{bb:.1f} (sd {sb:.1f}{ratio})", bytes_changed(ba, sa, bb, sb)))
    rows += _message_rows(a, b)
    # A count that differs while both runs have the kind is the runs' lengths, not a change.
    for kind in sorted(set(a.errors) | set(b.errors)):
        rows.append(DiffRow("engine errors", kind, str(a.errors[kind]), str(b.errors[kind]),
                            _in_one(a.errors[kind], b.errors[kind])))
    for kind in sorted(set(a.findings) | set(b.findings)):
        rows.append(DiffRow("findings", kind, str(a.findings[kind]), str(b.findings[kind]),
                            _in_one(a.findings[kind], b.findings[kind])))
    order = {section: i for i, section in enumerate(dict.fromkeys(
        ["run", "names", "per name (attach)", "per name (extract)", "bytes per step",
         "messages", *(r.section for r in rows if r.section.startswith("per key ("))]))}
    rows.sort(key=lambda r: order.get(r.section, len(order)))  # stable: keeps order within
    return rows


def _keys(own: Sequence[str], other: Sequence[str]) -> str:
    """``7 keys``, and the ones the other run's sends lack: ``7 keys (+residual)`` (each key's
    own row follows)."""
    extra = [k for k in own if k not in other]
    return plural(len(own), "key") + (f" (+{', +'.join(extra)})" if extra else "")


def _message_rows(a: RunProfile, b: RunProfile) -> list[DiffRow]:
    """The message layer's rows: per kind its sends and keys, per key its dtype and shape.
    A run that recorded no messages says so, and nothing is marked against it."""
    if not a.messages and not b.messages:
        return []
    both = bool(a.messages) and bool(b.messages)

    def told(p: RunProfile, text: str) -> str:
        return text if p.messages else "not recorded"

    rows = []
    for kind in list(a.messages) + [k for k in b.messages if k not in a.messages]:
        na, keys_a, ka = a.messages.get(kind, (0, (), {}))
        nb, keys_b, kb = b.messages.get(kind, (0, (), {}))
        rows.append(DiffRow("messages", f"{kind} sends", told(a, str(na)), told(b, str(nb)),
                            both and _in_one(na, nb)))
        rows.append(DiffRow("messages", f"{kind} keys", told(a, _keys(keys_a, keys_b)),
                            told(b, _keys(keys_b, keys_a)), both and set(keys_a) != set(keys_b)))
        for key in list(ka) + [k for k in kb if k not in ka]:
            pa, pb = ka.get(key), kb.get(key)
            ta = told(a, f"{'/'.join(pa.dtypes)} {pa.shape}" if pa else "absent")
            tb = told(b, f"{'/'.join(pb.dtypes)} {pb.shape}" if pb else "absent")
            rows.append(DiffRow(f"per key ({kind})", key, ta, tb, both and ta != tb))
    return rows


#: The footer's line length.
_FOOTER_WIDTH = 88
#: The most characters of a path a column header shows (the first line names it whole).
_HEADER_LIMIT = 40


def _header(label: str) -> str:
    """A path shortened from the left (its end tells runs apart): ``...traces-bad/``."""
    return label if len(label) <= _HEADER_LIMIT else "..." + label[-(_HEADER_LIMIT - 3):]


def _shown(row: DiffRow, escape: Callable[[str], str]) -> DiffRow:
    """``row`` as a report shows it: its subject clipped as a name, its values as a message."""
    return replace(row, subject=escape(clip_name(row.subject)), a=escape(clip(row.a)),
                   b=escape(clip(row.b)))


def render_text(rows: Sequence[DiffRow], label_a: str, label_b: str, *,
                columns: int | None = None) -> str:
    """A readable table under A and B column headers, a mark on each changed row, and the
    rule that marked them. ``columns``: the terminal's width; where the table is wider, each
    row is written as three short lines (subject, then A, then B) rather than wrapped by the
    terminal (None: the table, however wide: a pipe or a log)."""
    # Names come from trace files: show their control characters as escapes (as analyze does),
    # and clip them (a 300,000-character name padded every row to its width: 11.7 MB).
    rows = [_shown(r, inert) for r in rows]
    label_a, label_b = inert(clip_name(label_a)), inert(clip_name(label_b))
    head_a, head_b = f"A: {_header(label_a)}", f"B: {_header(label_b)}"
    width = max([len(r.subject) for r in rows] + [8]) + 2
    col = max([len(r.a) for r in rows] + [len(head_a), 8]) + 2
    lines = [f"pptrace diff: A = {label_a}, B = {label_b}", "",
             f"  {'':<{width}}{head_a:<{col}}{head_b}"]
    section = ""
    for r in rows:
        if r.section != section:
            section = r.section
            lines += ["", f"{section}:"]
        mark = "  << changed" if r.changed else ""
        lines.append(f"  {r.subject:<{width}}{r.a:<{col}}{r.b}{mark}")
    if columns is not None and max(map(len, lines)) > columns:
        lines = _stacked(rows, label_a, label_b, columns)
    changed = sum(r.changed for r in rows)
    lines += ["", f"{plural(changed, 'difference')}.",
              *textwrap.wrap(f"Rule: {CHANGE_RULE}.", min(_FOOTER_WIDTH, columns or 1000))]
    return "\n".join(lines) + "\n"


def _stacked(rows: Sequence[DiffRow], label_a: str, label_b: str, columns: int) -> list[str]:
    """The table for a narrow terminal: each row's subject on its line (marked when changed),
    A and B under it, each wrapped between words."""
    def side(tag: str, text: str) -> list[str]:
        return textwrap.wrap(f"{tag}: {text}", columns, initial_indent="      ",
                             subsequent_indent="         ", break_long_words=False,
                             break_on_hyphens=False) or [f"      {tag}:"]

    lines = textwrap.wrap(f"pptrace diff: A = {label_a}, B = {label_b}", columns,
                          subsequent_indent="    ", break_long_words=False,
                          break_on_hyphens=False)
    section = ""
    for r in rows:
        if r.section != section:
            section = r.section
            lines += ["", f"{section}:"]
        lines.append(f"  {r.subject}" + ("  << changed" if r.changed else ""))
        lines += side("A", r.a) + side("B", r.b)
    return lines


def to_json(rows: Sequence[DiffRow], label_a: str, label_b: str) -> dict[str, Any]:
    """The JSON diff: ``{"schema", "a", "b", "differences", "rule", "rows": [...]}``."""
    rows = [_shown(r, str) for r in rows]
    return json_safe({  # (a lone surrogate written as its escape: see ``model.text``)
        "schema": JSON_SCHEMA,
        "a": clip_name(label_a),
        "b": clip_name(label_b),
        "differences": sum(r.changed for r in rows),
        "rule": CHANGE_RULE,
        "rows": [
            {"section": r.section, "subject": r.subject, "a": r.a, "b": r.b,
             "changed": r.changed}
            for r in rows
        ],
    })
