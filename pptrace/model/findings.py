"""What the analyzer can find: one ``FindingKind`` per kind of problem, and the ``Finding`` record.

Every finding names both sides where there are two ("rank 3 attached `scores` float32[8, 5];
rank 0 extracted float16[8, 5]"), its ranks, its microbatch (the attach sequence number on the
last stage), its time and its severity.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pptrace.model.trace import EventId

__all__ = ["Finding", "FindingKind", "Severity"]


class Severity(enum.IntEnum):
    """How bad a finding is; ``--fail-on`` compares against it."""

    INFO = 10
    WARNING = 20
    ERROR = 30

    @classmethod
    def parse(cls, text: str) -> Severity:
        """Parse ``info``/``warning``/``error`` (any case)."""
        return cls[text.strip().upper()]


class FindingKind(str, enum.Enum):
    """Every kind of finding, with the severity it carries by default."""

    # The engine raised (the message is the engine's own).
    ATTACH_NOT_PP = "attach-not-pp"  # attach got an output without to_pp_tensors
    ATTACH_EMPTY = "attach-empty"  # to_pp_tensors returned an empty mapping
    ATTACH_BAD_NAME = "attach-bad-name"  # an auxiliary name that is not a non-empty str
    ATTACH_NOT_TENSOR = "attach-not-tensor"  # an auxiliary value that is not a tensor
    ATTACH_DUPLICATE = "attach-duplicate"  # the prefixed key was already in the dict
    EXTRACT_NO_OBSERVER = "extract-no-observer"  # stage 0 got aux output but has no observer
    EXTRACT_NOT_PP = "extract-not-pp"  # stage 0's observer lacks from_pp_tensors
    EXTRACT_NOT_TENSOR = "extract-not-tensor"  # a prefixed value on stage 0 is not a tensor
    EXTRACT_NOT_RECONSTRUCTED = "extract-not-reconstructed"  # from_pp_tensors returned None
    CALL_RAISED = "call-raised"  # attach/extract raised something other than the engine's errors
    # Pairing across ranks.
    ORPHAN_ATTACH = "orphan-attach"  # an attach on the last stage with no extract on stage 0
    UNMATCHED_EXTRACT = "unmatched-extract"  # an extract on stage 0 with no attach to pair with
    NAMES_DIFFER = "names-differ"  # the two ends carry different name sets
    ORDER_DIFFERS = "order-differs"  # same names, different order
    SHAPE_MISMATCH = "shape-mismatch"  # a name's shape differs between the ends
    DTYPE_MISMATCH = "dtype-mismatch"  # a name's dtype differs between the ends
    BYTES_MISMATCH = "bytes-mismatch"  # a name's byte count differs between the ends
    DEVICE_TYPE_MISMATCH = "device-type-mismatch"  # a name's device type differs (cpu vs cuda)
    CONTENT_MISMATCH = "content-mismatch"  # fingerprints differ: the payload changed in transit
    TP_DISAGREE = "tp-disagree"  # the last stage's TP ranks attached different payloads
    # Namespace hygiene.
    PREFIXED_FOREIGN_KEY = "prefixed-foreign-key"  # a non-auxiliary key begins with the prefix
    RESERVED_NAME = "reserved-name"  # an auxiliary name equals a reserved or engine key
    EMPTY_NAME = "empty-name"  # an auxiliary name is empty
    NAME_HAS_PREFIX = "name-has-prefix"  # an auxiliary name itself begins with the prefix
    LEFTOVER_KEYS = "leftover-keys"  # prefixed keys remained after a successful extract
    EXTRACT_OFF_STAGE0 = "extract-off-stage0"  # a stage other than 0 extracted aux output
    NO_PP_OBSERVER = "no-pp-observer"  # stage 0 has no PP-capable observer while attaches happen
    MISSING_RANK = "missing-rank"  # one end of a channel has no trace at all: nothing to pair
    # Confidence.
    EVENTS_DROPPED = "events-dropped"  # the recorder dropped events: absence findings may be wrong

    @property
    def default_severity(self) -> Severity:
        """The severity a finding of this kind carries."""
        if self in _WARNINGS:
            return Severity.WARNING
        if self in _INFOS:
            return Severity.INFO
        return Severity.ERROR

    @property
    def description(self) -> str:
        """One line saying what this kind of finding means."""
        return _DESCRIPTIONS[self]


_WARNINGS = frozenset({FindingKind.ORDER_DIFFERS, FindingKind.ORPHAN_ATTACH,
                       FindingKind.EVENTS_DROPPED, FindingKind.NAME_HAS_PREFIX,
                       FindingKind.MISSING_RANK})
_INFOS: frozenset[FindingKind] = frozenset()

_DESCRIPTIONS: dict[FindingKind, str] = {
    FindingKind.ATTACH_NOT_PP: "attach got an output without to_pp_tensors (engine error)",
    FindingKind.ATTACH_EMPTY: "to_pp_tensors returned an empty mapping (engine error)",
    FindingKind.ATTACH_BAD_NAME: "an auxiliary name is not a non-empty str (engine error)",
    FindingKind.ATTACH_NOT_TENSOR: "an auxiliary value is not a tensor (engine error)",
    FindingKind.ATTACH_DUPLICATE: "the prefixed key was already in the dict (engine error)",
    FindingKind.EXTRACT_NO_OBSERVER: "stage 0 got auxiliary output but has no observer "
    "(engine error)",
    FindingKind.EXTRACT_NOT_PP: "stage 0's observer lacks from_pp_tensors (engine error)",
    FindingKind.EXTRACT_NOT_TENSOR: "a prefixed value on stage 0 is not a tensor (engine error)",
    FindingKind.EXTRACT_NOT_RECONSTRUCTED: "from_pp_tensors returned None (engine error)",
    FindingKind.CALL_RAISED: "attach or extract raised something other than the engine's errors",
    FindingKind.ORPHAN_ATTACH: "an attach on the last stage with no extract on stage 0",
    FindingKind.UNMATCHED_EXTRACT: "an extract on stage 0 with no attach to pair with",
    FindingKind.NAMES_DIFFER: "the two ends carry different auxiliary names",
    FindingKind.ORDER_DIFFERS: "same names at both ends, in a different order",
    FindingKind.SHAPE_MISMATCH: "a name's shape differs between attach and extract",
    FindingKind.DTYPE_MISMATCH: "a name's dtype differs between attach and extract",
    FindingKind.BYTES_MISMATCH: "a name's byte count differs (same shape and dtype)",
    FindingKind.DEVICE_TYPE_MISMATCH: "a name's device type differs (cpu vs cuda)",
    FindingKind.CONTENT_MISMATCH: "fingerprints differ: the payload changed in transit",
    FindingKind.TP_DISAGREE: "the last stage's TP ranks attached different payloads",
    FindingKind.PREFIXED_FOREIGN_KEY: "a non-auxiliary key begins with (or looks like) the "
    "prefix",
    FindingKind.RESERVED_NAME: "an auxiliary name equals a reserved or engine key",
    FindingKind.EMPTY_NAME: "an auxiliary name is empty",
    FindingKind.NAME_HAS_PREFIX: "an auxiliary name itself begins with the prefix",
    FindingKind.LEFTOVER_KEYS: "prefixed keys remained after a successful extract",
    FindingKind.EXTRACT_OFF_STAGE0: "a stage other than 0 extracted auxiliary output",
    FindingKind.NO_PP_OBSERVER: "stage 0 has no PP-capable observer while the last stage "
    "attaches",
    FindingKind.MISSING_RANK: "one end of a channel left no trace: its calls cannot be paired",
    FindingKind.EVENTS_DROPPED: "the recorder lost events: findings about absences are less sure",
}


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
