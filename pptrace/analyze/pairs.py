"""The analyzer's pairing, handed over: which attach went with which extract on each channel,
and whether the two payloads agree.

The analyzer walks every channel once (``pptrace.analyze.pairing.align`` on the trimmed,
payload-carrying calls of both ends), compares each pair's payloads there for its findings
(``pptrace.analyze.payload``, the one comparison), and keeps what it found here: the pairs as
runs of consecutive sequence numbers with one verdict each, and the calls the walk left
unpaired (its orphans and unmatched extracts, those excused at a window cut left out). The
viewer's grid and the Perfetto export draw these pairs and paint these verdicts; they walk and
judge nothing.

A run is split where the verdict changes (``PairRun.differs``), rather than carrying the
offsets of its differing pairs: a healthy channel is still one run, a payload changed for good
is two (a list of offsets would hold one number per pair after the change), and a consumer
paints a run with one slice, never looks a pair up. An isolated difference costs two runs
more; a channel whose every other pair differs costs one run a pair, no more than offsets.

    book = PairBook()
    book.add(sender, receiver, attaches, extracts, alignment, orphans, unmatched, broadcast,
             differing)          # differing: attach indexes of the pairs whose payloads differ
    pairs = book.pairs()        # in Analysis.pairs
    for run in pairs.runs:
        run.attach_process, run.attach_seq, run.extract_process, run.extract_seq, run.length
        run.differs             # every pair of the run: the two payloads differ (or none does)
    for process, direction, seq in pairs.unpaired: ...

The message layer's pairing is handed over the same way, as each send's receive
(``SentTo``: ``MessageId`` to ``MessageId``), made on first use: a long run's trace holds a
million of them, which ``pptrace analyze`` never reads and the viewer and the Perfetto export
do.

    sent_to = SentTo(received)      # {(sending process, send seq): (receiving side, receive)}
    sent_to[MessageId(3, MessageOp.SEND, 12)]    # MessageId(0, MessageOp.RECV, 12)

Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from typing import Any, Protocol

from pptrace.analyze.pairing import Alignment
from pptrace.model.findings import MessageId
from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.records import Direction, Event

__all__ = ["PairBook", "PairRun", "Pairs", "SentTo"]


@dataclass(frozen=True, slots=True)
class PairRun:
    """``length`` consecutive pairs of processes ``attach_process`` and ``extract_process``
    (indices into ``Trace.processes``): attach seq ``attach_seq + k`` with extract seq
    ``extract_seq + k``.

    ``broadcast``: the channel reached its stage-0 TP rank by broadcast from another TP rank's
    attach, which has a partner of its own TP rank besides. ``differs``: the analyzer's verdict
    on every pair of the run, that the extract's payload differs from the attach's
    (``pptrace.analyze.payload.same`` is False; False: they agree)."""

    attach_process: int
    attach_seq: int
    extract_process: int
    extract_seq: int
    length: int = 1
    broadcast: bool = False
    differs: bool = False

    def seqs(self) -> Iterator[tuple[int, int]]:
        """(attach seq, extract seq) of each pair of the run."""
        for k in range(self.length):
            yield self.attach_seq + k, self.extract_seq + k


@dataclass(frozen=True, slots=True)
class Pairs:
    """Every channel's pairs as runs, and the calls the walk left unpaired: (process,
    direction, seq) of each orphan attach and unmatched extract."""

    runs: tuple[PairRun, ...] = ()
    unpaired: tuple[tuple[int, Direction, int], ...] = ()


def _runs(pairs: Iterable[tuple[int, int]], sender: int, receiver: int,
          broadcast: bool, differs: bool) -> Iterator[PairRun]:
    """(attach seq, extract seq) pairs, consecutive ones joined into runs."""
    run: list[int] | None = None
    for a, e in pairs:
        if run is not None and a == run[0] + run[2] and e == run[1] + run[2]:
            run[2] += 1
            continue
        if run is not None:
            yield PairRun(sender, run[0], receiver, run[1], run[2], broadcast, differs)
        run = [a, e, 1]
    if run is not None:
        yield PairRun(sender, run[0], receiver, run[1], run[2], broadcast, differs)


def _by_verdict(i: int, n: int, differing: Sequence[int]) -> Iterator[tuple[int, int, bool]]:
    """(start, length, differs) of the stretches of attach indexes ``i .. i + n - 1`` with one
    verdict each; ``differing``: the sorted, distinct attach indexes of the pairs that differ."""
    end = i + n
    at = bisect_left(differing, i)
    while i < end:
        if at < len(differing) and differing[at] == i:
            # The longest stretch of consecutive differing indexes from here, by bisection (a
            # payload changed for good is one stretch of a million, not a million steps).
            lo, hi = 1, min(len(differing) - at, end - i)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if differing[at + mid - 1] - i == mid - 1:
                    lo = mid
                else:
                    hi = mid - 1
            yield i, lo, True
            at += lo
            i += lo
        else:  # agreeing pairs up to the next differing one, or the run's end
            stop = min(differing[at], end) if at < len(differing) else end
            yield i, stop - i, False
            i = stop


class PairBook:
    """Collects each channel's pairs as the analyzer walks it."""

    def __init__(self) -> None:
        self._runs: list[PairRun] = []
        self._unpaired: list[tuple[int, Direction, int]] = []
        # receiving process -> extract seq -> (sending process, attach seq), built on the first
        # question about that process (only findings ask)
        self._attach_of: dict[int, dict[int, tuple[int, int]]] = {}

    def add(self, sender: int, receiver: int, attaches: Sequence[Event],
            extracts: Sequence[Event], found: Alignment, orphans: Iterable[int],
            unmatched: Iterable[int], broadcast: bool = False,
            differing: Sequence[int] = ()) -> None:
        """One channel's walk: ``found`` over ``attaches`` and ``extracts`` (indices into
        them), with the orphans and unmatched extracts that are judged as such, and the
        attach indexes (sorted) of the pairs whose payloads the analyzer found to differ."""
        self._unpaired += [(sender, Direction.ATTACH, attaches[i].seq) for i in orphans]
        self._unpaired += [(receiver, Direction.EXTRACT, extracts[j].seq) for j in unmatched]
        for run_i, run_j, run_n in found.runs:
            stretches = (_by_verdict(run_i, run_n, differing) if differing
                         else ((run_i, run_n, False),))
            for i, n, differs in stretches:
                j = run_j + i - run_i
                # A stretch of the walk is a run of seqs when neither side has a gap inside it.
                if (attaches[i + n - 1].seq - attaches[i].seq == n - 1
                        and extracts[j + n - 1].seq - extracts[j].seq == n - 1):
                    self._runs.append(PairRun(sender, attaches[i].seq, receiver,
                                              extracts[j].seq, n, broadcast, differs))
                else:
                    self._runs += _runs(((attaches[i + k].seq, extracts[j + k].seq)
                                         for k in range(n)), sender, receiver, broadcast,
                                        differs)

    def attach_of(self, process: int, extract_seq: int) -> tuple[int, int] | None:
        """(process, seq) of the attach that extract ``extract_seq`` of ``process`` paired
        with, or None."""
        table = self._attach_of.get(process)
        if table is None:
            table = self._attach_of[process] = {}
            for run in self._runs:
                if run.extract_process == process:
                    for a, e in run.seqs():
                        table[e] = (run.attach_process, a)
        return table.get(extract_seq)

    def pairs(self) -> Pairs:
        """What was collected."""
        return Pairs(tuple(self._runs), tuple(self._unpaired))


