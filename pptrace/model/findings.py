"""What the analyzer can find: one ``FindingKind`` per kind of problem, and the ``Finding`` record.

Every finding names both sides where there are two ("rank 3 attached `scores` float32[8, 5];
rank 0 extracted float16[8, 5]"), its ranks, its microbatch (the attach sequence number on the
last stage), its time and its severity.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pptrace.model.messages import MessageEvent, MessageOp
from pptrace.model.trace import EventId

__all__ = ["Category", "Finding", "FindingKind", "MessageId", "Severity"]


class Severity(enum.IntEnum):
    """How bad a finding is; ``--fail-on`` compares against it."""

    INFO = 10
    WARNING = 20
    ERROR = 30

    @classmethod
    def parse(cls, text: str) -> Severity:
        """Parse ``info``/``warning``/``error`` (any case)."""
        return cls[text.strip().upper()]


class Category(enum.Enum):
    """What a finding is about; the analyzer, the reports and the viewer read it from the kind."""

    ENGINE_ERROR = "engine error"  # the engine raised, with its own message
    ABSENCE = "absence"  # an event that should exist is missing (a recording gap can explain it)
    PAYLOAD = "payload"  # what one end carried differs from what the other end carried
    NAMESPACE = "namespace"  # keys and names of the PP dict collide or leak
    RECORDER_LOSS = "recorder loss"  # pptrace itself lost events: other findings are less sure
    # The PP message layer (pptrace.model.messages): a send and its receive disagree, a message
    # went astray, or a receive waits for one that never comes.
    MESSAGE = "message"


E, A, P, N, R, M = (Category.ENGINE_ERROR, Category.ABSENCE, Category.PAYLOAD,
                    Category.NAMESPACE, Category.RECORDER_LOSS, Category.MESSAGE)
_ERR, _WARN = Severity.ERROR, Severity.WARNING


class FindingKind(str, enum.Enum):
    """Every kind of finding: its value, category, default severity and one-line meaning."""

    category: Category
    default_severity: Severity
    description: str  # one line saying what this kind of finding means

    def __new__(cls, value: str, *meta: Any) -> FindingKind:
        # ``*meta`` rather than named parameters: ``FindingKind("tp-disagree")`` looks a member
        # up by its value, and type checkers read this signature for that call too.
        member = str.__new__(cls, value)
        member._value_ = value
        member.category, member.default_severity, member.description = meta
        return member

    # The engine raised (the message is the engine's own).
    ATTACH_NOT_PP = ("attach-not-pp", E, _ERR,
                     "attach got an output without to_pp_tensors (engine error)")
    ATTACH_EMPTY = ("attach-empty", E, _ERR,
                    "to_pp_tensors returned an empty mapping (engine error)")
    ATTACH_BAD_NAME = ("attach-bad-name", E, _ERR,
                       "an auxiliary name is not a non-empty str (engine error)")
    ATTACH_NOT_TENSOR = ("attach-not-tensor", E, _ERR,
                         "an auxiliary value is not a tensor (engine error)")
    ATTACH_DUPLICATE = ("attach-duplicate", E, _ERR,
                        "the prefixed key was already in the dict (engine error)")
    EXTRACT_NO_OBSERVER = ("extract-no-observer", E, _ERR,
                           "stage 0 got auxiliary output but has no observer (engine error)")
    EXTRACT_NOT_PP = ("extract-not-pp", E, _ERR,
                      "stage 0's observer lacks from_pp_tensors (engine error)")
    EXTRACT_NOT_TENSOR = ("extract-not-tensor", E, _ERR,
                          "a prefixed value on stage 0 is not a tensor (engine error)")
    EXTRACT_NOT_RECONSTRUCTED = ("extract-not-reconstructed", E, _ERR,
                                 "from_pp_tensors returned None (engine error)")
    CALL_RAISED = ("call-raised", E, _ERR,
                   "attach or extract raised something other than the engine's errors")
    # Something that should be there is not.
    ORPHAN_ATTACH = ("orphan-attach", A, _WARN,
                     "an attach on the last stage with no extract on stage 0")
    UNMATCHED_EXTRACT = ("unmatched-extract", A, _ERR,
                         "an extract on stage 0 with no attach to pair with")
    NO_PP_OBSERVER = ("no-pp-observer", A, _ERR,
                      "stage 0 has no PP-capable observer while the last stage attaches")
    MISSING_RANK = ("missing-rank", A, _WARN,
                    "one end of a channel left no trace: its calls cannot be paired")
    # What one end carried against the other (``pptrace.analyze.payload`` compares).
    NAMES_DIFFER = ("names-differ", P, _ERR, "the two ends carry different auxiliary names")
    ORDER_DIFFERS = ("order-differs", P, _WARN,
                     "same names at both ends, in a different order")
    SHAPE_MISMATCH = ("shape-mismatch", P, _ERR,
                      "a name's shape differs between attach and extract")
    DTYPE_MISMATCH = ("dtype-mismatch", P, _ERR,
                      "a name's dtype differs between attach and extract")
    BYTES_MISMATCH = ("bytes-mismatch", P, _ERR,
                      "a name's byte count differs (same shape and dtype)")
    DEVICE_TYPE_MISMATCH = ("device-type-mismatch", P, _ERR,
                            "a name's device type differs (cpu vs cuda)")
    CONTENT_MISMATCH = ("content-mismatch", P, _ERR,
                        "fingerprints differ: the payload changed in transit")
    TP_DISAGREE = ("tp-disagree", P, _ERR,
                   "the last stage's TP ranks attached different payloads")
    # Namespace hygiene.
    PREFIXED_FOREIGN_KEY = ("prefixed-foreign-key", N, _ERR,
                            "a non-auxiliary key begins with (or looks like) the prefix")
    RESERVED_NAME = ("reserved-name", N, _ERR,
                     "an auxiliary name equals a reserved or engine key")
    EMPTY_NAME = ("empty-name", N, _ERR, "an auxiliary name is empty")
    NAME_HAS_PREFIX = ("name-has-prefix", N, _WARN,
                       "an auxiliary name itself begins with the prefix")
    LEFTOVER_KEYS = ("leftover-keys", N, _ERR,
                     "prefixed keys remained after a successful extract")
    EXTRACT_OFF_STAGE0 = ("extract-off-stage0", N, _ERR,
                          "a stage other than 0 extracted auxiliary output")
    # Confidence in the rest.
    EVENTS_DROPPED = ("events-dropped", R, _WARN,
                      "the recorder lost events: findings about absences are less sure")
    STATS_NOT_FINAL = ("stats-not-final", R, _WARN,
                       "a process wrote no final stats: its last events may be missing, uncounted")
    WINDOW_CUT = ("window-cut", R, Severity.INFO,
                  "a channel's oldest microbatches lie outside a kept window (rotated away, "
                  "overwritten): not judged")
    UNPAIRED_CALLS = ("unpaired-calls", R, Severity.INFO,
                      "attach or extract calls no channel takes: not paired, so not compared")
    # A process's trace is known to lack records inside its window (``pptrace.analyze.holes``):
    # message records counted as dropped, send or receive numbers missing, receive ends missing
    # though later receives ran, or damaged data the reader skipped in its files. The message
    # findings on its channels are then warnings at most and say so; a receive whose end is
    # missing is no wait. The trace is incomplete, the run need not be.
    INCOMPLETE_TRACE = ("incomplete-trace", R, _WARN,
                        "a process's trace lacks records (counted drops, sequence gaps, damaged "
                        "data): findings on its channels are weakened")
    # The PP message layer (``pptrace.analyze.messages`` pairs each send with its receive).
    MSG_RAISED = ("message-raised", M, _ERR, "a send of a PP message raised")
    MSG_KEYS_DIFFER = ("message-keys-differ", M, _ERR,
                       "a message arrived with other keys than were sent, or was forwarded "
                       "without a key it arrived with (a key lost on the way)")
    MSG_SHAPE_MISMATCH = ("message-shape-mismatch", M, _ERR,
                          "a key's shape differs between a send and its receive")
    MSG_DTYPE_MISMATCH = ("message-dtype-mismatch", M, _ERR,
                          "a key's dtype (or value type) differs between a send and its receive")
    MSG_BYTES_MISMATCH = ("message-bytes-mismatch", M, _ERR,
                          "a key's byte count differs between a send and its receive")
    MSG_DEVICE_MISMATCH = ("message-device-mismatch", M, _ERR,
                           "a key's device type (cpu, cuda) differs between a send and its "
                           "receive")
    MSG_CONTENT_MISMATCH = ("message-content-mismatch", M, _ERR,
                            "a key's fingerprint differs between a send and its receive")
    MSG_SLICES_DIFFER = ("message-slices-differ", M, _ERR,
                         "a tensor sent as TP slices differs across the sending TP ranks: the "
                         "receiver re-assembles a mix (silent corruption)")
    MSG_GATHER_GROUP = ("message-gather-group", M, _ERR,
                        "TP slices re-assembled over an all-gather group of another size than "
                        "the sender sliced over (tensors that many times too large)")
    MSG_WRONG_KIND = ("message-wrong-kind", M, _ERR,
                      "a typed receive got another kind than it asked for, or a message "
                      "carried another kind's keys under its label")
    MSG_STASH_UNCONSUMED = ("message-stash-unconsumed", M, _WARN,
                            "a typed receive stashed a message kind that no later receive took")
    MSG_NEVER_RECEIVED = ("message-never-received", M, _WARN,
                          "a message sent that its receiver never received")
    MSG_UNMATCHED_RECV = ("message-unmatched-recv", M, _ERR,
                          "a message received with no send on its sender to pair with")
    MSG_HANG = ("message-hang", M, _ERR,
                "a receive began and never returned (or failed at its timeout): the rank waits "
                "for a message when the traces stop; a cycle of waits is named (deadlock)")
    MSG_CUT = ("message-cut", M, Severity.INFO,
               "a process's oldest messages lie outside its kept window and a channel of it "
               "cannot be paired by seq (a stash, several peers, an end that kept none)")


del E, A, P, N, R, M


class MessageId(NamedTuple):
    """A stable reference to one message-layer record: its process (index in
    ``Trace.processes``), its op, its sequence number (a receive's two phases share it) and
    whether it is one end of a broadcast: a process numbers its broadcasts' sends and receives
    apart from its point-to-point ones, so ``seq`` is unique per (process, op, broadcast).

    A ``NamedTuple``: the analyzer hands the viewer one per message pair (a million in a long
    run's trace), and a tuple costs a quarter of a frozen dataclass to build and hash.
    """

    process: int
    op: MessageOp
    seq: int
    broadcast: bool = False

    @classmethod
    def of(cls, process: int, event: MessageEvent) -> MessageId:
        """The reference to ``event`` of process ``process``."""
        # (tuple.__new__ in C: a NamedTuple's own __new__ is a Python function, and the
        # analyzer makes one of these per message of a long run)
        return tuple.__new__(cls, (process, event.op, event.seq, event.group != ()))


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem the analyzer found."""

    kind: FindingKind
    severity: Severity
    message: str  # one line, naming both sides where there are two
    ranks: tuple[int, ...] = ()  # global ranks involved (pid when the rank is unknown)
    microbatch: int | None = None  # the attach sequence number on the last stage
    time_ns: int | None = None  # when it happened (the earliest event's start)
    events: tuple[EventId, ...] = ()  # the events involved, attach side first
    channel: str = ""  # "pp0<-pp3/tp0": the attach->extract channel it belongs to
    cascade: int = 0  # later findings on the same channel summarised into this one
    cause: Finding | None = None  # the finding this one follows from (listed just before it)
    messages: tuple[MessageId, ...] = ()  # the message-layer records involved, send first
    # The events and messages of the later occurrences summarised into this one (its cascade),
    # so that every place a report's count stands for can be shown, not the first alone. An
    # identical difference on the following pairs of a channel is counted without a record of
    # its own (at 1M pairs building one costs more than the walk): those pairs are the ones
    # the analyzer's verdicts call differing (``PairRun.differs``). Where to look, not what
    # was found: two findings that say the same are equal whichever of these they list.
    more_events: tuple[EventId, ...] = field(default=(), compare=False)
    more_messages: tuple[MessageId, ...] = field(default=(), compare=False)
