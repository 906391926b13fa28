"""The sample pipeline's injectable faults: one per row of the engine's failure table.

Each fault says where it happens, what the engine does about it, and what pptrace should find.
This module is data only (no torch), so ``pptrace demo --list-faults`` answers instantly; the
behaviour behind each name lives in ``pptrace_samples.inject``.

    fault = FAULTS["duplicate"]
    fault.error      # the engine's exact message, or None when the engine stays silent
    fault.raises_on  # "last" (attach) or "first" (extract): the stage whose ranks raise
"""

from __future__ import annotations

from dataclasses import dataclass

from pptrace.model import errors

__all__ = ["ALL_FAULTS", "FAULTS", "FIRST", "LAST", "MESSAGE_FAULTS", "Fault", "fault_names"]

LAST = "last"  # the last PP stage: attach
FIRST = "first"  # PP stage 0: extract


@dataclass(frozen=True, slots=True)
class Fault:
    """One injectable fault and what each side should make of it."""

    name: str
    where: str  # stage and call where the fault bites
    what: str  # what the sample does wrong
    engine: str  # what the engine does
    finds: str  # what pptrace should find in the traces
    error: str | None = None  # the engine's exact message when it raises
    raises_on: str | None = None  # LAST or FIRST: the stage whose ranks raise
    needs_tp: int = 1  # the TP size the fault needs (chosen automatically)
    finding: str = ""  # the kind of finding (a FindingKind value) it must raise

    @property
    def raises(self) -> bool:
        """The engine raises on this fault (the run stops with a non-zero status)."""
        return self.error is not None


# Names the samples use for the auxiliary tensors; faults name them in their messages.
TOPK_LOGPROBS = "topk_logprobs"
TOPK_IDS = "topk_ids"
ENTROPY = "entropy"

_LIST = (
    Fault(
        "composite-output",
        "last stage, attach",
        "two observer outputs combined into a composite that has no to_pp_tensors",
        "raises (not PP-capable)",
        "an attach error on every last-stage rank; the output type is not PP-capable",
        errors.ATTACH_NOT_PP,
        LAST,
        finding="attach-not-pp",
    ),
    Fault(
        "empty-output",
        "last stage, attach",
        "an idle batch whose output's to_pp_tensors() returns {}",
        "raises (empty output)",
        "an attach error with no tensors inserted",
        errors.ATTACH_EMPTY,
        LAST,
        finding="attach-empty",
    ),
    Fault(
        "bad-name",
        "last stage, attach",
        "an integer tensor name after a valid one",
        "raises (bad name); the valid item before it stays in the dict",
        "an attach error that left one prefixed key inserted",
        errors.ATTACH_BAD_NAME,
        LAST,
        finding="attach-bad-name",
    ),
    Fault(
        "non-tensor",
        "last stage, attach",
        f"a numpy array instead of a tensor for {ENTROPY!r}",
        "raises (not a tensor); the items before it stay in the dict",
        "an attach error naming the value; the keys inserted before it",
        errors.ATTACH_NOT_TENSOR.format(name=ENTROPY),
        LAST,
        finding="attach-not-tensor",
    ),
    Fault(
        "duplicate",
        "last stage, attach",
        "the previous microbatch's output dict reused instead of a fresh one",
        "raises (duplicate)",
        "an attach error whose dict already held the prefixed keys",
        errors.ATTACH_DUPLICATE.format(name=TOPK_LOGPROBS),
        LAST,
        finding="attach-duplicate",
    ),
    Fault(
        "no-observer",
        "stage 0, extract",
        "the observer is installed on the last stage only",
        "raises (no observer) at the first extract",
        "an extract error with observer type NoneType, after a healthy attach",
        errors.EXTRACT_NO_OBSERVER,
        FIRST,
        finding="extract-no-observer",
    ),
    Fault(
        "old-observer",
        "stage 0, extract",
        "stage 0 runs an older observer without from_pp_tensors",
        "raises (observer not PP-capable) at the first extract",
        "an extract error; the observer is not PP-capable while the last stage attaches",
        errors.EXTRACT_NOT_PP,
        FIRST,
        finding="extract-not-pp",
    ),
    Fault(
        "raw-prefixed-key",
        "last stage writes, stage 0 extract raises",
        "engine code writes a prefixed key holding a Python list, bypassing attach",
        "raises (non-tensor) on stage 0, far from the code that wrote it",
        "a prefixed key extracted that no attach inserted, and it is not a tensor",
        errors.EXTRACT_NOT_TENSOR,
        FIRST,
        finding="prefixed-foreign-key",
    ),
    Fault(
        "observer-none",
        "stage 0, extract",
        "version skew: the last stage sends v2 names that stage 0's v1 observer cannot map",
        "raises (not reconstructed); the dict is left untouched",
        "attach and extract names differ; the extract error left every key in place",
        errors.EXTRACT_NOT_RECONSTRUCTED,
        FIRST,
        finding="extract-not-reconstructed",
    ),
    Fault(
        "tp-disagree",
        "last stage TP ranks, transport",
        "the last stage's TP rank 1 computes a slightly different entropy",
        "nothing: stage 0 silently re-assembles a mix of both ranks' slices",
        "last-stage TP ranks attached different bytes (fingerprints) for one microbatch",
        needs_tp=2,
        finding="tp-disagree",
    ),
    Fault(
        "overwrite-after-attach",
        "last stage, between attach and send",
        "the observer reuses its entropy buffer in place after attach, before the send",
        "nothing: the bytes that arrive differ from what was attached",
        "attach and extract fingerprints differ for the same name",
        finding="content-mismatch",
    ),
    Fault(
        "prefix-lookalike",
        "last stage writes, stage 0 extract",
        "engine code stores a non-auxiliary tensor under a key that starts with the prefix",
        "nothing, but a wrong pop: stage 0 hands it to the observer and later stages lose it",
        "a prefixed key extracted that no attach inserted (namespace collision)",
        finding="prefixed-foreign-key",
    ),
    Fault(
        "reserved-name",
        "last stage, attach",
        "an auxiliary tensor named 'next_token_ids', like the engine's own key",
        "nothing",
        "an auxiliary name that collides with an engine key",
        finding="reserved-name",
    ),
    Fault(
        "shape-in-transit",
        "transport, last stage to stage 0",
        f"the sent copy of {TOPK_LOGPROBS!r} is flattened",
        "nothing at this layer",
        "shape differs between attach and extract for the same name",
        finding="shape-mismatch",
    ),
    Fault(
        "dtype-in-transit",
        "transport, last stage to stage 0",
        f"the sent copy of {ENTROPY!r} is cast to float16",
        "nothing at this layer",
        "dtype differs between attach and extract for the same name",
        finding="dtype-mismatch",
    ),
    Fault(
        "skipped-send",
        "last stage, send",
        "one microbatch's output send is skipped (a skip marker goes instead)",
        "nothing: legitimate when configured, a lost output when not",
        "one attach with no matching extract (an orphan)",
        finding="orphan-attach",
    ),
)

