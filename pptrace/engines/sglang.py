"""SGLang, as pptrace traces it: the first engine adapter.

What is SGLang's and nowhere else in pptrace: its auxiliary transport
(``sglang.srt.sampling.sampling_observer_pp``'s attach and extract, the key prefix, the error
texts users grep for), its message layer (``GroupCoordinator.send_tensor_dict``/
``recv_tensor_dict``, ``broadcast_tensor_dict`` and ``send_recv_tensor_dict`` in
``sglang.srt.distributed.parallel_state`` and the mixin's typed receive
``SchedulerPPMixin._pp_recv_typed_dict``, with the decoders that read each call's peer as the
method computes it), its PP/TP groups, the keys its scheduler puts in the PP dicts and the
message kinds it demultiplexes on (``__msg_type__``). Stdlib only: the decoders read the
arguments the wrappers hand them and import nothing.

    from pptrace.engines import engine_named
    sglang = engine_named("sglang")
    sglang.transport.module, sglang.messages[0].method
"""

from __future__ import annotations

from typing import Any

from pptrace.engines.coordinator import broadcast_group
from pptrace.engines.spec import Engine, MethodPatch, Peer, RankSource, Transport, TransportErrors

__all__ = ["ENGINE", "coordinator_recv_peer", "coordinator_send_peer"]

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
MIXIN = "sglang.srt.managers.scheduler_pp_mixin"

ERRORS = TransportErrors(
    # Attach ("add_auxiliary_output_to_pp_tensors"), in the order the engine checks.
    attach_not_pp="auxiliary output does not support pipeline-parallel transport",
    attach_empty="auxiliary PP output must contain at least one tensor",
    attach_bad_name="auxiliary PP tensor names must be non-empty strings",
    attach_not_tensor="auxiliary PP output {name!r} is not a tensor",
    attach_duplicate="duplicate auxiliary PP tensor {name!r}",
    # Extract ("pop_auxiliary_output_from_pp_tensors"), in the order the engine checks.
    extract_no_observer="received auxiliary PP output without a sampling observer",
    extract_not_pp="sampling observer does not support pipeline-parallel transport",
    extract_not_tensor="received a non-tensor auxiliary PP output",
    extract_not_reconstructed="sampling observer did not reconstruct its PP output",
)

TRANSPORT = Transport(
    module="sglang.srt.sampling.sampling_observer_pp",
    attach="add_auxiliary_output_to_pp_tensors",
    extract="pop_auxiliary_output_from_pp_tensors",
    prefix="__sampling_observer_output__.",  # _OUTPUT_PREFIX in SGLang's module
    errors=ERRORS,
)

#: Keys SGLang itself puts in the PP output dict (scheduler_pp_mixin and
#: managers/utils.get_logprob_dict_from_result): an auxiliary name equal to one is a collision.
RESERVED_KEYS = frozenset(
    {
    "__msg_type__",
    "__skip__",
    "next_token_ids",
    "spec_accept_lens",
    "spec_new_seq_lens",
    "spec_bonus_tokens",
    "spec_accept_index",
    "spec_next_chain",
    "spec_next_parents",
    "spec_next_top_scores",
    "draft_topk_p",
    "draft_topk_index",
    "draft_hidden_states",
    "draft_dsa_topk_indices",
    "extend_input_len_per_req",
    "extend_logprob_start_len_per_req",
    "next_token_logprobs",
    "next_token_top_logprobs_val",
    "next_token_top_logprobs_idx",
    "next_token_token_ids_logprobs_val",
    "next_token_token_ids_logprobs_idx",
    "sampling_mask_token_ids",
    "sampling_mask_lengths",
    "sampling_mask_selected_logprobs",
    "sampling_mask_support_logprobs",
    "sampling_mask_statuses",
    "sampling_mask_num_accept_tokens",
    "input_token_logprobs",
    "input_top_logprobs_val",
    "input_top_logprobs_idx",
    "input_token_ids_logprobs_val",
    "input_token_ids_logprobs_idx",
    }
)


def _gather_size(group: Any) -> int:
    return 1 if group is None else int(group.world_size)


