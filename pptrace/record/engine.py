"""pptrace's reference implementation of the engine's auxiliary-output transport contract.

For engines that do not ship SGLang's ``sampling_observer_pp`` module, and for tests. It is
meant to be indistinguishable from SGLang's module (same names, same exceptions and messages at
the same points, same effect on the dict, same return objects, same calls into user objects);
``tests/test_parity.py`` proves it differentially against the released wheel.

    tensors = {"next_token_ids": ids}
    add_auxiliary_output_to_pp_tensors(tensors, output)        # last stage
    output = pop_auxiliary_output_from_pp_tensors(tensors, obs) # stage 0
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any, Protocol, runtime_checkable

import torch

from pptrace.model import errors
from pptrace.model.records import PREFIX

__all__ = [
    "_OUTPUT_PREFIX",
    "PipelineParallelAuxiliaryOutput",
    "PipelineParallelSamplingObserver",
    "add_auxiliary_output_to_pp_tensors",
    "pop_auxiliary_output_from_pp_tensors",
]

_OUTPUT_PREFIX = PREFIX


@runtime_checkable
class PipelineParallelAuxiliaryOutput(Protocol):
    """An auxiliary output that can flatten itself into named tensors."""

    def to_pp_tensors(self) -> Mapping[str, torch.Tensor]: ...


@runtime_checkable
class PipelineParallelSamplingObserver(Protocol):
    """A sampling observer that can rebuild its output from named tensors."""

    def from_pp_tensors(self, tensors: Mapping[str, torch.Tensor]) -> Any: ...


def add_auxiliary_output_to_pp_tensors(tensors: MutableMapping[str, Any], output: Any) -> None:
    """Insert each of the output's tensors into ``tensors`` under the reserved prefix."""
    if output is None:
        return
    if not isinstance(output, PipelineParallelAuxiliaryOutput):
        raise RuntimeError(errors.ATTACH_NOT_PP)
    named = output.to_pp_tensors()
    if not named:
        raise RuntimeError(errors.ATTACH_EMPTY)
    # Items are inserted one by one: a bad item leaves the ones before it in the dict,
    # exactly as the engine does.
    for name, value in named.items():
        if not isinstance(name, str) or not name:
            raise RuntimeError(errors.ATTACH_BAD_NAME)
        if not torch.is_tensor(value):
            raise RuntimeError(errors.ATTACH_NOT_TENSOR.format(name=name))
        key = f"{_OUTPUT_PREFIX}{name}"
        if key in tensors:
            raise RuntimeError(errors.ATTACH_DUPLICATE.format(name=name))
        tensors[key] = value


def pop_auxiliary_output_from_pp_tensors(
    tensors: MutableMapping[str, Any], observer: Any
) -> Any:
    """Remove the prefixed tensors from ``tensors`` and rebuild the output through ``observer``."""
    # A non-str key raises AttributeError on .startswith, as in the engine.
    received = {
        key.removeprefix(_OUTPUT_PREFIX): value
        for key, value in tensors.items()
        if key.startswith(_OUTPUT_PREFIX)
    }
    if not received:
        return None
    if observer is None:
        raise RuntimeError(errors.EXTRACT_NO_OBSERVER)
    if not isinstance(observer, PipelineParallelSamplingObserver):
        raise RuntimeError(errors.EXTRACT_NOT_PP)
    if any(not torch.is_tensor(value) for value in received.values()):
        raise RuntimeError(errors.EXTRACT_NOT_TENSOR)
    output = observer.from_pp_tensors(received)
    if output is None:
        raise RuntimeError(errors.EXTRACT_NOT_RECONSTRUCTED)
    # The observer got ``received`` itself; what it left in there decides what is deleted.
    for name in received:
        del tensors[f"{_OUTPUT_PREFIX}{name}"]
    return output
