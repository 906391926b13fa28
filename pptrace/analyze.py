"""The analyzer: cross-rank checks of the auxiliary-output protocol, from a loaded ``Trace``.

Pure: no I/O, no logging, no clock. ``analyze`` returns findings sorted by time, one per
distinct problem: after the first finding of a kind on a channel, later ones of the same kind
are summarised into it (``Finding.cascade``) instead of flooding the report.

What it checks (see ``pptrace.findings.FindingKind`` for the list):

- every call that raised, classified by the engine's own message, with where it happened;
- pairing (``pptrace.pairing``): each payload-carrying attach on the last stage (TP rank j)
  with its extract on stage 0 (TP rank j), then per pair: names, order, shape, dtype, bytes,
  device type and content fingerprints;
- across the last stage's TP ranks: the same payload per microbatch;
- namespace hygiene: prefixed keys the attach did not write, names equal to engine keys, empty
  names, names carrying the prefix; prefixed keys left after an extract; extracts off stage 0;
  stage 0 without a PP-capable observer;
- recorder losses, which lower the severity of absence findings on the channels they touch.

    findings = analyze(load_paths(["pptrace-traces/"]))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pptrace import errors
from pptrace.findings import Finding, FindingKind, Severity
from pptrace.model import EventId, ProcessTrace, Trace
from pptrace.pairing import pair
from pptrace.record import PREFIX, Direction, Event, RankInfo, TensorMeta

__all__ = ["ENGINE_KEYS", "analyze"]

K = FindingKind

#: Keys the engine itself puts in the PP output dict (SGLang's scheduler_pp_mixin and
#: managers/utils.get_logprob_dict_from_result): an auxiliary name equal to one is a collision.
ENGINE_KEYS = frozenset(
    {
        "__msg_type__",
        "__skip__",
        "next_token_ids",
        "spec_accept_lens",
        "spec_new_seq_lens",
        "spec_bonus_tokens",
        "spec_accept_index",
        "spec_next_chain",
        "spec_next_parents",
        "spec_next_top_scores",
        "draft_topk_p",
        "draft_topk_index",
        "draft_hidden_states",
        "draft_dsa_topk_indices",
        "extend_input_len_per_req",
        "extend_logprob_start_len_per_req",
        "next_token_logprobs",
        "next_token_top_logprobs_val",
        "next_token_top_logprobs_idx",
        "next_token_token_ids_logprobs_val",
        "next_token_token_ids_logprobs_idx",
        "sampling_mask_token_ids",
        "sampling_mask_lengths",
        "sampling_mask_selected_logprobs",
        "sampling_mask_support_logprobs",
        "sampling_mask_statuses",
        "sampling_mask_num_accept_tokens",
        "input_token_logprobs",
        "input_top_logprobs_val",
        "input_top_logprobs_idx",
        "input_token_ids_logprobs_val",
        "input_token_ids_logprobs_idx",
    }
)

#: A key that starts like the prefix without being prefixed: stage 0 will not pop it, but it
#: is one typo away from a wrong pop.
_NEAR_PREFIX = PREFIX.rstrip(".")

_ABSENCE = frozenset({K.ORPHAN_ATTACH, K.UNMATCHED_EXTRACT, K.MISSING_RANK, K.NO_PP_OBSERVER})

_ATTACH_EXACT = {
    errors.ATTACH_NOT_PP: K.ATTACH_NOT_PP,
    errors.ATTACH_EMPTY: K.ATTACH_EMPTY,
    errors.ATTACH_BAD_NAME: K.ATTACH_BAD_NAME,
}
_EXTRACT_EXACT = {
    errors.EXTRACT_NO_OBSERVER: K.EXTRACT_NO_OBSERVER,
    errors.EXTRACT_NOT_PP: K.EXTRACT_NOT_PP,
    errors.EXTRACT_NOT_TENSOR: K.EXTRACT_NOT_TENSOR,
    errors.EXTRACT_NOT_RECONSTRUCTED: K.EXTRACT_NOT_RECONSTRUCTED,
}


def _pattern(template: str) -> re.Pattern[str]:
    head, _, tail = template.partition("{name!r}")
    return re.compile(re.escape(head) + r"(.+)" + re.escape(tail) + r"\Z", re.DOTALL)


_ATTACH_PATTERNS = (
    (_pattern(errors.ATTACH_NOT_TENSOR), K.ATTACH_NOT_TENSOR),
    (_pattern(errors.ATTACH_DUPLICATE), K.ATTACH_DUPLICATE),
)


def classify_error(ev: Event) -> FindingKind:
    """The finding kind of a call that raised: the engine's error by its exact message."""
    if ev.error_type not in ("RuntimeError", "builtins.RuntimeError"):
        return K.CALL_RAISED
    msg = ev.error_message or ""
    if ev.direction is Direction.ATTACH:
        kind = _ATTACH_EXACT.get(msg)
        if kind is not None:
            return kind
        for pattern, kind in _ATTACH_PATTERNS:
            if pattern.match(msg):
                return kind
        return K.CALL_RAISED
    return _EXTRACT_EXACT.get(msg, K.CALL_RAISED)


