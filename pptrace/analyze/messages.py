"""The PP message layer's checks: each send paired with its receive, and what a wait left.

A process's ``messages`` (``pptrace.model.messages``) are its sends and receives of PP tensor
dicts. Here they are judged across ranks:

- each broadcast's send is paired with a receive on each other member of its group
  (``pptrace.analyze.broadcasts``);
- each send is paired with a receive on its channel (sender global rank -> receiver global
  rank) and kind, in order (a receive served from its stash moved nothing and pairs with no
  send: the receive that stashed the message is the one its send reached); per pair, the keys,
  each key's shape, dtype, bytes and fingerprint, and the all-gather group the receiver
  re-assembled TP slices over against the one the sender sliced over;
- a send never received (unless the receiver's trace stopped before it), a receive with no send;
- across a sending stage's TP ranks, per message: the TP slices agree (``analyze.slices``);
- a typed receive that got another kind than it asked for; a message whose keys are another
  kind's (mislabelled); a stashed kind no receive took;
- a stage that forwards the output messages it receives keeps their keys (but the auxiliary
  ones stage 0 extracts);
- a send that raised; the waits a hang leaves, a receive that failed at its timeout among them
  (``pptrace.analyze.waits``).

A channel with a known hole (``pptrace.analyze.holes``) is paired across it, its findings
warnings at most that say so (``pptrace.analyze.message_align``).

Where a process's oldest messages were rotated away (``message_sides.cut_at_start``), a channel is
paired by seq when the seqs are the channel's own (one peer each way, no stash: send #n is
receive #n), judging only what both ends kept; otherwise its cut ends get a ``message-cut``
info and it is not paired (a per-process seq then cannot place where the channel starts).

    verdict = check_messages(trace, raws, runs, prefixes, complete, holes)
    carried_by(raws, verdict.carried)    # "(carried by output message #12 pp3->pp0)"
    verdict.pairs                        # each send -> the receive it reached

``raws`` is the analyzer's list of raw findings, appended to; ``carried`` maps (sending process,
attach seq) to the output message that carried that attach's dict, for the payload findings of
attach/extract pairs; ``pairs`` hands the send<->receive pairing to the viewer, which never pairs
by itself. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from pptrace import engines
from pptrace.analyze import message_align as across
from pptrace.analyze import waits as waiting
from pptrace.analyze.broadcasts import check_broadcasts
from pptrace.analyze.holes import Holes
from pptrace.analyze.message_payload import differences
from pptrace.analyze.message_sides import Carried, Pair, Paired, Side, carried_by
from pptrace.analyze.pairs import SentTo
from pptrace.analyze.rules import listed, rank_id, who
from pptrace.analyze.slices import tp_slices
from pptrace.analyze.summary import Raw
from pptrace.analyze.waits import Trail, Wait, judge_waits, members, numbered, place, wanted
from pptrace.model.findings import FindingKind, MessageId, Severity
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import PREFIX, RankInfo
from pptrace.model.text import clip, plural
from pptrace.model.trace import Trace

__all__ = ["Carried", "Matched", "MessageVerdict", "Paired", "carried_by", "check_messages",
           "message_pairs"]

K = FindingKind
SEND, RECV = MessageOp.SEND, MessageOp.RECV
#: The kinds a stage that receives them forwards to the next stage (the ring of outputs: the
#: engine adapters' ``forwarded_kind``, SGLang's "output").
FORWARDED = engines.forwarded_kinds()
# (run, sender global rank, receiver global rank, kind)
#: A send and the receive it reached, each with its process's side
Matched = tuple[tuple[Side, MessageEvent], tuple[Side, MessageEvent]]


class MessageVerdict(NamedTuple):
    """What the message checks hand back besides their findings."""

    carried: Carried  # (sending process, attach seq) -> the output message that carried it
    pairs: Mapping[MessageId, MessageId]  # each send -> the receive it reached (``SentTo``)
    #: each broadcast's send -> the receive it reached on each other member, in group order
    broadcasts: dict[MessageId, tuple[MessageId, ...]] = {}


class _Check:
    def __init__(self, trace: Trace, raws: list[Raw], runs: Sequence[str],
                 prefixes: Sequence[str], complete: Callable[[int], bool], holes: Sequence[Holes],
                 uncertainty: waiting.Uncertainty = lambda a, b: 0.0,
                 paired: Paired | None = None) -> None:
        self.raws, self.complete, self.holes, self.uncertainty = raws, complete, holes, uncertainty
        # One walk per channel for the clocks' pass and the judging one (both see the same
        # calls in the same order), and one sorting out where they read one trace.
        self.paired = Paired() if paired is None else paired
        self.hole = ""  # why the channel being paired has a hole: its findings are weakened
        self.unaligned: dict[int, str] = {}  # cut process -> why a channel of it is not paired
        self.found = self.paired.sides(trace, runs, prefixes)
        self.sides, self.by_rank, self.quiet, self.sides_by_index = self.found
        # Every process's ranks, also those that recorded no message (a peer that sent nothing).
        self.ranks = {(runs[i], rank_id(p.rank)): p.rank for i, p in enumerate(trace.processes)}
        self.carried: Carried = {}
        self.slices: dict[tuple[int, int], int] = {}  # (process, send seq) -> raw index
        # (sending process, send seq) -> the receive it paired with
        self.received: dict[tuple[int, int], tuple[Side, MessageEvent]] = {}
        self.relabelled: set[tuple[int, int]] = set()  # (process, send seq) sent mislabelled
        self.judge = True  # False: pair only (``message_pairs``), comparing nothing
        self.matches: list[Matched] = []
        #: each broadcast's send -> the receive it reached on each other member
        self.broadcasts: dict[MessageId, tuple[MessageId, ...]] = {}

    def add(self, kind: FindingKind, message: str, *, ranks: Iterable[int], time_ns: int | None,
            channel: str, subject: str = "", microbatch: int | None = None,
            messages: Iterable[MessageId] = (), severity: Severity | None = None,
            cause: int | None = None) -> int:
        severity, message = across.weakened(self.hole, kind, severity, message)
        self.raws.append(Raw(kind, message, tuple(ranks), microbatch, time_ns, (), channel,
                             subject, severity, cause, tuple(messages)))
        return len(self.raws) - 1

    def peer_rank(self, side: Side, m: MessageEvent) -> RankInfo:
        known = self.ranks.get((side.run, m.peer))
        if known is not None:
            return known
        return RankInfo(rank=m.peer if m.peer >= 0 else None, pp_rank=m.peer_pp_rank,
                        tp_rank=m.peer_tp_rank, tp_size=side.rank.tp_size)

    def channel(self, side: Side, m: MessageEvent) -> str:
        """``pp3->pp0`` for a send of ``side``, ``pp3->pp0`` for a receive (sender first)."""
        here, there = place(side.rank), place(self.peer_rank(side, m))
        return side.prefix + (f"{here}->{there}" if m.op is SEND else f"{there}->{here}")

    # --- per process ------------------------------------------------------------------------

    def per_process(self, side: Side) -> None:
        label = f"{who(side.rank)} ({place(side.rank)})"
        # A receive that raised is a wait that ended (pptrace.waits); a broadcast's source
        # that raised is a send that raised.
        for m in side.sends + side.bsends:
            if m.error_type is None:  # (``m.ok``, as a field: a property call per message)
                continue
            to = (f"its group {members(m.group)}" if m.group
                  else who(self.peer_rank(side, m)))
            channel = side.prefix + place(side.rank) if m.group else self.channel(side, m)
            self.add(K.MSG_RAISED,
                     f"{label} {numbered(m)} of {wanted(m.kind)} to {to} raised "
                     f"{clip(m.error_type or '', 200)}: {clip(m.error_message or '')}",
                     ranks=[rank_id(side.rank)], time_ns=m.wall_ns, channel=channel,
                     subject=m.error_type or "", messages=[MessageId.of(side.index, m)])
        self.stash(side, label)

    def cut_info(self, side: Side, why: str) -> None:
        kept = []
        for what, seqs in (("send", [m.seq for m in side.sends]),
                           ("receive", [m.seq for m in side.ends] + list(side.begins)),
                           ("broadcast send", [m.seq for m in side.bsends]),
                           ("broadcast receive", [m.seq for m in side.bends] + list(side.bbegins))):
            if seqs:
                kept.append(f"{what} #{min(seqs)}")
        self.add(K.MSG_CUT,
                 f"{who(side.rank)} ({place(side.rank)}) kept its messages from "
                 f"{' and '.join(kept)} on (the older ones were rotated away or "
                 f"overwritten): a channel of it is not paired ({why})",
                 ranks=[rank_id(side.rank)],
                 time_ns=min(m.wall_ns for m in side.trace.messages),
                 channel=side.prefix + place(side.rank))

    def stash(self, side: Side, label: str) -> None:
        stashed: dict[str, list[MessageEvent]] = defaultdict(list)
        taken: dict[str, int] = defaultdict(int)
        for m in side.ends:
            if not (m.from_stash or m.stashed) or m.error_type is not None:
                continue
            if m.from_stash:
                taken[m.kind] += 1
            else:
                stashed[m.kind].append(m)
        if side.cut:
            return  # a stash taken before the cut, or one stashed there, cannot be told apart
        early = not self.complete(side.index)
        note = " (its trace ends without final stats: a later receive may have taken it)"
        for kind, kept in stashed.items():
            left = kept[taken[kind]:]  # first in, first out: the last ones stay
            for m in left:
                self.add(K.MSG_STASH_UNCONSUMED,
                         f"{label} stashed {wanted(kind)} from {who(self.peer_rank(side, m))} "
                         f"(receive #{m.seq}, which asked for {wanted(m.expected_kind)}) that "
                         f"no later receive took ({plural(len(left), 'such message')})"
                         f"{note if early else ''}",
                         ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                         channel=self.channel(side, m), subject=kind,
                         messages=[MessageId.of(side.index, m)],
                         severity=Severity.INFO if early else None)

    # --- pairs ------------------------------------------------------------------------------

    def pairs(self) -> None:
        sends, recvs = self.paired.calls(self.found)
        cut: set[tuple[str, int, int]] = set()
        for key in sorted(set(sends) | set(recvs)):
            run, src, dst, _ = key
            s, r = self.by_rank.get((run, src)), self.by_rank.get((run, dst))
            if (s is not None and s.cut) or (r is not None and r.cut):
                cut.add((run, src, dst))
                continue
            out, got = sends.get(key, []), recvs.get(key, [])
            self.hole = across.channel_hole(self.holes, s, r)
            alignments = self.paired.alignments
            matched, left, extra, alignments[key] = across.pair_channel(out, got,
                                                                        alignments.get(key))
            if not self.judge:
                self.matches += matched
            for (side, m), (rside, e) in matched if self.judge else ():
                self.matched(side, m, rside, e)
            if left and (r is not None or (run, dst) in self.ranks):
                self.never_received(left, r)
            if extra and (run, src) in self.ranks:
                for rside, e in extra:
                    self.unmatched(rside, e, s)
        for run, src, dst in sorted(cut):
            s, r = self.by_rank.get((run, src)), self.by_rank.get((run, dst))
            self.hole = across.channel_hole(self.holes, s, r)
            why = (f"rank {src if s is None else dst} kept no message" if s is None or r is None
                   else self.aligned(s, r))
            self.hole = ""
            for end in (s, r):
                if why and end is not None and end.cut:
                    self.unaligned.setdefault(end.index, why)
        # Broadcasts are paired by their own counters; only a judging pass needs them.
        self.broadcasts = check_broadcasts(self) if self.judge else {}
        for side in self.sides:  # one info per cut process, its first reason
            if side.index in self.unaligned:
                self.cut_info(side, self.unaligned[side.index])
        for side in self.sides if self.judge else ():
            for e in side.ends:
                if (e.kind != e.expected_kind and e.expected_kind and e.ok and not e.stashed
                        and not e.from_stash):
                    self.wrong_kind(side, e)

    def matched(self, s: Side, m: MessageEvent, r: Side, e: MessageEvent) -> None:
        self.received[(s.index, m.seq)] = (r, e)
        if not self.judge:
            self.matches.append(((s, m), (r, e)))
            return
        if m.carries_attach is not None:
            self.carried[(s.index, m.carries_attach)] = (
                f"{m.kind or 'untyped'} message #{m.seq} {self.channel(s, m)}")
        if m.keys != e.keys or m.tensors != e.tensors or m.gather_size != e.gather_size:
            self.compare(s, m, r, e)  # (most pairs agree: no call for those)

    def unmatched(self, r: Side, e: MessageEvent, s: Side | None = None) -> None:
        note = across.unflushed(self.holes, s, r, e, self.uncertainty)  # sent after its last flush?
        self.add(K.MSG_UNMATCHED_RECV,
                 f"{who(r.rank)} ({place(r.rank)}) received {wanted(e.kind)} ({numbered(e)}) "
                 f"from {who(self.peer_rank(r, e))} that has no send of it to pair with{note}",
                 ranks=[e.peer, rank_id(r.rank)], time_ns=e.wall_ns,
                 channel=self.channel(r, e), subject=e.kind,
                 messages=[MessageId.of(r.index, e)],
                 severity=Severity.INFO if note else None)

    def aligned(self, s: Side, r: Side) -> str:
        """Pair a channel one of whose ends was cut, when its seqs are the channel's own: the
        sender sends to this receiver alone, the receiver takes from this sender alone and
        stashes nothing (every call moves one message), so send #n is receive #n. Else say
        why not."""
        src, dst = rank_id(s.rank), rank_id(r.rank)
        if any(m.peer != dst for m in s.sends) or any(
                e.peer != src for e in r.ends) or any(b.peer != src for b in r.begins.values()):
            return "more than one peer: where the channel starts in its seqs cannot be told"
        if any(e.stashed or e.from_stash for e in r.ends):
            return f"rank {dst} stashed: its seqs are not the channel's"
        pairs, left, extra = across.by_seq(s, r, s.sends, r.ends, r.begins)
        for m, e in pairs:
            self.matched(s, m, r, e)
        for m in left:
            self.never_received([(s, m)], r)
        for e in extra:
            self.unmatched(r, e, s)
        return ""

    def hops(self, side: Side) -> None:
        """A stage that forwards the output messages it receives keeps their keys (all but the
        auxiliary ones, which stage 0 extracts)."""
        if side.rank.pp_rank is None or side.rank.is_last_stage or side.cut:
            return  # a cut process's receives and forwards may be cut at different messages
        # (the kind first: most messages are not forwarded ones; ``ok`` read as its field)
        got = [e for e in side.ends
               if e.kind in FORWARDED and e.error_type is None and not e.stashed]
        out = [m for m in side.sends if m.kind in FORWARDED and m.error_type is None
               and (side.index, m.seq) not in self.relabelled]
        for e, m in zip(got, out, strict=False):
            if m.keys == e.keys:
                continue
            sent = set(m.keys)
            lost = [k for k in e.keys if k not in sent and not k.startswith(PREFIX)]
            if not lost:
                continue
            dst = self.peer_rank(side, m)
            self.add(K.MSG_KEYS_DIFFER,
                     f"{who(side.rank)} ({place(side.rank)}) received {wanted(e.kind)} from "
                     f"{who(self.peer_rank(side, e))} with {listed(lost)} (receive #{e.seq}) "
                     f"and forwarded it to {who(dst)} ({place(dst)}) without "
                     f"{'them' if len(lost) > 1 else 'it'} (send #{m.seq})",
                     ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                     channel=self.channel(side, m), subject=f"hop:{m.kind}:{','.join(lost)}",
                     microbatch=m.carries_attach,
                     messages=[MessageId.of(side.index, e),
                               MessageId.of(side.index, m)])

    def labels(self) -> None:
        """A message whose keys are those of another kind's messages on its channel, not its
        own kind's: it went out under the wrong label (the receiver files it wrongly)."""
        channels: dict[tuple[int, int], list[MessageEvent]] = defaultdict(list)
        for side in self.sides:
            for m in side.sends:
                if m.error_type is None:
                    channels[(side.index, m.peer)].append(m)
        for (index, _), sends in channels.items():
            usual: dict[str, frozenset[str]] = {}
            for kind in {m.kind for m in sends}:
                # Counted by keys tuple first (a shape's messages share one), then by set: the
                # same counts, each set first met where its first message is.
                counts: Counter[frozenset[str]] = Counter()
                for names, n in Counter(m.keys for m in sends if m.kind == kind).items():
                    counts[frozenset(names)] += n
                keys, n = counts.most_common(1)[0]
                if n > 1:
                    usual[kind] = keys
            if len(usual) < 2:
                continue  # a message carries another kind's keys only where two kinds have some
            owner = {keys: kind for kind, keys in usual.items()}
            for m in sends:
                keys = frozenset(m.keys)
                other = owner.get(keys)
                if other is None or m.kind not in usual or other == m.kind:
                    continue
                self.mislabelled(self.sides_by_index[index], m, other)

    def mislabelled(self, side: Side, m: MessageEvent, other: str) -> None:
        self.relabelled.add((side.index, m.seq))
        dst = self.peer_rank(side, m)
        where = self.received.get((side.index, m.seq))
        filed = "" if where is None else (
            f"; {who(dst)}'s receive #{where[1].seq}, which asked for "
            f"{wanted(where[1].expected_kind)}, "
            + ("stashed it" if where[1].stashed else "took it") + f" as {wanted(m.kind)}")
        ids = [MessageId.of(side.index, m)] + (
            [MessageId.of(where[0].index, where[1])] if where is not None else [])
        self.add(K.MSG_WRONG_KIND,
                 f"{who(side.rank)} ({place(side.rank)}) sent {who(dst)} ({place(dst)}) a message "
                 f"labelled `{clip(m.kind, 60)}` (send #{m.seq}) that carries the keys of its "
                 f"`{clip(other, 60)}` messages ({listed(sorted(m.keys))}){filed}",
                 ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                 channel=self.channel(side, m), subject=f"label:{m.kind}:{other}",
                 microbatch=m.carries_attach, messages=ids)

    def never_received(self, left: Sequence[tuple[Side, MessageEvent]],
                       r: Side | None) -> None:
        # A send surely after the receiver's trace stopped was in flight (waiting: a hang's).
        stop = r.last_ns() if r is not None else 0
        for side, m in left:
            bound = self.uncertainty(side.index, r.index) if r is not None else 0.0
            if r is not None and waiting.in_flight(stop, m.wall_ns, bound):
                continue
            dst = self.peer_rank(side, m)
            why, severity = ("(it recorded no message at all)", None) if r is None else (
                waiting.goes_on(stop, m.wall_ns, bound, "send"))
            self.add(K.MSG_NEVER_RECEIVED,
                     f"{who(side.rank)} ({place(side.rank)}) sent {wanted(m.kind)} (send "
                     f"#{m.seq}) to {who(dst)} ({place(dst)}), which never received it {why}",
                     severity=severity, ranks=[rank_id(side.rank), m.peer], time_ns=m.wall_ns,
                     channel=self.channel(side, m), subject=m.kind,
                     microbatch=m.carries_attach, messages=[MessageId.of(side.index, m)])

    def wrong_kind(self, side: Side, e: MessageEvent) -> None:
        src = self.peer_rank(side, e)
        self.add(K.MSG_WRONG_KIND,
                 f"{who(side.rank)} ({place(side.rank)}) asked {who(src)} ({place(src)}) for "
                 f"{wanted(e.expected_kind)} and got {wanted(e.kind)} (receive #{e.seq}): it "
                 "goes on as if it held the one it asked for",
                 ranks=[rank_id(side.rank), e.peer], time_ns=e.wall_ns,
                 channel=self.channel(side, e), subject=f"{e.expected_kind}:{e.kind}",
                 messages=[MessageId.of(side.index, e)])

    def compare(self, s: Side, m: MessageEvent, r: Side, e: MessageEvent) -> None:
        """What differs between one send and the receive it paired with (they differ)."""
        pair = Pair(s, m, r, e, self.channel(s, m))
        for kind, message, subject in differences(pair):
            cause = self.slices.get((s.index, m.seq)) if kind is K.MSG_CONTENT_MISMATCH else None
            self.pair(kind, pair, message, subject, cause=cause)

    def pair(self, kind: FindingKind, p: Pair, message: str, subject: str,
             cause: int | None = None) -> None:
        self.add(kind, message, ranks=[rank_id(p.s.rank), rank_id(p.r.rank)],
                 time_ns=p.m.wall_ns, channel=p.channel, subject=subject,
                 microbatch=p.m.carries_attach, cause=cause,
                 messages=[MessageId.of(p.s.index, p.m),
                           MessageId.of(p.r.index, p.e)])

    def waits(self) -> None:
        waits: list[Wait] = []
        trails: dict[tuple[str, int], Trail] = {}
        for side in self.sides:
            holes = self.holes[side.index]  # a lost end returned: a hole, not a wait
            # Point-to-point receives and broadcast receives, each by its own numbers.
            for begins, ends, lost in ((side.begins, side.ends, holes.lost_ends),
                                       (side.bbegins, side.bends, holes.lost_bends)):
                ended = {m.seq: m for m in ends}
                for seq, b in sorted(begins.items()):
                    end = ended.get(seq)
                    if seq in lost or (end is not None and end.error_type is None):
                        continue
                    retried = across.retry_of(begins.values(), b) if end is not None else None
                    waits.append(Wait(side.index, side.rank, side.run, side.prefix, b, end,
                                      retried, holes.unsure(failed=end is not None)))
            last = {m.peer: m for m in side.sends}  # in seq order: the last one stays
            for m in side.bsends:  # a broadcast went to each member; numbered apart: by time
                for peer in m.group:
                    if peer not in last or last[peer].mono_ns <= m.mono_ns:
                        last[peer] = m
            trails[(side.run, rank_id(side.rank))] = Trail(
                side.rank, last, side.last_ns(), self.complete(side.index), side.index)
        for side in self.quiet:  # traced, but no message recorded: it sent nothing
            trails.setdefault((side.run, rank_id(side.rank)), Trail(
                side.rank, {}, side.last_ns(), self.complete(side.index), side.index))
        if waits:
            judge_waits(waits, trails, self.add, self.uncertainty)

    def run(self) -> MessageVerdict:
        for side in self.sides:
            self.per_process(side)
        self.slices = tp_slices(self.sides, self.add)
        self.pairs()
        self.labels()
        for side in self.sides:  # a hole in a stage's own records shifts its hops too
            self.hole = across.channel_hole(self.holes, side, None)
            self.hops(side)
        self.hole = ""
        self.waits()
        return MessageVerdict(self.carried, SentTo(self.received), self.broadcasts)