def coordinator_send_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """``GroupCoordinator.send_tensor_dict(self, tensor_dict, dst=None, all_gather_group=None,
    async_send=False)``'s destination, as the method computes it (None in a group of one,
    where the method returns at once)."""
    group = args[0]
    if group.world_size == 1:
        return None
    dst = args[2] if len(args) > 2 else kwargs.get("dst")
    gather = args[3] if len(args) > 3 else kwargs.get("all_gather_group")
    if dst is None:
        dst = (group.rank_in_group + 1) % group.world_size
    peer = group.ranks[dst] if 0 <= dst < len(group.ranks) else -1
    return peer, dst, _gather_size(gather)


def coordinator_recv_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """``GroupCoordinator.recv_tensor_dict(self, src=None, all_gather_group=None)``'s source
    (None in a group of one)."""
    group = args[0]
    if group.world_size == 1:
        return None
    src = args[1] if len(args) > 1 else kwargs.get("src")
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    if src is None:
        src = (group.rank_in_group - 1) % group.world_size
    peer = group.ranks[src] if 0 <= src < len(group.ranks) else -1
    return peer, src, _gather_size(gather)


def send_recv_peers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Peer, Peer] | None:
    """``send_recv_tensor_dict(self, send_tensor_dict, send_dst=None, recv_src=None,
    send_all_gather_group=None, recv_all_gather_group=None)``'s destination and source, as the
    method computes them (None in a group of one, where it returns None at once)."""
    group = args[0]
    if group.world_size == 1:
        return None

    def arg(i: int, name: str) -> Any:
        return args[i] if len(args) > i else kwargs.get(name)

    dst, src = arg(2, "send_dst"), arg(3, "recv_src")
    if dst is None:
        dst = (group.rank_in_group + 1) % group.world_size
    if src is None:
        src = (group.rank_in_group - 1) % group.world_size
    n = len(group.ranks)
    return ((group.ranks[dst] if 0 <= dst < n else -1, dst,
             _gather_size(arg(4, "send_all_gather_group"))),
            (group.ranks[src] if 0 <= src < n else -1, src,
             _gather_size(arg(5, "recv_all_gather_group"))))


def send_recv_dst(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """The send half of ``send_recv_tensor_dict``."""
    both = send_recv_peers(args, kwargs)
    return None if both is None else both[0]


def send_recv_src(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """The receive half of ``send_recv_tensor_dict``."""
    both = send_recv_peers(args, kwargs)
    return None if both is None else both[1]


def typed_expected(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``_pp_recv_typed_dict(self, expected_kind="default", all_gather_group=None)``'s kind."""
    return str(args[1] if len(args) > 1 else kwargs.get("expected_kind", "default"))


def typed_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    """The typed receive's source: its PP group's previous stage."""
    pp = getattr(args[0], "pp_group", None)
    if pp is None:
        return -1, None, 1
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    return coordinator_recv_peer((pp, None, gather), {})


ENGINE = Engine(
    name="sglang",
    title="SGLang",
    detect=(TRANSPORT.module, PARALLEL_STATE),
    transport=TRANSPORT,
    messages=(
        MethodPatch(PARALLEL_STATE, "GroupCoordinator", "send_tensor_dict", "send",
                    peer=coordinator_send_peer, dict_arg=1),
        MethodPatch(PARALLEL_STATE, "GroupCoordinator", "recv_tensor_dict", "recv",
                    peer=coordinator_recv_peer),
        # TP rank 0 hands its dict to the stage's other TP ranks (the VPP path's last stage).
        MethodPatch(PARALLEL_STATE, "GroupCoordinator", "broadcast_tensor_dict", "broadcast",
                    group=broadcast_group, dict_arg=1),
        # The NPU pp=2 path: one batch_isend_irecv that sends a dict and receives one.
        MethodPatch(PARALLEL_STATE, "GroupCoordinator", "send_recv_tensor_dict", "send_recv",
                    peer=send_recv_dst, recv_peer=send_recv_src, dict_arg=1),
        MethodPatch(MIXIN, "SchedulerPPMixin", "_pp_recv_typed_dict", "typed_recv",
                    peer=typed_peer, expected=typed_expected, late=True),
    ),
    ranks=RankSource(PARALLEL_STATE),
    reserved_keys=RESERVED_KEYS,
    kind_key="__msg_type__",
    message_kinds=("output", "proxy"),
    forwarded_kind="output",
)
