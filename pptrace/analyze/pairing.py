"""Pairing: which call on the receiving end got which call on the sending end, for every kind
of transfer (the one pairing walk of the analyzer).

A channel's sends are first-in first-out, so the n-th send pairs with the n-th receive: the
n-th payload-carrying attach on the last stage (TP rank j) with the n-th payload-carrying
extract on stage 0 (TP rank j), a PP message's n-th send with its channel's n-th receive, a
broadcast with each member's n-th receive of it. Gaps break that: an attach whose send was
skipped by configuration, events the recorder lost, a crash between attach and send. ``align``
walks both sequences and, where their shapes (names, shapes, dtypes; for a message its keys too)
disagree or the sequence numbers leave their step, looks a few calls ahead for the alignment
under which most of what follows agrees, so that one gap yields one orphan instead of a cascade
of false mismatches.

    found = align(attaches, extracts)                          # attach/extract
    found = align(sends, receives, False, keyed=True, stepped=False)  # messages, broadcasts
    found.pairs(), found.orphans, found.unmatched

The pairs come as diagonal runs (a healthy channel is one run, however long), and apart the
pairs whose two ends do not share one tensors tuple (the only ones whose contents need
comparing).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pptrace.model.records import Event, TensorMeta

__all__ = ["Alignment", "align", "message_shape"]

#: How many attaches or extracts a re-alignment may skip at once.
MAX_SKIP = 4
#: How many steps ahead a candidate alignment is judged on.
WINDOW = 8

Signature = Hashable


def _signature(tensors: tuple[TensorMeta, ...]) -> Signature:
    return tuple((t.name, t.shape, t.dtype) for t in tensors)


def message_shape(m: Any) -> Hashable:
    """A message's shape: its keys, and each value's key, shape, dtype and whether a tensor
    (what a send and its receive agree on in a healthy run), in key order: a receiver reads
    the dict by key, and may list it in another order than its sender (SGLang's
    ``send_recv_tensor_dict`` hands it the non-tensor values first), as the payload comparison
    allows."""
    return (tuple(sorted(m.keys)),
            tuple(sorted((t.key, t.shape, t.dtype, t.is_tensor) for t in m.tensors)))


class _Signatures:
    """Signatures computed once per distinct tensors tuple, equal ones shared (so ``is`` holds).

    Keyed by the tuple's id: the events being paired keep every tuple alive meanwhile.
    """

    def __init__(self) -> None:
        self.by_id: dict[int, Signature] = {}
        self.by_pair: dict[tuple[int, int], Signature] = {}
        self.shared: dict[Signature, Signature] = {}

    def of(self, tensors: tuple[TensorMeta, ...]) -> Signature:
        sig = self.by_id.get(id(tensors))
        if sig is None:
            sig = _signature(tensors)
            sig = self.by_id[id(tensors)] = self.shared.setdefault(sig, sig)
        return sig

    def of_message(self, m: Any) -> Signature:
        """A message's shape (``message_shape``), computed once per keys and tensors tuple."""
        key = (id(m.keys), id(m.tensors))
        sig = self.by_pair.get(key)
        if sig is None:
            sig = message_shape(m)
            sig = self.by_pair[key] = self.shared.setdefault(sig, sig)
        return sig


@dataclass(frozen=True, slots=True)
class Alignment:
    """The outcome of pairing one channel: its pairs as runs, and the calls left unpaired."""

    runs: tuple[tuple[int, int, int], ...]  # (attach index, extract index, length), in order
    unshared: tuple[tuple[int, int], ...]  # pairs whose ends are not one tensors tuple, in order
    orphans: tuple[int, ...]  # attach indexes with no extract
    unmatched: tuple[int, ...]  # extract indexes with no attach

    def pairs(self) -> Iterator[tuple[int, int]]:
        """Every (attach index, extract index) pair, in order."""
        for i, j, n in self.runs:
            for k in range(n):
                yield i + k, j + k


