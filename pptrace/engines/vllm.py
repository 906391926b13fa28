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
receive on every other member). The sampled-token broadcasts of the model runners
(``GPUModelRunner._pp_broadcast_prev_sampled_token_ids`` and its receive, the V2 runner's
``PPHandler``) call ``torch.distributed.broadcast`` directly on a bare tensor, the receive
asynchronously on a side stream: pptrace does not patch ``torch.distributed`` globally, so those
stay unrecorded (``docs/vllm.md`` says what that leaves unseen). Stdlib only.
"""

from __future__ import annotations

from typing import Any

from pptrace.engines.coordinator import broadcast_group
from pptrace.engines.spec import Engine, MethodPatch, Peer, RankSource

__all__ = ["ENGINE"]

PARALLEL_STATE = "vllm.distributed.parallel_state"
_CLS = "GroupCoordinator"


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
    ),
    ranks=RankSource(PARALLEL_STATE),
)
