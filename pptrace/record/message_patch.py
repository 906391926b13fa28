"""SGLang's message-layer classes patched in place, and put back exactly.

``GroupCoordinator.send_tensor_dict``/``recv_tensor_dict`` get ``pptrace.record.messages``'
wire wrappers, with the peer each call's arguments name (as the method itself computes it);
``SchedulerPPMixin._pp_recv_typed_dict`` gets the typed-receive wrapper. Each patch returns the
function that restores the exact originals (an inherited method is deleted again, so that
lookup finds the base class's). Which modules and when: ``pptrace.activation.messages``.

    restore = patch_coordinator(GroupCoordinator, log)
    undo = patch_mixin(SchedulerPPMixin, log)
    ...
    undo(); restore()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pptrace.record.messages import MessageLog, Peer, wrap_recv, wrap_send, wrap_typed_recv

__all__ = [
    "COORDINATOR_METHODS",
    "MIXIN_METHOD",
    "coordinator_recv_peer",
    "coordinator_send_peer",
    "patch_coordinator",
    "patch_methods",
    "patch_mixin",
]


# --- SGLang's GroupCoordinator -----------------------------------------------------------------

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


def _typed_expected(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``_pp_recv_typed_dict(self, expected_kind="default", all_gather_group=None)``'s kind."""
    return str(args[1] if len(args) > 1 else kwargs.get("expected_kind", "default"))


def _typed_peer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Peer | None:
    pp = getattr(args[0], "pp_group", None)
    if pp is None:
        return -1, None, 1
    gather = args[2] if len(args) > 2 else kwargs.get("all_gather_group")
    return coordinator_recv_peer((pp, None, gather), {})


def _patch(plan: Sequence[tuple[type, str, Callable[[Any], Any]]]) -> Callable[[], None]:
    """Wrap each ``cls.name`` in place; return the function that puts the exact originals back
    (an inherited method is deleted again, so that lookup finds the base class's)."""
    saved: list[tuple[type, str, Any, bool]] = []
    for cls, name, make in plan:
        own = name in cls.__dict__
        original = cls.__dict__[name] if own else getattr(cls, name)
        saved.append((cls, name, original, own))
        setattr(cls, name, make(original))

    def restore() -> None:
        for cls, name, original, own in reversed(saved):
            if own:
                setattr(cls, name, original)
            elif name in cls.__dict__:
                delattr(cls, name)

    return restore


#: The methods of SGLang's ``GroupCoordinator`` that ``patch_coordinator`` wraps.
COORDINATOR_METHODS = ("send_tensor_dict", "recv_tensor_dict")
#: The method of SGLang's ``SchedulerPPMixin`` that ``patch_mixin`` wraps.
MIXIN_METHOD = "_pp_recv_typed_dict"


def patch_coordinator(coordinator: type, log: MessageLog) -> Callable[[], None]:
    """Wrap SGLang's ``GroupCoordinator.send_tensor_dict``/``recv_tensor_dict`` in place;
    return the exact restore."""
    return _patch([
        (coordinator, "send_tensor_dict",
         lambda f: wrap_send(f, log, coordinator_send_peer, dict_arg=1)),
        (coordinator, "recv_tensor_dict", lambda f: wrap_recv(f, log, coordinator_recv_peer)),
    ])


def patch_mixin(mixin: type, log: MessageLog) -> Callable[[], None]:
    """Wrap SGLang's ``SchedulerPPMixin._pp_recv_typed_dict`` in place; return the exact
    restore."""
    return _patch([(mixin, MIXIN_METHOD,
                    lambda f: wrap_typed_recv(f, log, _typed_expected, _typed_peer))])


def patch_methods(coordinator: type, log: MessageLog,
                  mixin: type | None = None) -> Callable[[], None]:
    """``patch_coordinator`` and, when given, ``patch_mixin`` at once; one restore for both."""
    restores = [patch_coordinator(coordinator, log)]
    if mixin is not None:
        restores.append(patch_mixin(mixin, log))

    def restore() -> None:
        for undo in reversed(restores):
            undo()

    return restore