# --- naming ----------------------------------------------------------------------------------


def who(rank: RankInfo) -> str:
    """``rank 3``, or ``pid 1234`` when the global rank is unknown."""
    return f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"


def _rank_id(rank: RankInfo) -> int:
    return rank.rank if rank.rank is not None else rank.pid


def _names(tensors: Iterable[TensorMeta]) -> str:
    items = [f"`{t.name}`" for t in tensors]
    return ", ".join(items) if items else "nothing"


def _stage(rank: RankInfo) -> str:
    return f"pp{rank.pp_rank}" if rank.pp_rank is not None else "pp?"


def _tp(rank: RankInfo) -> int:
    return rank.tp_rank if rank.tp_rank is not None else 0


# --- raw findings and the cascade ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Raw:
    kind: FindingKind
    message: str
    ranks: tuple[int, ...]
    microbatch: int | None
    time_ns: int | None
    events: tuple[EventId, ...]
    channel: str
    subject: str = ""  # what separates findings of one kind on one channel (e.g. the name)
    severity: Severity | None = None


def _summarise(raws: Sequence[_Raw], lowered: dict[str, str]) -> list[Finding]:
    """Keep the first finding per (kind, channel, subject); count the rest as its cascade."""
    ordered = sorted(raws, key=lambda r: (r.time_ns or 0, r.microbatch or 0))
    groups: dict[tuple[FindingKind, str, str], list[_Raw]] = {}
    for raw in ordered:
        groups.setdefault((raw.kind, raw.channel, raw.subject), []).append(raw)
    out: list[Finding] = []
    for (kind, channel, _), items in groups.items():
        first = items[0]
        severity = first.severity or kind.default_severity
        message = first.message
        if kind in _ABSENCE and channel in lowered:
            severity = Severity(max(Severity.INFO, severity - 10))
            message += f" ({lowered[channel]}: this may be a recording gap)"
        if len(items) > 1:
            last = items[-1]
            until = f" through microbatch {last.microbatch}" if last.microbatch is not None else ""
            message += f" (and {len(items) - 1} more like this{until})"
        out.append(
            Finding(
                kind=kind,
                severity=severity,
                message=message,
                ranks=first.ranks,
                microbatch=first.microbatch,
                time_ns=first.time_ns,
                events=first.events,
                channel=channel,
                cascade=len(items) - 1,
            )
        )
    # At the same moment a cause goes before its effects (TP ranks disagreeing before the
    # content stage 0 re-assembled from them).
    out.sort(key=lambda f: (f.time_ns or 0, f.kind is not K.TP_DISAGREE, -f.severity,
                            f.kind.value, f.channel))
    return out


# --- the analysis ----------------------------------------------------------------------------


# kind, message template ({label}, {seq}), subject, severity override, on the process channel
_Spec = tuple[FindingKind, str, str, "Severity | None", bool]


