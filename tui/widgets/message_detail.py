"""The selected message's detail: it and the message at its other end, side by side.

Two columns, the earlier message on the left (a send, then its receive; a receive, then the
send that forwarded it): the kind sent against the kind expected and the kind that arrived, the
stash, the all-gather group, and per key its shape, dtype, bytes, whole or TP slice and
fingerprint, every difference on the error colour and a key one side lacks said as missing.
A receive that waits says who waits for what from whom, since when, how it ended, and what that
peer last sent it; then the findings that name the message, as the analyzer wrote them. Every
text from the trace goes through ``literal`` (``pptrace.model.text.inert``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from pptrace.analyze.waits import numbered
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import PREFIX, RankInfo, TensorMeta

from ..literal import literal
from ..message_index import MessageIndex, Selected, place
from ..widgets.message_timeline import since
from ..widgets.pair_detail import clock

__all__ = ["MISSING", "MessageDetail", "Palette", "describe_tensor", "render_detail"]


@dataclass(frozen=True, slots=True)
class Palette:
    """The detail's styles (the widget resolves them from its component classes)."""

    diff: Style | str = "bold red"
    missing: Style | str = "bold red reverse"
    dim: Style | str = "dim"
    head: Style | str = "bold"
    wait: Style | str = "bold yellow"


MISSING = "missing"
MAX_KEYS = 200  # keys listed per message (the rest counted)


def describe_tensor(t: TensorMeta) -> str:
    """``float32[4, 32]/tp · 512 B · b2:917abd5238b8``: what a key carried."""
    parts = [t.describe()]
    if t.is_tensor:
        parts.append(f"{t.nbytes:,} B")
    if t.fingerprint:
        parts.append(t.fingerprint[:15])
    return " · ".join(parts)


def _who(index: MessageIndex, global_rank: int, fallback: RankInfo | None = None) -> str:
    rank = index.rank_of(global_rank) if global_rank >= 0 else None
    rank = rank or fallback
    if global_rank < 0:
        return "an unknown rank"
    return f"rank {global_rank}" + (f" ({place(rank)})" if rank is not None else "")


def _peer_rank(m: MessageEvent, me: RankInfo) -> RankInfo:
    return RankInfo(rank=m.peer if m.peer >= 0 else None, pp_rank=m.peer_pp_rank,
                    tp_rank=m.peer_tp_rank, tp_size=me.tp_size)


def _kind(kind: str) -> str:
    return f"`{kind}`" if kind else "untyped"


def _head(index: MessageIndex, s: Selected, p: Palette) -> Text:
    """``send #2 · rank 2 (pp1) -> rank 0 (pp0)`` (``broadcast send #2 · ... -> the group
    [2, 3]``: a broadcast is numbered apart)"""
    m, me = s.event, s.rank
    here = f"rank {me.rank} ({place(me)})" if me.rank is not None else place(me)
    if m.op is MessageOp.SEND and m.broadcast:
        return literal(f"{numbered(m)} · {here} → the group {list(m.group)}", p.head)
    there = _who(index, m.peer, _peer_rank(m, me))
    if m.op is MessageOp.SEND:
        return literal(f"{numbered(m)} · {here} → {there}", p.head)
    return literal(f"{numbered(m)} · {here} ← {there}", p.head)


def _facts(s: Selected) -> dict[str, str]:
    m = s.event
    out = {"kind": "(nothing arrived)" if s.waiting else _kind(m.kind)}
    if m.op is MessageOp.RECV:
        out["expected"] = _kind(m.expected_kind) if m.expected_kind else "any (untyped receive)"
        out["stash"] = ("stashed it (another kind was asked for)" if m.stashed else
                        "served from the stash" if m.from_stash else "")
    out["TP slices"] = f"all-gather group of {m.gather_size}" if m.gather_size > 1 else ""
    out["called"] = clock(m.wall_ns) + (f" · {m.duration_ns / 1e6:.3f} ms"
                                        if m.duration_ns >= 0 else " · did not return")
    if m.error_type is not None:
        out["raised"] = f"{m.error_type}: {m.error_message or ''}"
    return out


def _side_by_side(index: MessageIndex, a: Selected, b: Selected | None, p: Palette,
                  key_width: int) -> Table:
    table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
    table.add_column("", style=p.dim, overflow="fold", max_width=key_width)
    table.add_column(_head(index, a, p), ratio=1)
    if b is not None:
        table.add_column(_head(index, b, p), ratio=1)
    fa, fb = _facts(a), _facts(b) if b is not None else {}
    for label in ("kind", "expected", "stash", "TP slices", "called", "raised"):
        va, vb = fa.get(label, ""), fb.get(label, "")
        if not va and not vb:
            continue
        differ = b is not None and label in ("kind", "TP slices") and va != vb and bool(va and vb)
        style: Style | str = p.diff if differ else ""
        if label == "expected" and b is not None:  # the receive asked for another kind
            recv = b if b.event.op is MessageOp.RECV else a
            got = recv.event.kind
            style = p.diff if recv.event.expected_kind and got != recv.event.expected_kind else ""
        if label == "raised":
            style = p.diff
        row = [literal(label), literal(va, style if va else "")]
        if b is not None:
            row.append(literal(vb, style if vb else ""))
        table.add_row(*row)
    ta = {t.key: t for t in a.event.tensors}
    tb = {t.key: t for t in b.event.tensors} if b is not None else {}
    # A stage that forwards what it received keeps every key but the auxiliary ones, which
    # stage 0 extracts before it forwards (pptrace.analyze.messages judges the rest).
    hop = (b is not None and a.ref.process == b.ref.process and a.event.op is MessageOp.RECV
           and b.event.op is MessageOp.SEND)
    keys = list(dict.fromkeys([*a.event.keys, *ta, *(b.event.keys if b else ()), *tb]))
    if b is None and not keys:
        return table
    for key in keys[:MAX_KEYS]:
        cells = [literal(key, "bold")]
        for mine, theirs, sent in ((ta, tb, a), (tb, ta, b)):
            if sent is None:
                continue
            t = mine.get(key)
            if t is None:
                has = key in sent.event.keys
                if not has and hop and sent is b and key.startswith(PREFIX):
                    cells.append(literal("extracted here (auxiliary)", p.dim))
                    continue
                cells.append(literal("(a key, not described)" if has else MISSING,
                                     p.dim if has else p.missing))
                continue
            o = theirs.get(key) if b is not None else None
            cells.append(literal(describe_tensor(t), p.diff if o is not None and o != t else ""))
        table.add_row(*cells)
    if len(keys) > MAX_KEYS:
        table.add_row(literal(f"… {len(keys) - MAX_KEYS:,} more keys", p.dim))
    return table