FAULTS: dict[str, Fault] = {f.name: f for f in _LIST}

# Faults of the PP message layer (issue 18), named for the class of failure engine users report.
# Their own registry: FAULTS' tests expect an auxiliary-output finding of each; these are found in
# the message spans (``pptrace.send``/``pptrace.recv``). ``finding`` names the kind the message
# analysis is to raise.
_MESSAGE_LIST = (
    Fault(
        "tp-slice-not-replicated",
        "last stage TP ranks, send",
        "TP rank 1 of the last stage sends different next_token_logprobs; it travels as TP "
        "slices and stage 0 re-assembles a mix of both",
        "nothing: silently corrupted",
        "the last stage's TP ranks sent different fingerprints for a tensor sent as TP slices",
        needs_tp=2,
        finding="message-slices-differ",
    ),
    Fault(
        "wrong-kind-delivered",
        "stage 0, proxy send",
        "one proxy message is labelled 'output': the next stage's typed receive stashes it "
        "and takes the following message as its proxy",
        "hidden states from the wrong forward, then a receive that waits for ever",
        "a receive that expected 'proxy' got 'output' (stashed), and the stashed kind's "
        "consumer is out of step",
        finding="message-wrong-kind",
    ),
    Fault(
        "wrong-gather-group",
        "last stage -> stage 0, one output message",
        "the last stage sends one output message with no all-gather group (every tensor "
        "whole), while stage 0 re-assembles it over its TP group as if each were a TP slice",
        "every tensor of that message arrives TP times too large (TP whole copies stacked)",
        "the sender sliced over a group of 1, the receiver re-assembled over a group of TP "
        "size, and the tensors it names grew TP times",
        needs_tp=2,
        finding="message-gather-group",
    ),
    Fault(
        "key-dropped",
        "stage 0, output forward",
        "stage 0 forwards the output message without 'next_token_logprobs'",
        "nothing at this layer; a later stage misses the logprobs",
        "the keys sent on one hop differ from the keys the message had on the previous hop",
        finding="message-keys-differ",
    ),
    Fault(
        "recv-hangs",
        "stage 0, last proxy send",
        "stage 0 never sends the proxy of the last forward",
        "the next stage waits for it until the communication timeout",
        "a receive begun and never completed (or failed at the timeout): who waited, for "
        "which kind, from whom, and what that peer last sent",
        finding="message-hang",
    ),
)

MESSAGE_FAULTS: dict[str, Fault] = {f.name: f for f in _MESSAGE_LIST}
ALL_FAULTS: dict[str, Fault] = {**FAULTS, **MESSAGE_FAULTS}


def fault_names() -> list[str]:
    """Every fault name, in table order."""
    return [f.name for f in _LIST]
