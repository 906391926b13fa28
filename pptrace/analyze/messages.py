"""The PP message layer's checks: each send paired with its receive, and what a wait left.

A process's ``messages`` (``pptrace.model.messages``) are its sends and receives of PP tensor
dicts. Here they are judged across ranks:

- each send is paired with a receive on its channel (sender global rank -> receiver global
  rank) and kind, in order (a receive served from its stash moved nothing and pairs with no
  send: the receive that stashed the message is the one its send reached); per pair, the keys,
  each key's shape, dtype, bytes and fingerprint, and the all-gather group the receiver
  re-assembled TP slices over against the one the sender sliced over;
- a send never received (unless the receiver's trace stopped before it was sent: in flight),
  a receive with no send;
- across a sending stage's TP ranks, per message: a tensor sent as TP slices must be the same
  tensor on every one (else the receivers re-assemble a mix);
- a typed receive that got another kind than it asked for; a stashed kind no receive took;
- a send or receive that raised;
- the waits a hang leaves (``pptrace.analyze.waits``).

A process whose oldest messages were rotated away (its first kept seq above 0) gets one
``msg-cut`` info and its channels are not paired: a message's per-process seq counts every
channel and kind, so where a channel's history starts cannot be told.

    carried = check_messages(trace, raws, runs, prefixes, complete)
    carried_by(raws, carried)    # "(carried by output message #12 pp3->pp0)"

``raws`` is the analyzer's list of raw findings, appended to; the result maps (sending process,
attach seq) to the output message that carried that attach's dict, for the payload findings of
attach/extract pairs. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from pptrace.analyze.rules import listed, rank_id, who
from pptrace.analyze.summary import Raw
from pptrace.analyze.waits import Trail, Wait, judge_waits, place, wanted
from pptrace.model.findings import Category, FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp, MessageTensor
from pptrace.model.records import Direction, RankInfo
from pptrace.model.text import clip, plural
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["Carried", "carried_by", "check_messages"]

K = FindingKind
SEND, RECV = MessageOp.SEND, MessageOp.RECV
#: (sending process index, attach seq) -> "output message #12 pp3->pp0"
Carried = dict[tuple[int, int], str]
# (run, sender global rank, receiver global rank, kind)
_Key = tuple[str, int, int, str]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(slots=True)
class _Side:
    """One process's message records, sorted out once."""

    index: int
    trace: ProcessTrace
    run: str
    prefix: str
    sends: list[MessageEvent] = field(default_factory=list)
    ends: list[MessageEvent] = field(default_factory=list)  # receives that returned or raised
    begins: dict[int, MessageEvent] = field(default_factory=dict)
    cut: bool = False

    @property
    def rank(self) -> RankInfo:
        return self.trace.rank

    def last_ns(self) -> int:
        """When this process's trace stops (its latest record's end, wall clock)."""
        ends = [m.wall_ns + max(m.duration_ns, 0) for m in self.trace.messages]
        ends += [ev.end_ns for ev in self.trace.events[-1:]]
        if self.trace.stats is not None:
            ends.append(self.trace.stats.time_ns)
        return max(ends, default=0)


@dataclass(frozen=True, slots=True)
class _Pair:
    """One send and the receive it paired with."""

    s: _Side
    m: MessageEvent
    r: _Side
    e: MessageEvent
    channel: str

    def head(self) -> str:
        return (f"{wanted(self.m.kind)} #{self.m.seq} {who(self.s.rank)} ({place(self.s.rank)})"
                f" -> {who(self.r.rank)} ({place(self.r.rank)}) (receive #{self.e.seq})")


