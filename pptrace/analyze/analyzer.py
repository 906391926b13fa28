"""The analyzer: cross-rank checks of the auxiliary-output protocol, from a loaded ``Trace``.

Pure: no I/O, no logging, no clock. ``analyze`` returns findings sorted by time, one per
distinct problem: after the first finding of a kind on a channel, later ones of the same kind
are summarised into it (``Finding.cascade``) instead of flooding the report.

What it checks (see ``pptrace.model.findings.FindingKind`` for the list):

- every call that raised, classified by the engine's own message, with where it happened;
- pairing (``pptrace.analyze.pairing``) on each channel (``pptrace.analyze.channels``: the last
  stage's TP rank j to stage 0's TP rank j, or TP rank 0 to every stage-0 TP rank in a
  TP-broadcast layout), inside the window both ends still cover (``pptrace.analyze.window``):
  each payload-carrying attach with its extract, then per pair: names, order, shape, dtype,
  bytes, device type and content fingerprints;
- across the last stage's TP ranks: the same payload per microbatch (``pptrace.analyze.tp``);
- namespace hygiene: prefixed keys the attach did not write, names equal to engine keys, empty
  names, names carrying the prefix; prefixed keys left after an extract; extracts off stage 0;
  stage 0 without a PP-capable observer;
- the PP message layer (``pptrace.analyze.messages``): each send with its receive (the same
  pairing walk), TP slices, kinds, stashes, the waits a hang leaves; a payload finding names
  its output message;
- recorder losses and a missing final stats span, which lower the severity of absence findings
  on the channels they touch (another sink's losses do not: the trace still has those events);
  a cut window (rotated away, a flight ring) is an info finding and weakens nothing.

Findings become one per distinct problem, each consequence after its cause, in
``pptrace.analyze.summary``; payloads are compared in ``pptrace.analyze.payload``.

    findings = analyze(load_paths(["pptrace-traces/"]))
    result = analysis(trace)      # result.findings; result.channels and .pairs they were judged on
    result.trace, result.clocks   # the trace on one clock, and the offsets applied to it

Work per event is small and linear (a trace may hold millions): one pass per process
(``pptrace.analyze.scan``) feeds the per-process checks; a shape's checks run once per shape; a
pair whose ends share one tensors tuple (the loader shares equal ones) is not compared, healthy
pairs are kept as runs (``pairing.align``), equal unshared tuples take a slower path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from pptrace.analyze.aligned import Clocks, shifted
from pptrace.analyze.channels import Channel, Member, Roles, plan
from pptrace.analyze.first_clocks import ChannelCalls, channel_clocks, message_clocks
from pptrace.analyze.holes import Holes, find_holes
from pptrace.analyze.losses import Accounts
from pptrace.analyze.messages import Paired, carried_by, check_messages
from pptrace.analyze.pairing import Alignment, align
from pptrace.analyze.pairs import PairBook
from pptrace.analyze.payload import same
from pptrace.analyze.result import Analysis
from pptrace.analyze.rules import (
    ENGINE_KEYS,
    classify_error,
    compare_specs,
    rank_id,
    stage_of,
    tensor_names,
    tp_of,
    transport_prefix,
    who,
)
from pptrace.analyze.runs import join_runs
from pptrace.analyze.scan import scan
from pptrace.analyze.summary import Counted, Raw, Ref, link_peer_errors, summarise
from pptrace.analyze.tp import TpRank, tp_disagree
from pptrace.analyze.unpaired import unpaired
from pptrace.analyze.window import cut_message, excused, process_window, trim
from pptrace.model.findings import Category, Finding, FindingKind, MessageId, Severity
from pptrace.model.heap import bulk
from pptrace.model.records import Direction, Event, RankInfo, TensorMeta
from pptrace.model.text import clip, plural
from pptrace.model.trace import ProcessTrace, Trace

__all__ = ["ENGINE_KEYS", "Analysis", "Channel", "analysis", "analyze", "classify_error"]

K = FindingKind
#: The most characters of a type name a message quotes (an error message: ``MESSAGE_LIMIT``).
_NAME_LIMIT = 200

# --- the analysis ----------------------------------------------------------------------------


def _add(raws: list[Raw], kind: FindingKind, message: str, *, ranks: Iterable[int] = (),
         microbatch: int | None = None, time_ns: int | None = None, events: Iterable[Ref] = (),
         channel: str = "", subject: str = "", severity: Severity | None = None) -> int:
    """Append a raw finding to ``raws``; return its index."""
    raws.append(Raw(kind, message, tuple(ranks), microbatch, time_ns, tuple(events), channel,
                    subject, severity))
    return len(raws) - 1


@dataclass(frozen=True, slots=True)
class _Proc:
    index: int
    trace: ProcessTrace

    @property
    def rank(self) -> RankInfo:
        return self.trace.rank

    def eid(self, ev: Event) -> Ref:
        return (self.index, ev.direction, ev.seq)


class _Analysis:
    def __init__(self, trace: Trace, clocks: Clocks | None = None, *,
                 holes: Sequence[Holes] | None = None, paired: Paired | None = None) -> None:
        self.trace, self.clocks = trace, clocks  # clocks: which processes share one
        self.paired = paired  # the message channels' alignments, if the clocks' pass made them
        self.procs = [_Proc(i, p) for i, p in enumerate(trace.processes)]
        self.raws: list[Raw] = []
        self.message_pairs: Mapping[MessageId, MessageId] = {}
        self.broadcast_pairs: Mapping[MessageId, tuple[MessageId, ...]] = {}
        self.lowered: dict[str, str] = {}  # channel -> why its absence findings are less sure
        # Channels one of whose ends lacks events in its window: their pairs may be matched
        # across the hole, so their payload findings are warnings (pptrace.analyze.losses).
        self.misaligned: dict[str, str] = {}
        self._equal_tensors: dict[int, tuple[TensorMeta, ...]] = {}  # id -> the first equal one
        self._first_tensors: dict[tuple[TensorMeta, ...], tuple[TensorMeta, ...]] = {}
        # channel -> (the kinds of its last pair's differences, the raw findings they started)
        self._streak: dict[str, tuple[Any, list[int]]] = {}
        self.repeats: dict[int, list[Any]] = {}  # raw index -> [repeats, last microbatch]
        self.book = PairBook()  # each channel's pairs: for the viewer, and a finding's microbatch
        # Namespace findings: (process, attach seq, kind, subject) of the attach side, and the
        # raw findings of the extract side (which may repeat them)
        self.attach_hygiene: set[tuple[int, int, FindingKind, str]] = set()
        self.extract_hygiene: list[int] = []
        # (process, attach seq) -> the raw tp-disagree finding about that attach
        self.tp_causes: dict[tuple[int, int], int] = {}
        self.scans = [scan(p.trace.events, p.rank.pp_rank, transport_prefix(p.trace))
                      for p in self.procs]
        self.windows = [process_window(found, p.trace.stats)
                        for found, p in zip(self.scans, self.procs, strict=True)]
        self.holes = find_holes(trace) if holes is None else holes
        # (``self.add`` kept there would be a cycle through ``self``: the analysis, a million
        # message pairs, would wait for the collector instead of going when dropped)
        self.accounts = Accounts(self.scans, self.windows, self.holes, partial(_add, self.raws))
        self.lost = self.accounts.lost  # process index -> "rank 2 lost 5 events"
        self.attaches = {p.index: self.scans[p.index].attaches for p in self.procs}
        self.extracts = {p.index: self.scans[p.index].extracts for p in self.procs}
        # Several nodes' run ids that complement each other are one job (pptrace.analyze.runs).
        self.run_ids = run_ids = list(join_runs([p.trace for p in self.procs]).job_of)
        self.several = len(set(run_ids)) > 1
        # Channel names carry the run when traces of several runs are analysed together.
        self.run_prefix = [f"{run or '?'}:" if self.several else "" for run in run_ids]
        self.members = [Member(p.index, p.rank, run, bool(self.attaches[p.index]),
                               bool(self.extracts[p.index]), found.attach_calls > 0, False,
                               window) for p, run, found, window in
                        zip(self.procs, run_ids, self.scans, self.windows, strict=True)]
        self.roles = Roles(self.members)
        self.plan: list[Channel] = []
        # (process, direction) that ends a channel: its payload calls were paired or named
        self.ends: set[tuple[int, Direction]] = set()

    def add(self, kind: FindingKind, message: str, **where: Any) -> int:
        return _add(self.raws, kind, message, **where)

    # --- per process --------------------------------------------------------------------------

    def losses(self, p: _Proc) -> None:
        self.accounts.check(p.index, p.trace, self.proc_channel(p))

    def proc_channel(self, p: _Proc) -> str:
        r = p.rank
        return f"{self.run_prefix[p.index]}{stage_of(r)}/tp{tp_of(r)}"

    def errors(self, p: _Proc) -> None:
        for ev in self.scans[p.index].failed:
            kind = classify_error(ev)
            verb = "attach" if ev.direction is Direction.ATTACH else "extract"
            role = "output" if ev.direction is Direction.ATTACH else "observer"
            subject = ev.subject_type or "?"
            left = ""
            if ev.inserted_before_error:
                left = (f"; it left {plural(len(ev.inserted_before_error), 'key', 'prefixed')}"
                        " in the dict")
            found = f"; prefixed values found: {tensor_names(ev.tensors)}" if (
                ev.direction is Direction.EXTRACT and ev.tensors) else ""
            self.add(
                kind,
                f"{who(p.rank)} ({stage_of(p.rank)}, tp {tp_of(p.rank)}) {verb} #{ev.seq} raised "
                f"{clip(ev.error_type or '', _NAME_LIMIT)}: {clip(ev.error_message or '')} "
                f"({role} type {clip(subject, _NAME_LIMIT)}){found}{left}",
                ranks=[rank_id(p.rank)],
                microbatch=ev.seq if ev.direction is Direction.ATTACH else None,
                time_ns=ev.start_ns,
                events=[p.eid(ev)],
                channel=self.proc_channel(p),
                subject=ev.error_type or "",
            )

    def hygiene(self, p: _Proc) -> None:
        label = who(p.rank)
        channel = self.proc_channel(p)
        seen, echoes = self.attach_hygiene, self.extract_hygiene
        for ev, specs in self.scans[p.index].flagged:  # the scan ran the checks, once per shape
            attach = ev.direction is Direction.ATTACH
            for kind, template, subject, severity in specs:
                index = self.add(kind, template.format(label=label, seq=ev.seq),
                                 ranks=[rank_id(p.rank)], microbatch=ev.seq if attach else None,
                                 time_ns=ev.start_ns, events=[p.eid(ev)], channel=channel,
                                 subject=subject, severity=severity)
                if attach:
                    seen.add((p.index, ev.seq, kind, subject))
                else:
                    echoes.append(index)

    def drop_echoes(self) -> set[int]:
        """The extract-side namespace findings that repeat what the paired attach already
        gave (a reserved name travels to stage 0: one problem, counted once, at the attach)."""
        seen, out = self.attach_hygiene, set()
        for index in self.extract_hygiene:
            raw = self.raws[index]
            attach = self.paired_attach(raw.events[0])
            if attach is not None and (*attach, raw.kind, raw.subject) in seen:
                out.add(index)
        return out

    # --- across ranks -----------------------------------------------------------------------

    def planned(self) -> list[Channel]:
        # A process with final stats that lost nothing is complete: what it has no record of
        # did not happen (the evidence of a TP-broadcast layout).
        self.plan = self.plan or plan([replace(m, complete=self.complete(m.index))
                                       for m in self.members], self.several)
        return self.plan

    def calls(self) -> Iterator[ChannelCalls]:
        """Each channel's attaches and extracts inside its window (to pair by order alone)."""
        for ch in self.planned():
            if ch.sender is not None and ch.receiver is not None:
                yield (ch.sender, ch.receiver, trim(self.attaches[ch.sender], ch.start),
                       trim(self.extracts[ch.receiver], ch.start))

    def channels(self) -> None:
        for ch in self.planned():
            self.channel(ch)
        for index, text, events in unpaired(self.procs, self.scans, self.ends):
            p = self.procs[index]
            self.add(K.UNPAIRED_CALLS, text, ranks=[rank_id(p.rank)], events=events,
                     channel=self.proc_channel(p), time_ns=p.trace.events[0].start_ns)

    def complete(self, index: int) -> bool:
        stats = self.procs[index].trace.stats
        return stats is not None and stats.final and index not in self.lost

    def channel(self, ch: Channel) -> None:
        s = self.procs[ch.sender] if ch.sender is not None else None
        r = self.procs[ch.receiver] if ch.receiver is not None else None
        present = s or r
        if present is None:
            return
        name = ch.name
        lost = [self.lost[p.index] for p in (s, r) if p is not None and p.index in self.lost]
        if lost:
            self.lowered[name] = "; ".join(lost)
        holed = [self.accounts.holed[p.index] for p in (s, r)
                 if p is not None and p.index in self.accounts.holed]
        if holed:
            self.misaligned[name] = "; ".join(holed)
        if s is None or r is None:
            n = len(self.attaches[present.index] if s else self.extracts[present.index])
            what = plural(n, "attach") if s else plural(n, "extract")
            missing = "stage 0" if s else "the last stage"
            self.add(K.MISSING_RANK,
                     f"no trace from {missing} (tp {ch.tp}): {what} on {who(present.rank)} "
                     "cannot be paired (was that rank traced?)",
                     ranks=[rank_id(present.rank)], channel=name,
                     time_ns=present.trace.events[0].start_ns if present.trace.events else None)
            self.ends.add((present.index, Direction.ATTACH if s else Direction.EXTRACT))
            return
        self.ends.update(((s.index, Direction.ATTACH), (r.index, Direction.EXTRACT)))
        self.observer(s, r, name)
        start = ch.start
        attaches = trim(self.attaches[s.index], start)
        extracts = trim(self.extracts[r.index], start)
        # The same-host hint compares times only on a clock the pairs showed shared.
        clocks = self.clocks
        result = align(attaches, extracts, clocks is None or clocks.shared(s.index, r.index))
        differing = self.compare(s, r, attaches, extracts, result.unshared, name)
        orphans, unmatched = (self.cut(s, r, name, start, result, attaches, extracts) if start
                              else (result.orphans, result.unmatched))
        self.book.add(s.index, r.index, attaches, extracts, result, orphans, unmatched,
                      ch.broadcast, differing)
        for ia in orphans:
            a = attaches[ia]
            self.add(K.ORPHAN_ATTACH,
                     f"{who(s.rank)} attached {tensor_names(a.tensors)} (attach #{a.seq}); "
                     f"{who(r.rank)} never extracted it (send skipped, lost, or a crash "
                     "before the send?)",
                     ranks=[rank_id(s.rank), rank_id(r.rank)], microbatch=a.seq,
                     time_ns=a.start_ns, events=[s.eid(a)], channel=name)
        for ie in unmatched:
            e = extracts[ie]
            self.add(K.UNMATCHED_EXTRACT,
                     f"{who(r.rank)} extracted {tensor_names(e.tensors)} (extract #{e.seq}) "
                     f"with no attach on {who(s.rank)} to pair with",
                     ranks=[rank_id(s.rank), rank_id(r.rank)], time_ns=e.start_ns,
                     events=[r.eid(e)], channel=name)

    def cut(self, s: _Proc, r: _Proc, name: str, start: int, result: Alignment,
            attaches: Sequence[Event], extracts: Sequence[Event],
            ) -> tuple[Sequence[int], Sequence[int]]:
        """Say which microbatches a channel no longer covers; return the orphans and unmatched
        extracts left to judge (not those at the cut whose partner lies before it)."""
        ws, wr = self.windows[s.index], self.windows[r.index]
        newest = s if ws.attach_from >= wr.extract_from else r
        orphans, unmatched = excused(result, attaches, extracts)
        events = newest.trace.events
        self.add(K.WINDOW_CUT,
                 cut_message(start, who(newest.rank), self.windows[newest.index],
                             len(orphans) + len(unmatched)),
                 ranks=[rank_id(s.rank), rank_id(r.rank)], channel=name,
                 time_ns=events[0].start_ns if events else None)
        return ([i for i in result.orphans if i not in orphans],
                [j for j in result.unmatched if j not in unmatched])

    def observer(self, s: _Proc, r: _Proc, name: str) -> None:
        if not self.attaches[s.index]:
            return
        found = self.scans[r.index]
        raised = {classify_error(e) for e in found.failed}
        if raised & {K.EXTRACT_NO_OBSERVER, K.EXTRACT_NOT_PP}:
            return  # the engine already said so, with its own message
        bad = found.unobserved
        if not bad:
            return
        e = bad[0]
        what = "no observer" if e.subject_type in ("NoneType", "None") else (
            f"observer {e.subject_type} without from_pp_tensors")
        self.add(K.NO_PP_OBSERVER,
                 f"{who(s.rank)} attaches auxiliary output but {who(r.rank)} (stage 0) has "
                 f"{what} ({plural(len(bad), 'extract call')})",
                 ranks=[rank_id(s.rank), rank_id(r.rank)], time_ns=e.start_ns,
                 events=[r.eid(e)], channel=name)

    def compare(self, s: _Proc, r: _Proc, attaches: Sequence[Event],
                extracts: Sequence[Event], pairs: Iterable[tuple[int, int]],
                channel: str) -> list[int]:
        """Compare the tensors of the pairs whose ends are not one tensors tuple, in order;
        return the attach indexes of the pairs whose payloads differ (their verdicts)."""
        # A pair whose ends share one tensors tuple (the loader shares equal ones) agrees by
        # construction; the others are compared once per distinct pair of shapes.
        ls, rs = who(s.rank), who(r.rank)
        compared: dict[tuple[int, int, int], tuple[Any, Any, bool]] = {}  # -> specs, kinds, differ
        differing: list[int] = []
        canonical, known = self.canonical, self._equal_tensors.get
        streaks = self._streak
        for ia, ie in pairs:
            a, e = attaches[ia], extracts[ie]
            mine, theirs = a.tensors, e.tensors
            # Equal tensors (two tuples, one content) differ in nothing; they only end a streak.
            cm, ct = known(id(mine)), known(id(theirs))
            if cm is None or ct is None:
                cm, ct = canonical(mine), canonical(theirs)
            if cm is ct:
                streaks.pop(channel, None)
                continue
            key = (id(mine), id(theirs), id(a.keys_before))
            cached = compared.get(key)
            if cached is None:
                specs = compare_specs(ls, rs, a, e, transport_prefix(s.trace))
                kinds = tuple((kind, subject) for kind, _, subject in specs)
                # (no specs, yet differing: a name only a foreign key carried, a hygiene finding)
                cached = compared[key] = (specs, kinds, not same(mine, theirs))
            if cached[2]:
                differing.append(ia)
            if cached[0] or channel in streaks:
                self.differences(s, a, r, e, channel, cached[0], cached[1])
        return differing

    def differences(self, s: _Proc, a: Event, r: _Proc, e: Event, channel: str,
                    specs: tuple[tuple[FindingKind, str, str], ...], kinds: Any) -> None:
        """Record what differs in one pair, or count it with the pairs before it."""
        streak = self._streak.get(channel)
        if streak is not None and streak[0] == kinds:
            # The same differences as the pair before: count them (a dtype changed for good
            # gives one finding per pair; building each one costs more than the walk).
            for index in streak[1]:
                counter = self.repeats[index]
                counter[0] += 1
                counter[1] = a.seq
            return
        if not specs:
            self._streak.pop(channel, None)
            return
        started = [
            self.add(kind, message, ranks=[rank_id(s.rank), rank_id(r.rank)],
                     microbatch=a.seq, time_ns=a.start_ns, events=[s.eid(a), r.eid(e)],
                     channel=channel, subject=subject)
            for kind, message, subject in specs
        ]
        for index in started:
            self.repeats[index] = [0, None]
        self._streak[channel] = (kinds, started)

    def canonical(self, tensors: tuple[TensorMeta, ...]) -> tuple[TensorMeta, ...]:
        """The first tensors tuple seen equal to ``tensors`` (so ``is`` compares contents)."""
        got = self._equal_tensors.get(id(tensors))
        if got is None:
            got = self._equal_tensors[id(tensors)] = self._first_tensors.setdefault(
                tensors, tensors)
        return got

    def tensor_parallel(self) -> None:
        lasts = [TpRank(p.index, p.rank, self.run_ids[p.index], self.attaches[p.index])
                 for p in self.procs
                 if self.roles.is_last(self.members[p.index]) and self.attaches[p.index]]
        self.tp_causes = tp_disagree(lasts, self.add)

    def link_tp_causes(self) -> None:
        """A pair difference on an attach whose TP ranks disagreed follows from it: stage 0
        re-assembled slices of both ranks' payloads."""
        causes = self.tp_causes
        for index, raw in enumerate(self.raws):
            if (raw.kind.category is not Category.PAYLOAD or raw.kind is K.TP_DISAGREE
                    or not raw.events):
                continue
            process, direction, seq = raw.events[0]
            cause = causes.get((process, seq)) if direction is Direction.ATTACH else None
            if cause is not None:
                self.raws[index] = replace(raw, cause=cause)

    def paired_attach(self, ref: Ref) -> tuple[int, int] | None:
        """(process, seq) of the attach an extract paired with (None for any other event)."""
        process, direction, seq = ref
        return self.book.attach_of(process, seq) if direction is Direction.EXTRACT else None

    def microbatch(self, ref: Ref) -> int | None:
        """The seq of the attach an extract paired with (None for any other event)."""
        attach = self.paired_attach(ref)
        return attach[1] if attach is not None else None

    def run(self) -> list[Finding]:
        for p in self.procs:
            self.losses(p)
        for p in self.procs:
            self.errors(p)
            self.hygiene(p)
        self.channels()
        self.tensor_parallel()
        if self.tp_causes:
            self.link_tp_causes()
        verdict = check_messages(self.trace, self.raws, self.run_ids, self.run_prefix,
                                 self.complete, self.holes,
                                 (self.clocks or Clocks(())).uncertainty_ns, self.paired)
        carried_by(self.raws, verdict.carried)
        link_peer_errors(self.raws)
        self.message_pairs = verdict.pairs
        self.broadcast_pairs = verdict.broadcasts
        echoes = self.drop_echoes() if self.extract_hygiene else set()
        raws: list[Counted] = []
        for index, r in enumerate(self.raws):
            if index in echoes:
                continue
            mb = r.microbatch
            if mb is None and r.events:
                mb = self.microbatch(r.events[0])
            repeats, last_mb = self.repeats.get(index, (0, None))
            raws.append((r, repeats, last_mb, mb))
        return summarise(raws, self.lowered, self.misaligned)


