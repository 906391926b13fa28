"""Rank discovery: who this process is in the PP x TP layout, learned without the hot path.

Order of precedence: explicit overrides (arguments or ``PPTRACE_*``), then an engine-provided
layout (an engine adapter's PP/TP groups, ``pptrace.engines``, when initialised), then
``torch.distributed``, then the launcher's environment (``RANK``, ``WORLD_SIZE``;
``LOCAL_RANK`` on a single node). PP and TP ranks missing after that are derived from the
global rank and the sizes, TP innermost (SGLang's and vLLM's layout). Anything unknown stays
None. ``RankCache`` keeps what was found and asks again until the answer is final
(torch.distributed is up). ``new_instance`` draws the id a recorder keeps for its process
(``RankInfo.instance``), which tells it from one that reuses its host and pid (a restarted
container, another PID namespace).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pptrace import engines
from pptrace.model.records import RankInfo

__all__ = ["RankCache", "discover_rank", "new_instance"]


def new_instance() -> str:
    """A fresh process instance id (OpenTelemetry's ``service.instance.id``): a random uuid4."""
    return uuid.uuid4().hex


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _from_engines() -> dict[str, int]:
    """Read an engine's PP/TP groups when its module is imported and initialised (the first
    engine, in the registry's order, whose groups answer)."""
    for engine in engines.BUILTIN:
        if engine.ranks is not None:
            found = _from_groups(engine.ranks.module, engine.ranks.pp_getter,
                                 engine.ranks.tp_getter)
            if found:
                return found
    return {}


def _from_groups(module: str, pp_getter: str, tp_getter: str) -> dict[str, int]:
    mod: Any = sys.modules.get(module)
    if mod is None:
        return {}
    found: dict[str, int] = {}
    for prefix, getter in (("pp", pp_getter), ("tp", tp_getter)):
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


def _derive_layout(fields: dict[str, int | None]) -> None:
    """Fill PP/TP ranks from the global rank and the sizes, TP innermost.

    SGLang and vLLM place TP innermost: ``rank = pp_rank * tp_size + tp_rank``. Only what is
    unknown is filled; a size that does not divide the world is left alone.
    """
    rank, world = fields.get("rank"), fields.get("world_size")
    pp_size, tp_size = fields.get("pp_size"), fields.get("tp_size")
    if world is not None and world > 0:
        if tp_size is None and pp_size and world % pp_size == 0:
            fields["tp_size"] = tp_size = world // pp_size
        if pp_size is None and tp_size and world % tp_size == 0:
            fields["pp_size"] = pp_size = world // tp_size
    if rank is not None and tp_size:
        if fields.get("tp_rank") is None:
            fields["tp_rank"] = rank % tp_size
        if fields.get("pp_rank") is None and pp_size and rank // tp_size < pp_size:
            fields["pp_rank"] = rank // tp_size
    if fields.get("pp_size") == 1 and fields.get("pp_rank") is None:
        fields["pp_rank"] = 0


def discover_rank(
    overrides: Mapping[str, int] | None = None, env: Mapping[str, str] | None = None,
    instance: str = "",
) -> tuple[RankInfo, bool]:
    """Return this process's rank info (with ``instance``, the recorder's id for the process)
    and whether it is final (torch.distributed was up)."""
    env = os.environ if env is None else env
    fields: dict[str, int | None] = {
        "rank": _env_int(env, "RANK"),
        "world_size": _env_int(env, "WORLD_SIZE"),
    }
    if fields["rank"] is None and _env_int(env, "LOCAL_WORLD_SIZE") == fields["world_size"]:
        fields["rank"] = _env_int(env, "LOCAL_RANK")  # one node: the local rank is global
    from_torch = _from_torch()
    fields.update(from_torch)
    fields.update(_from_engines())
    fields.update(overrides or {})
    _derive_layout(fields)
    info = RankInfo(
        rank=fields.get("rank"),
        world_size=fields.get("world_size"),
        pp_rank=fields.get("pp_rank"),
        pp_size=fields.get("pp_size"),
        tp_rank=fields.get("tp_rank"),
        tp_size=fields.get("tp_size"),
        host=platform.node(),  # gethostname, without importing the network (socket)
        pid=os.getpid(),
        instance=instance,
    )
    return info, bool(from_torch)


class RankCache:
    """A process's rank info, asked of ``provider`` (``(rank, final)``) until it is final; a
    provider that raises is reported to ``on_error`` and the last answer (or the bare pid)
    is used (with ``instance``)."""

    def __init__(self, provider: Callable[[], tuple[RankInfo, bool]],
                 on_error: Callable[[str, BaseException], None], instance: str = "") -> None:
        self._provider = provider
        self._instance = instance
        self._on_error = on_error
        self._rank: RankInfo | None = None
        self.final = False
        self._lock = threading.Lock()
        self._tries = 0

    def learn(self, tries: int = 8) -> bool:
        """Ask during a transport call; True once the rank is final or ``tries`` calls asked
        (the engine's process group is surely up by then: asking further would cost it)."""
        try:
            self.get()
        finally:
            self._tries += 1
        return self.final or self._tries >= tries

    def get(self) -> RankInfo:
        """The rank info (asked again while not final)."""
        found = self._rank
        if found is None or not self.final:
            try:
                rank, final = self._provider()
            except Exception as exc:  # the events must still go out, and be counted
                self._on_error("rank discovery", exc)
                rank, final = found or RankInfo(pid=os.getpid(), instance=self._instance), False
            with self._lock:  # two threads may ask: never replace a final rank by a guess
                if self._rank is None or not self.final:
                    self._rank, self.final = rank, final
                found = self._rank or rank
        return found