def _possible(a: Event, e: Event, shared: bool) -> bool:
    """False when the extract provably happened before the attach (same host, same clock)."""
    if shared and a.rank.host and a.rank.host == e.rank.host and a.start_ns and e.start_ns:
        return e.start_ns >= a.start_ns
    return True


class _Walk:
    """The state of one pairing walk: both sequences and the sequence-number offset so far."""

    def __init__(self, attaches: Sequence[Any], extracts: Sequence[Any], shared: bool,
                 keyed: bool, stepped: bool) -> None:
        self.attaches, self.extracts, self.shared = attaches, extracts, shared
        self.keyed, self.stepped = keyed, stepped
        # Computed only where two calls do not share one tensors tuple (and, keyed, one keys
        # tuple: the loader shares equal ones), so a healthy walk computes few.
        self.signatures = _Signatures()
        # Both stages call once per microbatch slot, so a healthy run keeps a constant offset
        # between the extract's and the attach's sequence numbers. A skipped send shifts it
        # when stage 0 makes no call for the skipped slot, so it is a hint, never a rule.
        self.offset: int | None = None

    def sigs(self, i: int, j: int) -> tuple[Signature, Signature]:
        """The signatures of attach ``i`` and extract ``j`` (equal ones are one object)."""
        a, e = self.attaches[i], self.extracts[j]
        if self.keyed:
            return self.signatures.of_message(a), self.signatures.of_message(e)
        of = self.signatures.of
        return of(a.tensors), of(e.tensors)

    def same_sig(self, i: int, j: int) -> bool:
        """Attach ``i`` and extract ``j`` carry the same names, shapes and dtypes."""
        a, e = self.attaches[i], self.extracts[j]
        if a.tensors is e.tensors and (not self.keyed or a.keys is e.keys):
            return True
        sa, se = self.sigs(i, j)
        return sa is se

    def same(self, i: int, j: int) -> bool:
        """The signatures agree and the extract may have followed the attach."""
        return self.same_sig(i, j) and _possible(self.attaches[i], self.extracts[j], self.shared)

    def in_step(self, i: int, j: int) -> bool:
        """The pair keeps the sequence-number offset of the pairs before it."""
        return (self.offset is None or not self.stepped
                or self.extracts[j].seq - self.attaches[i].seq == self.offset)

    def cost(self, i: int, j: int, skipped: int) -> int:
        """What aligning (i, j) costs: two per skipped call and per disagreeing pair over the
        next WINDOW steps, one per pair there that leaves the sequence-number offset."""
        bad = off = 0
        for t in range(WINDOW):
            if i + t >= len(self.attaches) or j + t >= len(self.extracts):
                break
            bad += not self.same(i + t, j + t)
            off += not self.in_step(i + t, j + t)
        return 2 * (skipped + bad) + off