def analysis(trace: Trace, *, align: bool = True) -> Analysis:
    """Check every cross-rank invariant on the trace's clocks aligned (``align=False``: on each
    host's own, for a benchmark's comparison); return the findings, what they were judged on,
    and the aligned trace."""
    # Millions of records are made here (the shifted trace, the pairs) and few cycles: the
    # collector re-scanning the growing heap took half the time (benchmarks/bench_clocks.py).
    with bulk():
        return _analysis(trace, align)


def _analysis(trace: Trace, align: bool) -> Analysis:
    clocks, work, paired = None, None, Paired()
    # Holes (and the message channels' alignments) come from counts, seqs and order, never
    # times: the shift leaves them as they are.
    holes = find_holes(trace)
    if align:  # Pairs by order alone give the clocks first (pptrace.analyze.first_clocks).
        clocks = message_clocks(trace, join_runs(trace.processes).job_of, holes, paired)
        if clocks is None:
            work = _Analysis(trace, holes=holes)
            clocks = channel_clocks(trace, work.calls())
        if any(clocks.offsets):
            trace, work = shifted(trace, clocks), None
    work = work or _Analysis(trace, holes=holes, paired=paired)
    work.clocks = clocks
    findings = work.run()
    return Analysis(tuple(findings), tuple(work.plan), work.message_pairs, work.book.pairs(),
                    work.broadcast_pairs, trace, clocks or Clocks(()))


def analyze(trace: Trace) -> list[Finding]:
    """Check every cross-rank invariant; return the findings, earliest first."""
    return list(analysis(trace).findings)
