"""Write what the viewer shows (the visible findings and the selected pair) as JSON or Markdown.

Pure rendering to a string; the app picks the path and writes the file.

    text = render(ExportDoc(findings, pair, filter_text), "markdown")
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pptrace.model.findings import Finding
from pptrace.model.records import TensorMeta
from pptrace.model.text import inert
from pptrace.model.trace import EventId
from pptrace.report.text import event_ref_json, finding_json

from .compare import FIELDS, Comparison, PairView, Side, field_text

__all__ = ["ExportDoc", "Format", "render"]

Format = Literal["json", "markdown"]


@dataclass(frozen=True, slots=True)
class ExportDoc:
    """What is on screen: the findings the panel lists, the pair shown, the active filter."""

    findings: Sequence[Finding]
    pair: PairView | None
    filter: str = ""
    sources: Sequence[str] = ()


def _ref(ref: EventId | None) -> dict[str, Any] | None:
    return None if ref is None else event_ref_json(ref)


def _tensor(m: TensorMeta | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "name": m.name,
        "key": m.key,
        "shape": list(m.shape),
        "dtype": m.dtype,
        "device": m.device,
        "nbytes": m.nbytes,
        "is_tensor": m.is_tensor,
        "fingerprint": m.fingerprint,
    }


def _side(side: Side) -> dict[str, Any] | None:
    ev = side.event
    if ev is None:
        return None
    return {
        "role": side.role,
        "event": _ref(side.ref),
        "rank": ev.rank.label(),
        "start_ns": ev.start_ns,
        "subject_type": ev.subject_type,
        "keys_before": list(ev.keys_before),
        "keys_after": list(ev.keys_after),
        "error_type": ev.error_type,
        "error_message": ev.error_message,
    }


def _comparison(c: Comparison) -> dict[str, Any]:
    return {
        "title": c.title,
        "left": _side(c.left),
        "right": _side(c.right),
        "tensors": [
            {
                "name": line.name,
                "left": _tensor(line.left),
                "right": _tensor(line.right),
                "differs": sorted(f.value for f in line.differs),
            }
            for line in c.verdict.names
        ],
        "order_differs": c.verdict.order_differs,
    }


def _pair(p: PairView) -> dict[str, Any]:
    return {
        "comparisons": [_comparison(c) for c in p.comparisons],
        "findings": [finding_json(f) for f in p.findings],
    }


def to_json(doc: ExportDoc) -> str:
    """The document as indented JSON."""
    body = {
        "filter": doc.filter,
        "sources": list(doc.sources),
        "findings": [finding_json(f) for f in doc.findings],
        "pair": _pair(doc.pair) if doc.pair is not None else None,
    }
    return json.dumps(body, indent=2) + "\n"


def _md(text: object) -> str:
    """Make trace text inert in a Markdown table cell."""
    out = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    # No raw control or bidi characters: the file may be cat'ed to a terminal or rendered.
    return inert(out)


def to_markdown(doc: ExportDoc) -> str:
    """The document as Markdown: a findings table, then the pair side by side."""
    lines = ["# pptrace view export", ""]
    if doc.sources:
        lines += ["Sources: " + ", ".join(_md(s) for s in doc.sources), ""]
    if doc.filter:
        lines += [f"Filter: {_md(doc.filter)}", ""]
    lines += [f"## Findings ({len(doc.findings)})", ""]
    if doc.findings:
        lines += ["| kind | severity | ranks | microbatch | message |", "|---|---|---|---|---|"]
        for f in doc.findings:
            ranks = ",".join(map(str, f.ranks))
            mb = "" if f.microbatch is None else str(f.microbatch)
            lines.append(
                f"| {f.kind.value} | {f.severity.name.lower()} | {ranks} | {mb} "
                f"| {_md(f.message)} |"
            )
        lines.append("")
    if doc.pair is not None:
        for c in doc.pair.comparisons:
            lines += _md_comparison(c)
    return "\n".join(lines)


def _md_comparison(c: Comparison) -> list[str]:
    lines = [f"## {_md(c.title)}", ""]
    for side in (c.left, c.right):
        ev = side.event
        if ev is None:
            lines.append(f"- {side.role}: none")
            continue
        lines.append(f"- {side.role}: {_md(ev.rank.label())} #{ev.seq}")
        lines.append(f"  - keys before: {_md(', '.join(ev.keys_before))}")
        lines.append(f"  - keys after: {_md(', '.join(ev.keys_after))}")
        if ev.error_type is not None:
            lines.append(f"  - error: {_md(ev.error_type)}: {_md(ev.error_message or '')}")
    left, right = c.left.role, c.right.role
    lines += ["", "| " + " | ".join(f"{left} {f.value}" for f in FIELDS)
              + " | " + " | ".join(f"{right} {f.value}" for f in FIELDS) + " | differs |"]
    lines.append("|" + "---|" * (2 * len(FIELDS) + 1))
    for line in c.verdict.names:
        a = [_md(field_text(line.left, f)) for f in FIELDS]
        b = [_md(field_text(line.right, f)) for f in FIELDS]
        differs = ", ".join(sorted(f.value for f in line.differs))
        lines.append("| " + " | ".join(a + b + [differs]) + " |")
    lines.append("")
    return lines


def render(doc: ExportDoc, fmt: Format) -> str:
    """Render in the chosen format."""
    return to_json(doc) if fmt == "json" else to_markdown(doc)