class _Check:
    def __init__(self, trace: Trace, raws: list[Raw], runs: Sequence[str],
                 prefixes: Sequence[str], complete: Callable[[int], bool]) -> None:
        self.raws, self.complete = raws, complete
        self.sides: list[_Side] = []
        self.by_rank: dict[tuple[str, int], _Side] = {}
        self.quiet: list[_Side] = []
        for i, proc in enumerate(trace.processes):
            side = _Side(i, proc, runs[i], prefixes[i])
            if not proc.messages:
                self.quiet.append(side)
                continue
            for m in proc.messages:
                if m.op is SEND:
                    side.sends.append(m)
                elif m.phase == "begin":
                    side.begins[m.seq] = m
                else:
                    side.ends.append(m)
            side.sends.sort(key=lambda m: m.seq)
            side.ends.sort(key=lambda m: m.seq)
            side.cut = min((m.seq for m in proc.messages if m.op is SEND), default=0) > 0 or (
                min((m.seq for m in proc.messages if m.op is RECV), default=0) > 0)
            self.sides.append(side)
            self.by_rank.setdefault((side.run, rank_id(proc.rank)), side)
        # Every process's ranks, also those that recorded no message (a peer that sent nothing).
        self.ranks = {(runs[i], rank_id(p.rank)): p.rank for i, p in enumerate(trace.processes)}
        self.carried: Carried = {}
        self.slices: dict[tuple[int, int], int] = {}  # (process, send seq) -> raw index

    def add(self, kind: FindingKind, message: str, *, ranks: Iterable[int], time_ns: int | None,
            channel: str, subject: str = "", microbatch: int | None = None,
            messages: Iterable[MessageId] = (), severity: Severity | None = None,
            cause: int | None = None) -> int:
        self.raws.append(Raw(kind, message, tuple(ranks), microbatch, time_ns, (), channel,
                             subject, severity, cause, tuple(messages)))
        return len(self.raws) - 1

    def peer_rank(self, side: _Side, m: MessageEvent) -> RankInfo:
        known = self.ranks.get((side.run, m.peer))
        if known is not None:
            return known
        return RankInfo(rank=m.peer if m.peer >= 0 else None, pp_rank=m.peer_pp_rank,
                        tp_rank=m.peer_tp_rank, tp_size=side.rank.tp_size)

    def channel(self, side: _Side, m: MessageEvent) -> str:
        """``pp3->pp0`` for a send of ``side``, ``pp3->pp0`` for a receive (sender first)."""
        here, there = place(side.rank), place(self.peer_rank(side, m))
        return side.prefix + (f"{here}->{there}" if m.op is SEND else f"{there}->{here}")

    # --- per process ------------------------------------------------------------------------

    def per_process(self, side: _Side) -> None:
        label = f"{who(side.rank)} ({place(side.rank)})"
        for m in (*side.sends, *side.ends):
            if m.ok:
                continue
            verb = "send" if m.op is SEND else "receive"
            self.add(K.MSG_RAISED,
                     f"{label} {verb} #{m.seq} of a {wanted(m.kind or m.expected_kind)} "
                     f"{'to' if m.op is SEND else 'from'} {who(self.peer_rank(side, m))} raised "
                     f"{clip(m.error_type or '', 200)}: {clip(m.error_message or '')}",
                     ranks=[rank_id(side.rank)], time_ns=m.wall_ns, channel=self.channel(side, m),
                     subject=m.error_type or "", messages=[MessageId(side.index, m.op, m.seq)])
        if side.cut:
            first_send = min((m.seq for m in side.sends), default=None)
            recvs = [m.seq for m in side.ends] + list(side.begins)
            kept = [f"send #{first_send}" if first_send is not None else "",
                    f"receive #{min(recvs)}" if recvs else ""]
            self.add(K.MSG_CUT,
                     f"{label} kept its messages from {' and '.join(k for k in kept if k)} on "
                     "(the older ones were rotated away or overwritten): its channels are not "
                     "paired", ranks=[rank_id(side.rank)],
                     time_ns=min(m.wall_ns for m in side.trace.messages),
                     channel=side.prefix + place(side.rank))
        self.stash(side, label)

    def stash(self, side: _Side, label: str) -> None:
        stashed: dict[str, list[MessageEvent]] = defaultdict(list)
        taken: dict[str, int] = defaultdict(int)
        for m in side.ends:
            if m.ok and m.from_stash:
                taken[m.kind] += 1
            elif m.ok and m.stashed:
                stashed[m.kind].append(m)
        if side.cut:
            return  # a stash taken before the cut, or one stashed there, cannot be told apart
        early = not self.complete(side.index)
        for kind, kept in stashed.items():
            left = kept[taken[kind]:]  # first in, first out: the last ones stay
            for m in left:
                note = (" (its trace ends without final stats: a later receive may have taken "
                        "it)") if early else ""
                self.add(K.MSG_STASH_UNCONSUMED,
                         f"{label} stashed a {wanted(kind)} from {who(self.peer_rank(side, m))} "
                         f"(receive #{m.seq}, which asked for a {wanted(m.expected_kind)}) that "
                         f"no later receive took ({plural(len(left), 'such message')}){note}",
                         ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                         channel=self.channel(side, m), subject=kind,
                         messages=[MessageId(side.index, RECV, m.seq)],
                         severity=Severity.INFO if early else None)

    # --- across TP ranks --------------------------------------------------------------------

    def tp_slices(self) -> None:
        """A tensor sent as TP slices must be one tensor on every TP rank of the sending stage."""
        stages: dict[tuple[str, int], list[_Side]] = defaultdict(list)
        for side in self.sides:
            if side.rank.pp_rank is not None and side.sends:
                stages[(side.run, side.rank.pp_rank)].append(side)
        for group in stages.values():
            group.sort(key=lambda s: (s.rank.tp_rank or 0, s.index))
            ref = group[0]
            ref_sends = {m.seq: m for m in ref.sends}
            for other in group[1:]:
                if other.rank.tp_rank == ref.rank.tp_rank:
                    continue
                for m in other.sends:
                    base = ref_sends.get(m.seq)
                    if base is None or base.kind != m.kind or base.tensors == m.tensors:
                        continue
                    self.slices_differ(ref, base, other, m)

    def slices_differ(self, ref: _Side, base: MessageEvent, other: _Side,
                      m: MessageEvent) -> None:
        mine = {t.key: t for t in base.tensors}
        for t in m.tensors:
            b = mine.get(t.key)
            if b is None or not (b.sliced or t.sliced):
                continue
            if (b.shape, b.dtype) != (t.shape, t.dtype):
                what = f"{b.describe()} on {who(ref.rank)}, {t.describe()} on {who(other.rank)}"
            elif b.fingerprint and t.fingerprint and b.fingerprint != t.fingerprint:
                what = (f"fingerprints {b.fingerprint[:12]} on {who(ref.rank)}, "
                        f"{t.fingerprint[:12]} on {who(other.rank)}")
            else:
                continue
            index = self.add(
                K.MSG_TP_SLICES_DIFFER,
                f"{who(ref.rank)} ({place(ref.rank)}) and {who(other.rank)} ({place(other.rank)}) "
                f"sent `{clip(t.key, 200)}` as TP slices of different tensors in "
                f"{wanted(m.kind)} #{m.seq} ({what}): the receivers re-assemble a mix of them "
                "(a tensor that is not TP-replicated sent as slices: silent corruption)",
                ranks=[rank_id(ref.rank), rank_id(other.rank)],
                time_ns=min(base.wall_ns, m.wall_ns),
                channel=f"{other.prefix}pp{other.rank.pp_rank}/tp{ref.rank.tp_rank or 0}"
                f"~tp{other.rank.tp_rank or 0}", subject=f"{m.kind}:{t.key}",
                microbatch=m.carries_attach,
                messages=[MessageId(ref.index, SEND, base.seq), MessageId(other.index, SEND,
                                                                          m.seq)])
            self.slices.setdefault((ref.index, base.seq), index)
            self.slices.setdefault((other.index, m.seq), index)

    # --- pairs ------------------------------------------------------------------------------

    def pairs(self) -> None:
        sends: dict[_Key, list[tuple[_Side, MessageEvent]]] = defaultdict(list)
        recvs: dict[_Key, list[tuple[_Side, MessageEvent]]] = defaultdict(list)
        for side in self.sides:
            me = rank_id(side.rank)
            for m in side.sends:
                if m.ok and m.peer >= 0:
                    sends[(side.run, me, m.peer, m.kind)].append((side, m))
            for m in side.ends:
                if m.ok and not m.from_stash and m.peer >= 0:
                    recvs[(side.run, m.peer, me, m.kind)].append((side, m))
        for key in sorted(set(sends) | set(recvs)):
            run, src, dst, _ = key
            s, r = self.by_rank.get((run, src)), self.by_rank.get((run, dst))
            if (s is not None and s.cut) or (r is not None and r.cut):
                continue
            out, got = sends.get(key, []), recvs.get(key, [])
            for (side, m), (rside, e) in zip(out, got, strict=False):
                if m.carries_attach is not None:
                    self.carried[(side.index, m.carries_attach)] = (
                        f"{m.kind or 'untyped'} message #{m.seq} {self.channel(side, m)}")
                self.compare(side, m, rside, e)
            if len(out) > len(got) and (r is not None or (run, dst) in self.ranks):
                self.never_received(out[len(got):], r)
            if len(got) > len(out) and (run, src) in self.ranks:
                for rside, e in got[len(out):]:
                    self.add(K.MSG_UNMATCHED_RECV,
                             f"{who(rside.rank)} ({place(rside.rank)}) received a "
                             f"{wanted(e.kind)} (receive #{e.seq}) from "
                             f"{who(self.peer_rank(rside, e))} that has no send of it to pair "
                             "with", ranks=[src, dst], time_ns=e.wall_ns,
                             channel=self.channel(rside, e), subject=e.kind,
                             messages=[MessageId(rside.index, RECV, e.seq)])
        for side in self.sides:
            for e in side.ends:
                if (e.ok and not e.stashed and not e.from_stash and e.expected_kind
                        and e.kind != e.expected_kind):
                    self.wrong_kind(side, e)

    def never_received(self, left: Sequence[tuple[_Side, MessageEvent]],
                       r: _Side | None) -> None:
        # A send after the receiver's trace stopped was in flight: the receiver never had the
        # chance (a receiver that waits is the hang's finding).
        stop = r.last_ns() if r is not None else 0
        for side, m in left:
            if r is not None and m.wall_ns > stop:
                continue
            dst = self.peer_rank(side, m)
            self.add(K.MSG_NEVER_RECEIVED,
                     f"{who(side.rank)} ({place(side.rank)}) sent a {wanted(m.kind)} (send "
                     f"#{m.seq}) to {who(dst)} ({place(dst)}), which never received it "
                     + ("(it recorded no message at all)" if r is None else
                        "(its trace goes on after the send)"),
                     ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                     channel=self.channel(side, m), subject=m.kind,
                     microbatch=m.carries_attach, messages=[MessageId(side.index, SEND, m.seq)])

    def wrong_kind(self, side: _Side, e: MessageEvent) -> None:
        src = self.peer_rank(side, e)
        self.add(K.MSG_WRONG_KIND,
                 f"{who(side.rank)} ({place(side.rank)}) asked {who(src)} ({place(src)}) for a "
                 f"{wanted(e.expected_kind)} and got a {wanted(e.kind)} (receive #{e.seq}): it "
                 "goes on as if it held the one it asked for",
                 ranks=[rank_id(side.rank), e.peer], time_ns=e.wall_ns,
                 channel=self.channel(side, e), subject=f"{e.expected_kind}:{e.kind}",
                 messages=[MessageId(side.index, RECV, e.seq)])

    def compare(self, s: _Side, m: MessageEvent, r: _Side, e: MessageEvent) -> None:
        """What differs between one send and the receive it paired with."""
        if m.keys == e.keys and m.tensors == e.tensors and m.gather_size == e.gather_size:
            return
        pair = _Pair(s, m, r, e, self.channel(s, m))
        head = pair.head()
        if set(m.keys) != set(e.keys):
            got, sent_keys = set(e.keys), set(m.keys)
            lost = [k for k in m.keys if k not in got]
            extra = [k for k in e.keys if k not in sent_keys]
            parts = ([f"without {listed(lost)} that was sent"] if lost else []) + (
                [f"with {listed(extra)} that was not sent"] if extra else [])
            self.pair(K.MSG_KEYS_DIFFER, pair, f"{head}: arrived {'; '.join(parts)}",
                      f"{m.kind}:{','.join(lost)}:{','.join(extra)}")
        sent = {t.key: t for t in m.tensors}
        grown: list[str] = []
        for t in e.tensors:
            a = sent.get(t.key)
            if a is None:
                continue
            if m.gather_size != e.gather_size:
                if a.shape != t.shape or a.nbytes != t.nbytes:
                    grown.append(f"`{clip(t.key, 200)}` {a.describe()} -> {t.describe()}")
                continue
            self.tensor(pair, a, t)
        if m.gather_size != e.gather_size:
            size = f"{r.rank.tp_size}" if r.rank.tp_size is not None else "?"
            what = f": {', '.join(grown[:10])}" if grown else ""
            self.pair(K.MSG_GATHER_GROUP, pair,
                      f"{head}: {who(s.rank)} sliced over a group of {m.gather_size}, "
                      f"{who(r.rank)} re-assembled over an all-gather group of "
                      f"{e.gather_size} (its TP size {size}){what}", m.kind)

    def pair(self, kind: FindingKind, p: _Pair, message: str, subject: str,
             cause: int | None = None) -> None:
        self.add(kind, message, ranks=[rank_id(p.s.rank), rank_id(p.r.rank)],
                 time_ns=p.m.wall_ns, channel=p.channel, subject=subject,
                 microbatch=p.m.carries_attach, cause=cause,
                 messages=[MessageId(p.s.index, SEND, p.m.seq),
                           MessageId(p.r.index, RECV, p.e.seq)])

    def tensor(self, p: _Pair, a: MessageTensor, t: MessageTensor) -> None:
        """What differs in one key between a send and its receive (the first difference)."""
        head, key, subject = p.head(), clip(t.key, 200), f"{p.m.kind}:{t.key}"
        if a.dtype != t.dtype or a.is_tensor != t.is_tensor:
            self.pair(K.MSG_DTYPE_MISMATCH, p,
                      f"{head}: `{key}` sent {a.describe()}, arrived {t.describe()}", subject)
        elif a.shape != t.shape:
            self.pair(K.MSG_SHAPE_MISMATCH, p,
                      f"{head}: `{key}` sent {a.describe()}, arrived {t.describe()} "
                      f"({_numel(a.shape)} elements against {_numel(t.shape)})", subject)
        elif a.nbytes != t.nbytes:
            self.pair(K.MSG_BYTES_MISMATCH, p,
                      f"{head}: `{key}` {a.describe()} sent {plural(a.nbytes, 'byte')}, "
                      f"arrived {plural(t.nbytes, 'byte')}", subject)
        elif a.fingerprint and t.fingerprint and a.fingerprint != t.fingerprint:
            self.pair(K.MSG_CONTENT_MISMATCH, p,
                      f"{head}: `{key}` {a.describe()} changed on the way (fingerprint "
                      f"{a.fingerprint[:12]} sent, {t.fingerprint[:12]} arrived)", subject,
                      cause=self.slices.get((p.s.index, p.m.seq)))

    def waits(self) -> None:
        waits, trails = [], {}
        for side in self.sides:
            ended = {m.seq for m in side.ends}
            waits += [Wait(side.index, side.rank, side.run, side.prefix, b)
                      for seq, b in sorted(side.begins.items()) if seq not in ended]
            last: dict[int, MessageEvent] = {}
            for m in side.sends:
                last[m.peer] = m
            trails[(side.run, rank_id(side.rank))] = Trail(
                side.rank, last, side.last_ns(), self.complete(side.index))
        for side in self.quiet:  # traced, but no message recorded: it sent nothing
            trails.setdefault((side.run, rank_id(side.rank)), Trail(
                side.rank, {}, side.last_ns(), self.complete(side.index)))
        if waits:
            judge_waits(waits, trails, self.add)

    def run(self) -> Carried:
        for side in self.sides:
            self.per_process(side)
        self.tp_slices()
        self.pairs()
        self.waits()
        return self.carried


def check_messages(trace: Trace, raws: list[Raw], runs: Sequence[str], prefixes: Sequence[str],
                   complete: Callable[[int], bool]) -> Carried:
    """Judge the message layer; append its raw findings to ``raws``; return what carried what.

    ``runs`` and ``prefixes``: each process's run id and channel-name prefix (the run, when
    traces of several runs are analysed together); ``complete(i)``: process i's trace is whole
    (final stats, nothing lost)."""
    if not any(p.messages for p in trace.processes):
        return {}
    return _Check(trace, raws, runs, prefixes, complete).run()


def carried_by(raws: list[Raw], carried: Carried) -> None:
    """Say in each attach/extract payload finding which output message carried its dict."""
    for i, raw in enumerate(raws):
        if raw.kind.category is not Category.PAYLOAD or not raw.events:
            continue
        process, direction, seq = raw.events[0]
        text = carried.get((process, seq)) if direction is Direction.ATTACH else None
        if text is not None:
            raws[i] = replace(raw, message=f"{raw.message} (carried by {text})")
