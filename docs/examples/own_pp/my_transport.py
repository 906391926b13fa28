"""A PP auxiliary-output transport of one's own: the contract of SGLang's
``sampling_observer_pp`` module, vendored under other function names.

pptrace traces it when named as a target:

    pptrace run --target my_transport:attach_aux,pop_aux -- torchrun ... pp_script.py
    pptrace.instrument(targets="my_transport:attach_aux,pop_aux")

The key prefix is the engine's own: pptrace recognises auxiliary keys by it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

PREFIX = "__sampling_observer_output__."


def attach_aux(tensors: MutableMapping[str, Any], output: Any) -> None:
    """Last stage: put each of the output's tensors into ``tensors`` under the prefix."""
    if output is None:
        return
    if not hasattr(output, "to_pp_tensors"):
        raise RuntimeError("auxiliary output does not support pipeline-parallel transport")
    named: Mapping[str, Any] = output.to_pp_tensors()
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


def pop_aux(tensors: MutableMapping[str, Any], observer: Any) -> Any:
    """Stage 0: take the prefixed tensors out of ``tensors`` and rebuild the output."""
    received = {k.removeprefix(PREFIX): v for k, v in tensors.items() if k.startswith(PREFIX)}
    if not received:
        return None
    if observer is None:
        raise RuntimeError("received auxiliary PP output without a sampling observer")
    output = observer.from_pp_tensors(received)
    if output is None:
        raise RuntimeError("sampling observer did not reconstruct its PP output")
    for key in [k for k in tensors if k.startswith(PREFIX)]:
        del tensors[key]
    return output