def align(attaches: Sequence[Any], extracts: Sequence[Any], shared: bool = True, *,
          keyed: bool = False, stepped: bool = True) -> Alignment:
    """Pair a channel's sending calls with its receiving ones, both in call order (attaches
    with extracts; a message channel's sends with its receives). ``shared``: the two ends may
    stamp one clock, so that where they name one host an extract that began before an attach
    is not its partner (False: order alone, where one host name may hide two clocks, and for
    messages, whose receive waits before its send). Two calls pair straight when their tensors
    agree in names, shapes and dtypes; ``keyed``: the calls are messages, whose dict's keys
    (``message_shape``) must agree too (``unshared`` is then left empty: their caller compares
    every pair). ``stepped``: the two ends number their calls on
    this channel alone, so a pair that leaves the step between the numbers of the pairs before
    it hints at a gap (False: the numbers count other calls too and say nothing here)."""
    runs: list[tuple[int, int, int]] = []
    unshared: list[tuple[int, int]] = []
    orphans: list[int] = []
    unmatched: list[int] = []
    walk = _Walk(attaches, extracts, shared, keyed, stepped)
    diverged: set[tuple[int, int]] = set()  # (id of attach signature, id of extract signature)
    i = j = 0
    run_i, run_j = 0, 0  # where the current run of pairs began
    na, ne = len(attaches), len(extracts)
    offset: int | None = None  # walk.offset, kept in a local on the healthy path
    known_sig = walk.signatures.by_id.get
    known_pair = walk.signatures.by_pair.get
    while i < na and j < ne:
        a, e = attaches[i], extracts[j]
        # Inlined ``_possible``: a pair is impossible only when both clocks are one host's.
        if shared:
            start_a, start_e = a.start_ns, e.start_ns
            if (start_e < start_a and start_a and start_e and a.rank.host
                    and a.rank.host == e.rank.host):
                if i > run_i:
                    runs.append((run_i, run_j, i - run_i))
                unmatched.append(j)  # this extract came before the attach: its own is lost
                j += 1
                run_i, run_j = i, j
                continue
        step = e.seq - a.seq if stepped else 0
        # Inlined ``same and in_step`` (the order is possible, checked just above): the
        # healthy step, most of a trace.
        if offset is None or step == offset:
            tensors_a, tensors_e = a.tensors, e.tensors
            if tensors_a is tensors_e and (not keyed or a.keys is e.keys):
                offset = step
                i += 1
                j += 1
                continue
            # Inlined ``same_sig`` for signatures seen before.
            if keyed:
                sig_a = known_pair((id(a.keys), id(tensors_a)))
                sig_e = known_pair((id(e.keys), id(tensors_e)))
                if sig_a is None or sig_e is None:
                    sig_a, sig_e = walk.sigs(i, j)
            else:
                sig_a, sig_e = known_sig(id(tensors_a)), known_sig(id(tensors_e))
                if sig_a is None or sig_e is None:
                    sig_a, sig_e = walk.sigs(i, j)
            if sig_a is sig_e:
                if not keyed:
                    unshared.append((i, j))
                offset = step
                i += 1
                j += 1
                continue
        walk.offset = offset
        # The same disagreement as one already judged a divergence (a dtype changed for good):
        # judge it the same way without looking ahead again, which keeps the walk linear.
        sig_a, sig_e = walk.sigs(i, j)
        known = (id(sig_a), id(sig_e))
        if known in diverged and walk.in_step(i, j):
            if not keyed and a.tensors is not e.tensors:
                unshared.append((i, j))
            i += 1
            j += 1
            continue
        # Disagreement: a real divergence, or a gap on one side. A skipped call is a finding,
        # like a disagreeing pair; a changed offset is half as suspicious. Skip only when that
        # explains what follows at a lower cost than pairing straight on (ties: straight).
        best, best_cost = (0, 0), walk.cost(i, j, 0)
        for k in range(1, MAX_SKIP + 1):
            c = walk.cost(i + k, j, k)
            if c < best_cost:
                best, best_cost = (k, 0), c
            c = walk.cost(i, j + k, k)
            if c < best_cost:
                best, best_cost = (0, k), c
        skip_a, skip_e = best
        if skip_a or skip_e:
            if i > run_i:
                runs.append((run_i, run_j, i - run_i))
            orphans.extend(range(i, i + skip_a))
            unmatched.extend(range(j, j + skip_e))
            i += skip_a
            j += skip_e
            run_i, run_j = i, j
            continue
        if walk.in_step(i, j):
            diverged.add(known)
        if not keyed and a.tensors is not e.tensors:
            unshared.append((i, j))
        offset = step
        i += 1
        j += 1
    if i > run_i:
        runs.append((run_i, run_j, i - run_i))
    orphans.extend(range(i, na))
    unmatched.extend(range(j, ne))
    return Alignment(tuple(runs), tuple(unshared), tuple(orphans), tuple(unmatched))
