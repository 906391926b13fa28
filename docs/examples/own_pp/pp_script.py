"""A 2-stage pipeline-parallel sampling loop on CPU (gloo), with its own transport module.

The last stage (rank 1) samples, attaches its auxiliary output to the tensor dict and sends the
dict round the ring to stage 0 (rank 0), which extracts the output. Not a line of pptrace here:

    torchrun --standalone --nproc-per-node 2 pp_script.py
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from my_transport import attach_aux, pop_aux  # bound by name, as an engine's scheduler does

STEPS = int(os.environ.get("PP_STEPS", "4"))


class AuxOutput:
    """What a sampling observer produces on the last stage (here: per-token scores)."""

    def __init__(self, named: Mapping[str, torch.Tensor]) -> None:
        self.named = dict(named)

    def to_pp_tensors(self) -> Mapping[str, torch.Tensor]:
        return self.named


class Observer:
    """Stage 0's observer: rebuilds the output from the tensors that arrived."""

    def from_pp_tensors(self, tensors: Mapping[str, torch.Tensor]) -> AuxOutput:
        return AuxOutput(tensors)


def last_stage(step: int) -> None:
    tensors: dict[str, Any] = {"next_token_ids": torch.tensor([step, step + 1])}
    attach_aux(tensors, AuxOutput({"scores": torch.full((2, 4), float(step)),
                                   "ids": torch.arange(2, dtype=torch.int64)}))
    dist.send_object_list([tensors], dst=0)  # round the ring: last stage -> stage 0


def first_stage(step: int) -> None:
    box: list[Any] = [None]
    dist.recv_object_list(box, src=1)
    output = pop_aux(box[0], Observer())
    print(f"step {step}: tokens {box[0]['next_token_ids'].tolist()}, "
          f"scores sum {float(output.named['scores'].sum())}", flush=True)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    for step in range(STEPS):
        (last_stage if rank == 1 else first_stage)(step)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