def _last_sent(index: MessageIndex, s: Selected) -> str:
    """What the rank a wait waits on last sent the waiter (from the peer's own trace)."""
    m, me = s.event, s.rank
    if m.peer < 0:
        return "the peer is unknown"
    process = next((i for i, p in enumerate(index.trace.processes) if p.rank.rank == m.peer),
                   None)
    if process is None:
        return f"rank {m.peer} left no trace"
    for last in reversed(index.trace.processes[process].messages):
        if last.op is MessageOp.SEND and (last.peer == me.rank or me.rank in last.group):
            return (f"rank {m.peer} last sent it {_kind(last.kind)} ({numbered(last)}, "
                    f"{since(last.wall_ns - index.t0)})")
    return f"rank {m.peer} sent it nothing"


def _wait(index: MessageIndex, s: Selected, p: Palette) -> Text:
    b = s.begin or s.event
    me = s.rank
    who = f"rank {me.rank} ({place(me)})" if me.rank is not None else place(me)
    want = _kind(b.expected_kind or b.kind)
    text = Text(end="")
    text.append("⧗ ", p.wait)
    text.append(literal(f"{who} waits for {want} from "
                        f"{_who(index, b.peer, _peer_rank(b, me))} since {numbered(b)} began "
                        f"({since(b.wall_ns - index.t0)}); ", p.head))
    end = s.event
    if end.phase == "end" and end.error_type is not None:
        text.append(literal(f"it failed {max(end.duration_ns, 0) / 1e9:.3f} s later with "
                            f"{end.error_type}; ", p.diff))
    else:
        text.append(literal("still waiting when its trace ends; ", p.diff))
    text.append(literal(_last_sent(index, s)))
    return text


def render_detail(index: MessageIndex, col: int, p: Palette | None = None, *,
                  width: int = 120) -> RenderableType:
    """Everything the detail shows for the message in column ``col``, ``width`` columns wide
    (the key column takes at most a quarter of it)."""
    p = p or Palette()
    selected = index.message(col)
    other_col = index.counterpart(col)
    other = index.message(other_col) if other_col is not None else None
    left, right = (selected, other) if other_col is None or col < other_col else (
        other, selected)
    assert left is not None
    parts: list[RenderableType] = []
    if selected.waiting:
        parts.append(_wait(index, selected, p))
    parts.append(_side_by_side(index, left, right, p, max(12, min(32, width // 4))))
    group = selected.event.group
    if group:  # one source, a receive on every other member: say whom it reached
        reached = len(index.counterparts(col)) if selected.event.op is MessageOp.SEND else None
        parts.append(literal(
            f"broadcast over the group {list(group)}"
            + (f": paired with {reached} of its {len(group) - 1} members' receives"
               if reached is not None else ""), p.dim))
    if other is None and not selected.waiting:
        parts.append(literal("the other end: no finding names it with this message (the "
                             "viewer shows the pairs the analyzer names)", p.dim))
    for f in index.findings_at(col):
        line = Text(end="")
        line.append(f"✗ {f.kind.value} ({f.severity.name.lower()}): ", p.diff)
        line.append(literal(f.message))
        parts.append(line)
    for part in parts:
        if isinstance(part, Text):
            part.end = "\n"  # one line (or paragraph) each
    return Group(*parts)


class MessageDetail(VerticalScroll, can_focus=True):
    """The scrollable detail of the selected message."""

    HELP_GROUP = "Message detail"
    # A container is not maximizable by default; the detail is what enter gives the screen.
    ALLOW_MAXIMIZE = True
    COMPONENT_CLASSES = {"md--diff", "md--missing", "md--dim", "md--head", "md--wait"}

    def compose(self) -> ComposeResult:
        yield Static(id="message-detail-body")

    def show(self, index: MessageIndex, col: int | None) -> None:
        """Show the message in column ``col`` (None: there is none)."""
        body = self.query_one("#message-detail-body", Static)
        if col is None:
            body.update(literal("this trace has no message-layer records (pptrace.send / "
                                "pptrace.recv spans)", "dim"))
            return
        palette = Palette(**{n: self.get_component_rich_style(f"md--{n}", partial=True)
                             for n in ("diff", "missing", "dim", "head", "wait")})
        width = self.scrollable_content_region.width or self.app.size.width
        body.update(render_detail(index, col, palette, width=width))
        self.scroll_home(animate=False)
