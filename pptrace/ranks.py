"""Rank discovery: who this process is in the PP x TP layout, learned without the hot path.

Order of precedence: explicit overrides (arguments or ``PPTRACE_*``), then an engine-provided
layout (SGLang's parallel state when it is initialised), then ``torch.distributed``, then the
launcher's environment (``RANK``, ``WORLD_SIZE``). Anything unknown stays None.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from typing import Any

from pptrace.record import RankInfo

__all__ = ["discover_rank"]


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _from_sglang() -> dict[str, int]:
    """Read SGLang's PP/TP groups when its parallel state is imported and initialised."""
    mod: Any = sys.modules.get("sglang.srt.distributed.parallel_state")
    if mod is None:
        return {}
    found: dict[str, int] = {}
    for prefix, getter in (("pp", "get_pp_group"), ("tp", "get_tp_group")):
        try:
            group = getattr(mod, getter)()
            found[f"{prefix}_rank"] = int(group.rank_in_group)
            found[f"{prefix}_size"] = int(group.world_size)
        except Exception:  # not initialised, or another version: simply unknown
            continue
    return found


def _from_torch() -> dict[str, int]:
    dist: Any = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return {"rank": int(dist.get_rank()), "world_size": int(dist.get_world_size())}
    except Exception:
        pass
    return {}


def discover_rank(
    overrides: Mapping[str, int] | None = None, env: Mapping[str, str] | None = None
) -> tuple[RankInfo, bool]:
    """Return this process's rank info and whether it is final (torch.distributed was up)."""
    env = os.environ if env is None else env
    fields: dict[str, int | None] = {
        "rank": _env_int(env, "RANK"),
        "world_size": _env_int(env, "WORLD_SIZE"),
    }
    from_torch = _from_torch()
    fields.update(from_torch)
    fields.update(_from_sglang())
    fields.update(overrides or {})
    if fields.get("pp_size") == 1 and fields.get("pp_rank") is None:
        fields["pp_rank"] = 0
    info = RankInfo(
        rank=fields.get("rank"),
        world_size=fields.get("world_size"),
        pp_rank=fields.get("pp_rank"),
        pp_size=fields.get("pp_size"),
        tp_rank=fields.get("tp_rank"),
        tp_size=fields.get("tp_size"),
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    return info, bool(from_torch)
