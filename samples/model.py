"""A tiny decoder-style language model with seeded weights, split into pipeline stages.

Every rank builds the same weights from the seed and runs only its own stage's part: stage 0
embeds the tokens, each stage runs its slice of the layers, the last stage applies the LM head.
Stage 0 can also run the whole model, which is how it checks what the last stage sampled.

    model = TinyDecoder(ModelSpec(seed=0))
    hidden = model.embed(tokens, position)
    hidden = model.run_layers(hidden, model.stage_layers(stage, pp_size))
    logits = model.head(hidden)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["ModelSpec", "TinyDecoder", "sample"]

TEMPERATURE = 0.8


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The model's sizes and seed."""

    vocab: int = 96
    hidden: int = 32
    layers: int = 4
    seed: int = 0


class _Block:
    """A pre-norm MLP block with a residual connection."""

    def __init__(self, hidden: int, gen: torch.Generator) -> None:
        scale = 1.0 / math.sqrt(hidden)
        self.w_in = torch.randn(hidden, 2 * hidden, generator=gen) * scale
        self.w_out = torch.randn(2 * hidden, hidden, generator=gen) * scale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.layer_norm(x, x.shape[-1:])
        return x + torch.nn.functional.gelu(h @ self.w_in) @ self.w_out


class TinyDecoder:
    """Embedding, a few blocks and an LM head, all from one seed."""

    def __init__(self, spec: ModelSpec, pp_size: int = 1) -> None:
        self.spec = spec
        gen = torch.Generator().manual_seed(spec.seed)
        self.n_layers = max(spec.layers, pp_size)
        self.embedding = torch.randn(spec.vocab, spec.hidden, generator=gen)
        self.blocks = [_Block(spec.hidden, gen) for _ in range(self.n_layers)]
        self.lm_head = torch.randn(spec.hidden, spec.vocab, generator=gen) / math.sqrt(spec.hidden)
        self.freqs = torch.exp(torch.arange(spec.hidden, dtype=torch.float32) * -0.3)

    def stage_layers(self, stage: int, pp_size: int) -> range:
        """The layers stage ``stage`` of ``pp_size`` runs."""
        return range(stage * self.n_layers // pp_size, (stage + 1) * self.n_layers // pp_size)

    def embed(self, tokens: torch.Tensor, position: int) -> torch.Tensor:
        """Token embedding plus a sinusoidal position code: ``[batch, hidden]``."""
        return self.embedding[tokens] + torch.sin(self.freqs * float(position + 1))

    def run_layers(self, hidden: torch.Tensor, layers: range) -> torch.Tensor:
        """Run the given blocks."""
        for i in layers:
            hidden = self.blocks[i](hidden)
        return hidden

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head: ``[batch, vocab]`` logits."""
        return torch.nn.functional.layer_norm(hidden, hidden.shape[-1:]) @ self.lm_head

    def full(self, tokens: torch.Tensor, position: int) -> torch.Tensor:
        """The whole model in one process (stage 0's reference)."""
        return self.head(self.run_layers(self.embed(tokens, position), range(self.n_layers)))


def sample(logits: torch.Tensor, seed: int) -> torch.Tensor:
    """Sample one token per row with a generator seeded per forward (reproducible anywhere)."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(logits / TEMPERATURE, dim=-1)
    return torch.multinomial(probs, 1, generator=gen).squeeze(1)
