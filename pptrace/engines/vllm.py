"""vLLM, as pptrace traces it: the second engine adapter.

vLLM has no auxiliary-output transport: its PP message layer is the whole story. In
``vllm.distributed.parallel_state`` the class ``GroupCoordinator`` moves a stage's
``IntermediateTensors`` with the asynchronous pair ``isend_tensor_dict(tensor_dict, dst=None,
all_gather_group=None, all_gather_tensors=None) -> handles`` and ``irecv_tensor_dict(src=None,
all_gather_group=None, all_gather_tensors=None) -> (dict, handles, postprocess)``; the receive
returns before its tensors arrive (a TP-sliced key holds its slice until the postprocess list
all-gathers it), so its record ends when the caller has waited every handle and run every
postprocess step (``pptrace.record.message_async``). ``send_tensor_dict``/``recv_tensor_dict``
are shells that call the pair and wait: they are left alone, so each message is recorded once.
Argument positions are SGLang's, and so are the peer decoders. Ranks come from vLLM's own PP and
TP groups (``get_pp_group``/``get_tp_group``; TP innermost, as SGLang's).

``GroupCoordinator.broadcast_tensor_dict`` is recorded as a broadcast (a send on the source, a
receive on every other member). So is the V1 model runner's sampled-token broadcast under async
scheduling, which calls ``torch.distributed.broadcast`` on a bare tensor over the PP group (pptrace
never patches ``torch.distributed``: the runner's two methods are wrapped):
``GPUModelRunner._pp_broadcast_prev_sampled_token_ids(sampled_token_ids)`` on the last stage (a
source; skipped by the method when every request is a non-final prefill chunk, which the group
decoder asks the runner's own ``_is_all_reqs_chunked_prefill``), and
``_pp_receive_prev_sampled_token_ids_to_input_batch()`` on the others, which posts the receive
with ``async_op=True`` into ``input_batch.prev_sampled_token_ids`` and keeps the work in
``_pp_recv_work`` until ``_prepare_input_ids`` waits it: recorded by the ``broadcast_irecv`` role
(begun when posted, ended at that wait). Both ends name the tensor ``sampled_token_ids``. The V2
runner's ``PPHandler`` stays unrecorded (``docs/vllm.md`` says why). Stdlib only.
"""

from __future__ import annotations

import sys
from typing import Any

from pptrace.engines.coordinator import broadcast_group
from pptrace.engines.spec import Engine, Group, MethodPatch, Peer, RankSource

__all__ = ["ENGINE"]

PARALLEL_STATE = "vllm.distributed.parallel_state"
_CLS = "GroupCoordinator"
RUNNER = "vllm.v1.worker.gpu_model_runner"
_RUNNER_CLS = "GPUModelRunner"
#: The name both ends of the sampled-token broadcast give its bare tensor.
SAMPLED = "sampled_token_ids"


def _gather_size(group: Any) -> int:
    return 1 if group is None else int(group.world_size)


def isend_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """``isend_tensor_dict(self, tensor_dict, dst=None, all_gather_group=None, ...)``'s
    destination as the method computes it (None in a group of one, where it returns [])."""
    group = args[0]
    if group.world_size <= 1:
        return None
    dst = args[2] if len(args) > 2 else kwargs.get("dst")
    gather = args[3] if len(args) > 3 else kwargs.get("all_gather_group")
    if dst is None:
        dst = (group.rank_in_group + 1) % group.world_size
    peer = group.ranks[dst] if 0 <= dst < len(group.ranks) else -1
    return peer, dst, _gather_size(gather)


def irecv_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """``irecv_tensor_dict(self, src=None, all_gather_group=None, ...)``'s source (None in a
    group of one)."""
    group = args[0]
    if group.world_size <= 1:
        return None
    src = args[1] if len(args) > 1 else kwargs.get("src")
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    if src is None:
        src = (group.rank_in_group - 1) % group.world_size
    peer = group.ranks[src] if 0 <= src < len(group.ranks) else -1
    return peer, src, _gather_size(gather)


def _pp_group() -> Any:
    """vLLM's PP group, as the runner's methods read it (``get_pp_group()``, which the runner
    module imports from ``parallel_state``: loaded by then, never imported here)."""
    return sys.modules[PARALLEL_STATE].get_pp_group()


def _sampled_group(pp: Any) -> Group | None:
    if pp.world_size <= 1:
        return None
    return tuple(pp.ranks), pp.world_size - 1, int(pp.rank_in_group)


def sampled_source_group(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Group | None:
    """``_pp_broadcast_prev_sampled_token_ids``' group (the PP group, from its last stage); None
    when the method skips the broadcast (every request a non-final prefill chunk: the runner's
    own predicate, a read of its discard mask)."""
    if args[0]._is_all_reqs_chunked_prefill():
        return None
    return _sampled_group(_pp_group())


def sampled_member_group(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Group | None:
    """``_pp_receive_prev_sampled_token_ids_to_input_batch``' group (whether it posts a receive
    is seen after the call, by its work handle)."""
    return _sampled_group(_pp_group())


def sampled_sent(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The source's bare tensor, named."""
    return {SAMPLED: args[1] if len(args) > 1 else kwargs[SAMPLED]}


def sampled_buffer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The buffer a member's receive was posted into (the method leaves it on the batch)."""
    return {SAMPLED: args[0].input_batch.prev_sampled_token_ids}


ENGINE = Engine(
    name="vllm",
    title="vLLM",
    detect=(PARALLEL_STATE,),
    messages=(
        MethodPatch(PARALLEL_STATE, _CLS, "isend_tensor_dict", "isend", peer=isend_peer),
        MethodPatch(PARALLEL_STATE, _CLS, "irecv_tensor_dict", "irecv", peer=irecv_peer),
        # Shells around the pair: recorded by it, never twice.
        MethodPatch(PARALLEL_STATE, _CLS, "send_tensor_dict", "shell"),
        MethodPatch(PARALLEL_STATE, _CLS, "recv_tensor_dict", "shell"),
        MethodPatch(PARALLEL_STATE, _CLS, "broadcast_tensor_dict", "broadcast",
                    group=broadcast_group, dict_arg=1),
        # The V1 runner's sampled-token broadcast (async scheduling), on bare tensors.
        MethodPatch(RUNNER, _RUNNER_CLS, "_pp_broadcast_prev_sampled_token_ids", "broadcast",
                    group=sampled_source_group, payload=sampled_sent),
        MethodPatch(RUNNER, _RUNNER_CLS, "_pp_receive_prev_sampled_token_ids_to_input_batch",
                    "broadcast_irecv", group=sampled_member_group, work="_pp_recv_work",
                    payload=sampled_buffer),
    ),
    ranks=RankSource(PARALLEL_STATE),
)
