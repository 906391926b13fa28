"""Argument decoders shared by engines whose ``GroupCoordinator`` has vLLM's shape.

SGLang's ``GroupCoordinator`` is a fork of vLLM's: both take
``broadcast_tensor_dict(self, tensor_dict=None, src=0, group=None, metadata_group=None)`` with
``src`` the source's index in the group (``ranks`` holds the members' global ranks) and return
at once in a group of one. One decoder reads that for both adapters. Stdlib only.

    ranks, src, me = broadcast_group((coordinator, tensors), {"src": 0})
"""

from __future__ import annotations

from typing import Any

from pptrace.engines.spec import Group

__all__ = ["broadcast_group"]


def broadcast_group(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Group | None:
    """``broadcast_tensor_dict``'s group, source and caller, as the method reads them (None in
    a group of one, where it returns the dict at once)."""
    group = args[0]
    if group.world_size <= 1:
        return None
    src = args[2] if len(args) > 2 else kwargs.get("src", 0)
    return tuple(group.ranks), int(src), int(group.rank_in_group)