def _esc(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _hygiene_specs(ev: Event, pp_rank: int | None) -> tuple[_Spec, ...]:
    """The namespace findings one event gives, as templates (pure; cached per event shape)."""
    out: list[_Spec] = []
    engine_keys = ENGINE_KEYS | {k for k in ev.keys_before if not k.startswith(PREFIX)}
    verb = "attached" if ev.direction is Direction.ATTACH else "extracted"
    for t in ev.tensors:
        name, key = _esc(t.name), _esc(t.key)
        if t.name == "":
            out.append((K.EMPTY_NAME, f"{{label}} {verb} an auxiliary tensor with an empty name "
                        f"(key `{key}`)", "", None, False))
        elif t.name in engine_keys:
            out.append((K.RESERVED_NAME, f"{{label}} {verb} auxiliary name `{name}`, which is "
                        "also an engine key of the PP output dict", t.name, None, False))
        elif t.name.startswith(PREFIX) or t.name.startswith(_NEAR_PREFIX):
            out.append((K.NAME_HAS_PREFIX, f"{{label}} {verb} auxiliary name `{name}`, which "
                        f"itself carries the prefix (key `{key}`)", t.name, None, False))
    if ev.direction is Direction.ATTACH:
        duplicate = not ev.ok and classify_error(ev) is K.ATTACH_DUPLICATE
        keys = () if duplicate else ev.keys_before
        where = "already in the dict before attach"
    else:
        keys = ev.keys_before
        where = "in the dict stage 0 received"
    for k in keys:
        if k.startswith(PREFIX) and ev.direction is Direction.ATTACH:
            out.append((K.PREFIXED_FOREIGN_KEY, f"{{label}}: key `{_esc(k)}` was {where}: stage "
                        f"0 will pop it as auxiliary output `{_esc(k[len(PREFIX):])}`", k, None,
                        False))
        elif k.startswith(_NEAR_PREFIX) and not k.startswith(PREFIX):
            out.append((K.PREFIXED_FOREIGN_KEY, f"{{label}}: key `{_esc(k)}` {where} starts like "
                        f"the auxiliary prefix `{PREFIX}` without being auxiliary output", k,
                        Severity.WARNING, False))
    if ev.direction is Direction.EXTRACT and ev.ok and ev.tensors:
        left = [k for k in ev.keys_after if k.startswith(PREFIX)]
        if left:
            out.append((K.LEFTOVER_KEYS, "{label} extract #{seq} succeeded but left prefixed keys "
                        + _esc(", ".join(f"`{k}`" for k in left)) + " in the dict", "", None,
                        True))
    if ev.direction is Direction.EXTRACT and ev.tensors and pp_rank is not None and pp_rank != 0:
        out.append((K.EXTRACT_OFF_STAGE0, f"{{label}} (pp {pp_rank}) extracted auxiliary output "
                    f"{_esc(_names(ev.tensors))}: only stage 0 should (was it forwarded past "
                    "stage 0?)", "", None, True))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Proc:
    index: int
    trace: ProcessTrace

    @property
    def rank(self) -> RankInfo:
        return self.trace.rank

    def eid(self, ev: Event) -> EventId:
        return EventId(self.index, ev.direction, ev.seq)


def _payload_attaches(proc: ProcessTrace) -> list[Event]:
    return [
        e for e in proc.events if e.direction is Direction.ATTACH and e.ok and e.tensors
    ]


def _payload_extracts(proc: ProcessTrace) -> list[Event]:
    return [e for e in proc.events if e.direction is Direction.EXTRACT and e.tensors]


class _Analysis:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.procs = [_Proc(i, p) for i, p in enumerate(trace.processes)]
        self.raws: list[_Raw] = []
        self.lost: dict[int, str] = {}  # process index -> "rank 2 lost 5 events"
        self.lowered: dict[str, str] = {}  # channel -> why its absence findings are less sure
        self._compared: dict[tuple[Any, ...], tuple[tuple[FindingKind, str, str], ...]] = {}
        self._payloads: dict[int, tuple[Any, ...]] = {}  # id(tensors): events keep them alive
        self.microbatch_of: dict[EventId, int] = {}  # extract -> paired attach seq
        self.attaches = {p.index: _payload_attaches(p.trace) for p in self.procs}
        self.extracts = {p.index: _payload_extracts(p.trace) for p in self.procs}
        pp_sizes = [p.rank.pp_size for p in self.procs if p.rank.pp_size is not None]
        pp_ranks = [p.rank.pp_rank for p in self.procs if p.rank.pp_rank is not None]
        self.pp_size = max(pp_sizes) if pp_sizes else None
        self.max_pp = max(pp_ranks) if pp_ranks else None

    def add(self, kind: FindingKind, message: str, *, ranks: Iterable[int] = (),
            microbatch: int | None = None, time_ns: int | None = None,
            events: Iterable[EventId] = (), channel: str = "", subject: str = "",
            severity: Severity | None = None) -> None:
        self.raws.append(_Raw(kind, message, tuple(ranks), microbatch, time_ns,
                              tuple(events), channel, subject, severity))

    # --- roles ----------------------------------------------------------------------------

    def is_last(self, p: _Proc) -> bool:
        r = p.rank
        if r.pp_rank is None:
            return bool(self.attaches[p.index])
        size = r.pp_size if r.pp_size is not None else self.pp_size
        if size is not None:
            return r.pp_rank == size - 1
        return r.pp_rank == self.max_pp and bool(self.attaches[p.index])

    def is_first(self, p: _Proc) -> bool:
        r = p.rank
        if r.pp_rank is None:
            return bool(self.extracts[p.index])
        return r.pp_rank == 0

    # --- per process --------------------------------------------------------------------------

    def losses(self, p: _Proc) -> None:
        events = p.trace.events
        stats = p.trace.stats
        missing_seq = 0
        for direction in Direction:
            seqs = [e.seq for e in events if e.direction is direction]
            if seqs:
                missing_seq += max(seqs) + 1 - len(seqs)
        dropped = max((e.dropped_before for e in events), default=0)
        overwritten = internal = 0
        unexported = 0
        if stats is not None:
            dropped = max(dropped, stats.dropped)
            overwritten = stats.overwritten
            internal = stats.internal_errors
            unexported = max(0, stats.recorded - len(events))
        lost = max(missing_seq, dropped + overwritten, unexported)
        if lost == 0 and internal == 0:
            return
        label = who(p.rank)
        parts = []
        if dropped:
            parts.append(f"{dropped} dropped")
        if overwritten:
            parts.append(f"{overwritten} overwritten in flight mode")
        if missing_seq:
            parts.append(f"{missing_seq} sequence numbers missing")
        if internal:
            parts.append(f"{internal} internal recorder errors")
        detail = ", ".join(parts)
        self.lost[p.index] = f"{label} lost {lost} events"
        self.add(
            K.EVENTS_DROPPED,
            f"{label} lost {lost} events ({detail}): findings about missing events on its "
            "channels are less certain",
            ranks=[_rank_id(p.rank)],
            time_ns=events[0].start_ns if events else (stats.time_ns if stats else None),
            channel=self.proc_channel(p),
        )

    def proc_channel(self, p: _Proc) -> str:
        r = p.rank
        return f"{_stage(r)}/tp{_tp(r)}"

    def errors(self, p: _Proc) -> None:
        for ev in p.trace.events:
            if ev.ok:
                continue
            kind = classify_error(ev)
            verb = "attach" if ev.direction is Direction.ATTACH else "extract"
            role = "output" if ev.direction is Direction.ATTACH else "observer"
            subject = ev.subject_type or "?"
            left = ""
            if ev.inserted_before_error:
                left = f"; it left {len(ev.inserted_before_error)} prefixed keys in the dict"
            found = f"; prefixed values found: {_names(ev.tensors)}" if (
                ev.direction is Direction.EXTRACT and ev.tensors) else ""
            self.add(
                kind,
                f"{who(p.rank)} ({_stage(p.rank)}, tp {_tp(p.rank)}) {verb} #{ev.seq} raised "
                f"{ev.error_type}: {ev.error_message} ({role} type {subject}){found}{left}",
                ranks=[_rank_id(p.rank)],
                microbatch=ev.seq if ev.direction is Direction.ATTACH else None,
                time_ns=ev.start_ns,
                events=[p.eid(ev)],
                channel=self.proc_channel(p),
                subject=ev.error_type or "",
            )

    def hygiene(self, p: _Proc) -> None:
        label = who(p.rank)
        channel = self.proc_channel(p)
        cache: dict[tuple[Any, ...], tuple[_Spec, ...]] = {}
        for ev in p.trace.events:
            if not ev.tensors and not ev.keys_before:
                continue
            # Events of one process repeat a few shapes (and the loader shares equal parts),
            # so the checks run once per distinct shape.
            key = (ev.direction, id(ev.tensors), id(ev.keys_before), id(ev.keys_after), ev.ok,
                   ev.error_type, ev.error_message)
            specs = cache.get(key)
            if specs is None:
                specs = cache[key] = _hygiene_specs(ev, p.rank.pp_rank)
            for kind, template, subject, severity, on_channel in specs:
                self.add(kind, template.format(label=label, seq=ev.seq),
                         ranks=[_rank_id(p.rank)],
                         microbatch=ev.seq if ev.direction is Direction.ATTACH else None,
                         time_ns=ev.start_ns, events=[p.eid(ev)],
                         channel=channel if on_channel else "", subject=subject,
                         severity=severity)

    # --- across ranks -----------------------------------------------------------------------

    def channels(self) -> None:
        lasts = [p for p in self.procs if self.is_last(p)]
        firsts = [p for p in self.procs if self.is_first(p)]
        tps = sorted({_tp(p.rank) for p in lasts + firsts})
        for tp in tps:
            senders = [p for p in lasts if _tp(p.rank) == tp and self.attaches[p.index]]
            receivers = [p for p in firsts if _tp(p.rank) == tp]
            if not senders and not any(self.extracts[p.index] for p in receivers):
                continue
            for k in range(max(len(senders), len(receivers))):
                s = senders[k] if k < len(senders) else None
                r = receivers[k] if k < len(receivers) else None
                self.channel(s, r, tp)

    def channel(self, s: _Proc | None, r: _Proc | None, tp: int) -> None:
        last_pp = s.rank.pp_rank if s is not None and s.rank.pp_rank is not None else "?"
        name = f"pp0<-pp{last_pp}/tp{tp}"
        lost = [self.lost[p.index] for p in (s, r) if p is not None and p.index in self.lost]
        if lost:
            self.lowered[name] = "; ".join(lost)
        if s is None or r is None:
            present = s or r
            assert present is not None
            n = len(self.attaches[present.index] if s else self.extracts[present.index])
            what = "attaches" if s else "extracts"
            missing = "stage 0" if s else "the last stage"
            self.add(K.MISSING_RANK,
                     f"no trace from {missing} (tp {tp}): {n} {what} on {who(present.rank)} "
                     "cannot be paired (was that rank traced?)",
                     ranks=[_rank_id(present.rank)], channel=name,
                     time_ns=present.trace.events[0].start_ns if present.trace.events else None)
            return
        if s.index == r.index:
            return  # one process is both ends (pp_size 1): there is no transport to check
        self.observer(s, r, name)
        attaches, extracts = self.attaches[s.index], self.extracts[r.index]
        result = pair(attaches, extracts)
        for ia, ie in result.pairs:
            a, e = attaches[ia], extracts[ie]
            self.microbatch_of[r.eid(e)] = a.seq
            self.compare(s, a, r, e, name)
        for ia in result.orphans:
            a = attaches[ia]
            self.add(K.ORPHAN_ATTACH,
                     f"{who(s.rank)} attached {_names(a.tensors)} (attach #{a.seq}); "
                     f"{who(r.rank)} never extracted it (send skipped, lost, or a crash "
                     "before the send?)",
                     ranks=[_rank_id(s.rank), _rank_id(r.rank)], microbatch=a.seq,
                     time_ns=a.start_ns, events=[s.eid(a)], channel=name)
        for ie in result.unmatched:
            e = extracts[ie]
            self.add(K.UNMATCHED_EXTRACT,
                     f"{who(r.rank)} extracted {_names(e.tensors)} (extract #{e.seq}) with no "
                     f"attach on {who(s.rank)} to pair with",
                     ranks=[_rank_id(s.rank), _rank_id(r.rank)], time_ns=e.start_ns,
                     events=[r.eid(e)], channel=name)

    def observer(self, s: _Proc, r: _Proc, name: str) -> None:
        if not self.attaches[s.index]:
            return
        raised = {classify_error(e) for e in r.trace.events if not e.ok}
        if raised & {K.EXTRACT_NO_OBSERVER, K.EXTRACT_NOT_PP}:
            return  # the engine already said so, with its own message
        bad = [
            e for e in r.trace.events
            if e.direction is Direction.EXTRACT and (
                e.subject_pp_capable is False or e.subject_type in ("NoneType", "None"))
        ]
        if not bad:
            return
        e = bad[0]
        what = "no observer" if e.subject_type in ("NoneType", "None") else (
            f"observer {e.subject_type} without from_pp_tensors")
        self.add(K.NO_PP_OBSERVER,
                 f"{who(s.rank)} attaches auxiliary output but {who(r.rank)} (stage 0) has "
                 f"{what} ({len(bad)} extract calls)",
                 ranks=[_rank_id(s.rank), _rank_id(r.rank)], time_ns=e.start_ns,
                 events=[r.eid(e)], channel=name)

    def compare(self, s: _Proc, a: Event, r: _Proc, e: Event, channel: str) -> None:
        if a.tensors is e.tensors:
            return
        key = (id(a.tensors), id(e.tensors), id(a.keys_before), channel)
        specs = self._compared.get(key)
        if specs is None:
            specs = self._compared[key] = _compare_specs(who(s.rank), who(r.rank), a, e)
        for kind, message, subject in specs:
            self.add(kind, message, ranks=[_rank_id(s.rank), _rank_id(r.rank)],
                     microbatch=a.seq, time_ns=a.start_ns, events=[s.eid(a), r.eid(e)],
                     channel=channel, subject=subject)

    def payload(self, ev: Event) -> tuple[Any, ...]:
        """What TP ranks must agree on, computed once per distinct tensors tuple."""
        got = self._payloads.get(id(ev.tensors))
        if got is None:
            got = self._payloads[id(ev.tensors)] = _payload(ev)
        return got

    def tensor_parallel(self) -> None:
        lasts = [p for p in self.procs if self.is_last(p) and self.attaches[p.index]]
        by_run: dict[tuple[str, int | None], list[_Proc]] = {}
        for p in lasts:
            run = p.trace.events[0].run_id if p.trace.events else ""
            by_run.setdefault((run, p.rank.pp_rank), []).append(p)
        for group in by_run.values():
            tps = sorted({_tp(p.rank) for p in group})
            if len(tps) < 2:
                continue
            ref = min(group, key=lambda p: _tp(p.rank))
            ref_by_seq = {e.seq: e for e in self.attaches[ref.index]}
            payload = self.payload
            for p in group:
                if p is ref or _tp(p.rank) == _tp(ref.rank):
                    continue
                channel = f"{_stage(p.rank)}/tp{_tp(ref.rank)}~tp{_tp(p.rank)}"
                for ev in self.attaches[p.index]:
                    base = ref_by_seq.get(ev.seq)
                    if base is None or base.tensors is ev.tensors or payload(base) == payload(ev):
                        continue
                    self.add(K.TP_DISAGREE,
                             f"{who(ref.rank)} (tp {_tp(ref.rank)}) attached "
                             f"{_describe_diff(base.tensors, ev.tensors)}; {who(p.rank)} "
                             f"(tp {_tp(p.rank)}) attached "
                             f"{_describe_diff(ev.tensors, base.tensors)} for microbatch {ev.seq}",
                             ranks=[_rank_id(ref.rank), _rank_id(p.rank)], microbatch=ev.seq,
                             time_ns=min(base.start_ns, ev.start_ns),
                             events=[ref.eid(base), p.eid(ev)], channel=channel)

    def run(self) -> list[Finding]:
        for p in self.procs:
            self.losses(p)
        for p in self.procs:
            self.errors(p)
            self.hygiene(p)
        self.channels()
        self.tensor_parallel()
        raws = [
            replace(r, microbatch=self.microbatch_of.get(r.events[0], r.microbatch))
            if r.microbatch is None and r.events else r
            for r in self.raws
        ]
        return _summarise(raws, self.lowered)


def _compare_specs(
    ls: str, rs: str, a: Event, e: Event
) -> tuple[tuple[FindingKind, str, str], ...]:
    """What differs between an attach and the extract it paired with (pure)."""
    out: list[tuple[FindingKind, str, str]] = []
    if a.tensors == e.tensors:
        return ()
    a_by = {t.name: t for t in a.tensors}
    e_by = {t.name: t for t in e.tensors}
    foreign = {k[len(PREFIX):] for k in a.keys_before if k.startswith(PREFIX)}
    missing = [t for t in a.tensors if t.name not in e_by]
    extra = [t for t in e.tensors if t.name not in a_by and t.name not in foreign]
    if extra and not missing:
        # Everything attached arrived, plus prefixed keys no attach wrote: someone stored
        # a non-auxiliary value under the prefix and stage 0 popped it as auxiliary output.
        for t in extra:
            out.append((K.PREFIXED_FOREIGN_KEY,
                        f"{rs} extracted `{t.name}` ({t.describe()}) that no attach inserted "
                        f"({ls} attached {_names(a.tensors)}): key `{t.key}` was written "
                        "under the prefix outside attach and popped as auxiliary output", t.key))
    elif missing:
        parts = [f"missing at stage 0: {_names(missing)}"]
        if extra:
            parts.append(f"not attached: {_names(extra)}")
        out.append((K.NAMES_DIFFER,
                    f"{ls} attached {_names(a.tensors)}; {rs} extracted {_names(e.tensors)} "
                    f"({'; '.join(parts)})", ""))
    a_order = [t.name for t in a.tensors if t.name in e_by]
    e_order = [t.name for t in e.tensors if t.name in a_by]
    if a_order != e_order:
        out.append((K.ORDER_DIFFERS,
                    f"{ls} attached in order {', '.join(a_order)}; {rs} extracted in order "
                    f"{', '.join(e_order)}", ""))
    for name in a_order:
        x, y = a_by[name], e_by[name]
        if x == y:
            continue
        side = f"{ls} attached `{_esc(name)}` {{}}; {rs} extracted {{}}"  # name is a template
        if x.shape != y.shape:
            out.append((K.SHAPE_MISMATCH, side.format(x.describe(), y.describe()), name))
        if x.dtype != y.dtype:
            out.append((K.DTYPE_MISMATCH, side.format(x.describe(), y.describe()), name))
        if x.shape == y.shape and x.dtype == y.dtype and x.nbytes != y.nbytes:
            out.append((K.BYTES_MISMATCH,
                        side.format(f"{x.describe()} ({x.nbytes} bytes)", f"{y.nbytes} bytes"),
                        name))
        if x.device_type != y.device_type:
            out.append((K.DEVICE_TYPE_MISMATCH,
                        side.format(f"on {x.device}", f"on {y.device}"), name))
        if (x.fingerprint is not None and y.fingerprint is not None
                and x.fingerprint != y.fingerprint and x.shape == y.shape
                and x.dtype == y.dtype):
            out.append((K.CONTENT_MISMATCH,
                        side.format(f"with content {x.fingerprint[:12]}",
                                    f"content {y.fingerprint[:12]}"), name))
    return tuple(out)


def _payload(ev: Event) -> tuple[tuple[str, tuple[int, ...], str, int, str | None], ...]:
    return tuple((t.name, t.shape, t.dtype, t.nbytes, t.fingerprint) for t in ev.tensors)


def _describe_diff(mine: Sequence[TensorMeta], theirs: Sequence[TensorMeta]) -> str:
    """``mine``, naming only what differs from ``theirs`` (all of it when the names differ)."""
    other = {t.name: t for t in theirs}
    if [t.name for t in mine] != [t.name for t in theirs]:
        shown = list(mine)
    else:
        shown = [t for t in mine if _payload_item(t) != _payload_item(other[t.name])]
    parts = []
    for t in shown:
        text = f"`{t.name}` {t.describe()}"
        if t.fingerprint:
            text += f" content {t.fingerprint[:12]}"
        parts.append(text)
    return ", ".join(parts) if parts else "nothing"


def _payload_item(t: TensorMeta) -> tuple[str, tuple[int, ...], str, int, str | None]:
    return (t.name, t.shape, t.dtype, t.nbytes, t.fingerprint)


def analyze(trace: Trace) -> list[Finding]:
    """Check every cross-rank invariant; return the findings, earliest first."""
    return _Analysis(trace).run()
