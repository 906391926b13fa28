"""What each fault in ``pptrace_samples.faults`` does to the pipeline, as hooks on the healthy path.

The pipeline asks its ``FaultPlan`` at five points: which observer stage 0 runs, which dict the
last stage fills, which output it attaches, what happens between attach and send, and which dict
it sends. With no fault every hook returns the healthy answer. A fault applies from forward
``fault_at`` on (``skipped-send`` only at that forward; the stage-0 observer faults always).

    plan = FaultPlan(FAULTS["duplicate"], at=2, tp_rank=0)
    tensors = plan.fresh_dict(k, previous)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from pptrace.model.records import PREFIX

from .faults import ENTROPY, TOPK_LOGPROBS, Fault
from .observer import TopKOutput
from .transport import MSG_TYPE

__all__ = ["FaultPlan", "LOOKALIKE_KEY"]

#: The non-auxiliary key that ``prefix-lookalike`` writes (meant for the stages after 0).
LOOKALIKE_KEY = PREFIX + "sampler_seed"
#: The names a newer observer version uses (``observer-none``): stage 0's cannot map them.
V2_NAMES = ("topk_values", "topk_indices", ENTROPY)


class CompositeOutput:
    """Two outputs combined; the composite forgot to implement ``to_pp_tensors``."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts


class NamedOutput:
    """An output whose ``to_pp_tensors`` returns a fixed mapping (possibly a broken one)."""

    def __init__(self, named: Mapping[Any, Any]) -> None:
        self.named = named

    def to_pp_tensors(self) -> Mapping[Any, Any]:
        return self.named


class OldObserver:
    """An observer from before PP support: it observes but cannot rebuild from tensors."""

    def observe(self, logits: torch.Tensor) -> None:
        return None


class FaultPlan:
    """The hooks one rank applies for one fault (or none)."""

    def __init__(self, fault: Fault | None, at: int, tp_rank: int) -> None:
        self.name = fault.name if fault is not None else None
        self.at = at
        self.tp_rank = tp_rank

    def _on(self, name: str, k: int) -> bool:
        return self.name == name and k >= self.at

    def stage0_observer(self, healthy: Any) -> Any:
        """The observer stage 0 passes to extract."""
        if self.name == "no-observer":
            return None
        if self.name == "old-observer":
            return OldObserver()
        return healthy

    def fresh_dict(self, k: int, previous: dict[str, Any] | None) -> dict[str, Any]:
        """The output dict the last stage fills for forward ``k``."""
        if self._on("duplicate", k) and previous is not None:
            return previous  # the bug: a dict kept from the previous microbatch
        return {}

    def output_for(self, k: int, out: TopKOutput, ids: torch.Tensor) -> Any:
        """The auxiliary output the last stage attaches for forward ``k``."""
        named: dict[Any, Any] = dict(out.to_pp_tensors())
        if self._on("composite-output", k):
            return CompositeOutput(out, TopKOutput(out.topk_logprobs, out.topk_ids, out.entropy))
        if self._on("empty-output", k):
            return NamedOutput({})
        if self._on("bad-name", k):
            return NamedOutput({TOPK_LOGPROBS: out.topk_logprobs, 0: out.topk_ids})
        if self._on("non-tensor", k):
            named[ENTROPY] = out.entropy.numpy()
            return NamedOutput(named)
        if self._on("observer-none", k):
            return TopKOutput(out.topk_logprobs, out.topk_ids, out.entropy, names=V2_NAMES)
        if self._on("reserved-name", k):
            named["next_token_ids"] = ids
            return NamedOutput(named)
        if self._on("tp-disagree", k) and self.tp_rank == 1:
            # This TP rank's reduction came out slightly different.
            return TopKOutput(out.topk_logprobs, out.topk_ids, out.entropy + 1e-3)
        return out

    def after_attach(self, k: int, tensors: dict[str, Any], out: TopKOutput) -> None:
        """What happens to the attached dict before it is sent."""
        if self._on("overwrite-after-attach", k):
            out.entropy.mul_(0.5)  # the observer reuses its buffer for the next batch
        elif self._on("raw-prefixed-key", k):
            tensors[PREFIX + "entropy_history"] = [0.0] * out.entropy.numel()
        elif self._on("prefix-lookalike", k):
            tensors[LOOKALIKE_KEY] = torch.tensor([k], dtype=torch.int64)

    def to_send(self, k: int, tensors: dict[str, Any]) -> dict[str, Any]:
        """The dict that goes on the wire for forward ``k`` (a copy, as in the engine)."""
        if self.name == "skipped-send" and k == self.at:
            return {MSG_TYPE: "output", "__skip__": True}
        send = dict(tensors)
        if self._on("shape-in-transit", k):
            send[PREFIX + TOPK_LOGPROBS] = send[PREFIX + TOPK_LOGPROBS].reshape(-1)
        elif self._on("dtype-in-transit", k):
            send[PREFIX + ENTROPY] = send[PREFIX + ENTROPY].to(torch.float16)
        send[MSG_TYPE] = "output"
        return send