def check_messages(trace: Trace, raws: list[Raw], runs: Sequence[str], prefixes: Sequence[str],
                   complete: Callable[[int], bool], holes: Sequence[Holes],
                   uncertainty: waiting.Uncertainty = lambda a, b: 0.0,
                   paired: Paired | None = None) -> MessageVerdict:
    """Judge the message layer; append its raw findings to ``raws``; return what carried what,
    and which receive each send reached.

    ``runs`` and ``prefixes``: each process's run id and channel-name prefix (the run, when
    traces of several runs are analysed together); ``complete(i)``: process i's trace is whole
    (final stats, nothing lost); ``holes``: what each one's is known to lack; ``uncertainty``:
    how far two processes' times may be off each other (``Clocks.uncertainty_ns``); ``paired``:
    the channels' alignments from ``message_pairs`` on the same trace (or its shifted copy)."""
    if not any(p.messages for p in trace.processes):
        return MessageVerdict({}, {})
    return _Check(trace, raws, runs, prefixes, complete, holes, uncertainty, paired).run()



def message_pairs(trace: Trace, runs: Sequence[str], holes: Sequence[Holes],
                  paired: Paired | None = None) -> list[Matched]:
    """Each send with the receive it reached, paired as ``check_messages`` pairs them (by order,
    across holes, by seq on a cut channel of its own), comparing and judging nothing; each
    channel's alignment goes into ``paired``, for ``check_messages`` to pair no channel again."""
    if not any(p.messages for p in trace.processes):
        return []
    check = _Check(trace, [], runs, [""] * len(runs), lambda _: False, holes, paired=paired)
    check.judge = False
    check.pairs()
    return check.matches
