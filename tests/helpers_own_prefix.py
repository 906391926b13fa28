"""A transport of one's own with another key prefix (``__aux__.``), and a 2-rank script using it.

``TRANSPORT`` is SGLang's contract (the same checks, in the same order, with the same texts)
under other function names and another prefix; ``SCRIPT`` is a 2-rank gloo pipeline (rank 1
attaches, rank 0 extracts) that casts ``scores`` to float16 on the way when ``PP_CAST`` is set.
Both are written as files for torchrun, and ``transport()`` loads the first in this process.
"""

from __future__ import annotations

import types

PREFIX = "__aux__."

TRANSPORT = '''
"""A PP auxiliary-output transport of one's own, under the prefix ``__aux__.``."""
import torch

PREFIX = "__aux__."


def attach_aux(tensors, output):
    if output is None:
        return None
    if not hasattr(output, "to_pp_tensors"):
        raise RuntimeError("auxiliary output does not support pipeline-parallel transport")
    named = output.to_pp_tensors()
    if not named:
        raise RuntimeError("auxiliary PP output must contain at least one tensor")
    for name, value in named.items():
        if not isinstance(name, str) or not name:
            raise RuntimeError("auxiliary PP tensor names must be non-empty strings")
        if not torch.is_tensor(value):
            raise RuntimeError(f"auxiliary PP output {name!r} is not a tensor")
        if PREFIX + name in tensors:
            raise RuntimeError(f"duplicate auxiliary PP tensor {name!r}")
        tensors[PREFIX + name] = value
    return None


def pop_aux(tensors, observer):
    received = {k[len(PREFIX):]: v for k, v in tensors.items() if k.startswith(PREFIX)}
    if not received:
        return None
    if observer is None:
        raise RuntimeError("received auxiliary PP output without a sampling observer")
    if not hasattr(observer, "from_pp_tensors"):
        raise RuntimeError("sampling observer does not support pipeline-parallel transport")
    if not all(torch.is_tensor(v) for v in received.values()):
        raise RuntimeError("received a non-tensor auxiliary PP output")
    output = observer.from_pp_tensors(received)
    if output is None:
        raise RuntimeError("sampling observer did not reconstruct its PP output")
    for key in [k for k in tensors if k.startswith(PREFIX)]:
        del tensors[key]
    return output
'''

SCRIPT = '''
"""2 gloo ranks through aux_transport: rank 1 attaches, rank 0 extracts (PP_CAST: a float16 cast
on the way)."""
import datetime
import os

import torch
import torch.distributed as dist
from aux_transport import attach_aux, pop_aux


class Output:
    def __init__(self, named):
        self.named = named

    def to_pp_tensors(self):
        return self.named


class Observer:
    def from_pp_tensors(self, tensors):
        return Output(dict(tensors))


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    for step in range(3):
        if rank == 1:
            tensors = {"next_token_ids": torch.tensor([step, step + 1])}
            attach_aux(tensors, Output({"scores": torch.full((2, 4), float(step)),
                                        "ids": torch.arange(2)}))
            if os.environ.get("PP_CAST"):
                tensors["__aux__.scores"] = tensors["__aux__.scores"].half()
            dist.send_object_list([tensors], dst=0)
        else:
            box = [None]
            dist.recv_object_list(box, src=1)
            out = pop_aux(box[0], Observer())
            assert sorted(box[0]) == ["next_token_ids"] and sorted(out.named) == ["ids", "scores"]
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def transport() -> types.ModuleType:
    """``TRANSPORT`` loaded as a module of this process (``aux_transport``)."""
    mod = types.ModuleType("aux_transport")
    exec(compile(TRANSPORT, "aux_transport.py", "exec"), mod.__dict__)
    return mod
