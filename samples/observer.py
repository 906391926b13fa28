"""The sample's sampling observer and its auxiliary output (top-k log-probabilities, entropy).

The last stage's observer computes a ``TopKOutput`` from the logits it sampled from; the output
flattens itself into named tensors (``to_pp_tensors``) for the trip around the PP ring, and
stage 0's observer rebuilds it (``from_pp_tensors``), returning None for names it cannot map.

    out = TopKObserver().observe(logits)
    named = out.to_pp_tensors()            # {"topk_logprobs": ..., "topk_ids": ..., "entropy": ...}
    again = TopKObserver().from_pp_tensors(named)
    assert describe_difference(again, out) is None
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .faults import ENTROPY, TOPK_IDS, TOPK_LOGPROBS

__all__ = ["NAMES", "TopKObserver", "TopKOutput", "describe_difference"]

NAMES = (TOPK_LOGPROBS, TOPK_IDS, ENTROPY)


@dataclass
class TopKOutput:
    """Per request: the k best log-probabilities, their token ids, and the entropy."""

    topk_logprobs: torch.Tensor  # [batch, k] float32
    topk_ids: torch.Tensor  # [batch, k] int64
    entropy: torch.Tensor  # [batch] float32
    names: tuple[str, str, str] = NAMES

    def to_pp_tensors(self) -> Mapping[str, torch.Tensor]:
        """Flatten into named tensors (the engine prefixes each name)."""
        return dict(zip(self.names, (self.topk_logprobs, self.topk_ids, self.entropy), strict=True))


@dataclass
class TopKObserver:
    """Computes the auxiliary output on the last stage and rebuilds it on stage 0."""

    k: int = 4

    def observe(self, logits: torch.Tensor) -> TopKOutput:
        """The auxiliary output for one sampled batch."""
        logprobs = torch.log_softmax(logits, dim=-1)
        top = logprobs.topk(self.k, dim=-1)
        entropy = -(logprobs.exp() * logprobs).sum(dim=-1)
        return TopKOutput(top.values.contiguous(), top.indices.contiguous(), entropy)

    def from_pp_tensors(self, tensors: Mapping[str, torch.Tensor]) -> TopKOutput | None:
        """Rebuild the output; None when a name this version needs is missing."""
        if any(name not in tensors for name in NAMES):
            return None
        return TopKOutput(tensors[TOPK_LOGPROBS], tensors[TOPK_IDS], tensors[ENTROPY])


def describe_difference(got: TopKOutput, want: TopKOutput) -> str | None:
    """None when both outputs are identical (shape, dtype, bytes), else the first difference."""
    for name, a, b in (
        (TOPK_LOGPROBS, got.topk_logprobs, want.topk_logprobs),
        (TOPK_IDS, got.topk_ids, want.topk_ids),
        (ENTROPY, got.entropy, want.entropy),
    ):
        if a.shape != b.shape:
            return f"{name}: shape {list(a.shape)}, expected {list(b.shape)}"
        if a.dtype != b.dtype:
            return f"{name}: dtype {a.dtype}, expected {b.dtype}"
        if not torch.equal(a, b):
            return f"{name}: values differ"
    return None