class _Receiver(Protocol):
    @property
    def index(self) -> int: ...


class SentTo(Mapping[MessageId, MessageId]):
    """Each point-to-point send -> the receive it reached, as ``MessageId``s made on first use
    (``received``: the message checks' own pairing, kept as they made it)."""

    __slots__ = ("_built", "_received")

    def __init__(self, received: Mapping[tuple[int, int], tuple[_Receiver, MessageEvent]]
                 ) -> None:
        self._received = received
        self._built: dict[MessageId, MessageId] | None = None

    def _pairs(self) -> dict[MessageId, MessageId]:
        built = self._built
        if built is None:  # (two threads asking at once both make it, alike: no lock here)
            new, send, of = tuple.__new__, MessageOp.SEND, MessageId.of
            # (tuple.__new__ in C: MessageId's own __new__ is a Python call a pair)
            built = self._built = {new(MessageId, (s, send, seq, False)): of(r.index, e)
                                   for (s, seq), (r, e) in self._received.items()}
        return built

    def __getitem__(self, key: MessageId) -> MessageId:
        return self._pairs()[key]

    def __iter__(self) -> Iterator[MessageId]:
        return iter(self._pairs())

    def __len__(self) -> int:
        return len(self._received)

    def __contains__(self, key: object) -> bool:
        return key in self._pairs()

    def get(self, key: MessageId, default: Any = None) -> Any:
        return self._pairs().get(key, default)

    def keys(self) -> KeysView[MessageId]:
        return self._pairs().keys()

    def items(self) -> ItemsView[MessageId, MessageId]:
        return self._pairs().items()

    def values(self) -> ValuesView[MessageId]:
        return self._pairs().values()

    def __repr__(self) -> str:
        return f"SentTo({self._pairs()!r})"
