"""An engine's message-layer methods patched in place, and put back exactly.

Which methods, and how each call's peer is read from its arguments, is the engine adapter's
(``pptrace.engines``: its ``MethodPatch`` records); this module turns each record's role into the
matching wrapper of ``pptrace.record.messages`` and puts it on the class. Each patch returns the
function that restores the exact originals (an inherited method is deleted again, so that lookup
finds the base class's). Which modules and when: ``pptrace.activation.messages``.

    restore = patch_class(GroupCoordinator, log, engine)   # the engine's methods of that class
    ...
    restore()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pptrace.engines import Engine, MethodPatch
from pptrace.record.messages import MessageLog, wrap_recv, wrap_send, wrap_typed_recv

__all__ = ["patch_class", "wrapper_for"]


def wrapper_for(patch: MethodPatch, log: MessageLog) -> Callable[[Any], Any] | None:
    """The function that wraps ``patch``'s method for its role (None: left alone, as a shell
    whose inner calls are recorded)."""
    if patch.role == "shell":
        return None
    if patch.role == "broadcast":
        if patch.group is None:
            raise ValueError(f"{patch.cls}.{patch.method}: a broadcast needs a group decoder")
        group = patch.group
        from pptrace.record.message_broadcast import wrap_broadcast

        return lambda f: wrap_broadcast(f, log, group, dict_arg=patch.dict_arg,
                                        payload_of=patch.payload)
    if patch.role == "broadcast_irecv":
        if patch.group is None or patch.work is None or patch.payload is None:
            raise ValueError(f"{patch.cls}.{patch.method}: a broadcast_irecv needs a group "
                             "decoder, a work attribute and a payload")
        from pptrace.record.message_broadcast import wrap_broadcast_irecv

        on, work, payload = patch.group, patch.work, patch.payload
        return lambda f: wrap_broadcast_irecv(f, log, on, work, payload)
    if patch.peer is None:
        raise ValueError(f"{patch.cls}.{patch.method}: a {patch.role} needs a peer decoder")
    peer = patch.peer
    if patch.role == "send":
        return lambda f: wrap_send(f, log, peer, dict_arg=patch.dict_arg)
    if patch.role == "recv":
        return lambda f: wrap_recv(f, log, peer)
    if patch.role == "typed_recv":
        expected = patch.expected or (lambda args, kwargs: "default")
        return lambda f: wrap_typed_recv(f, log, expected, peer)
    if patch.role == "isend":  # recorded as it is posted, with what it was handed then
        return lambda f: wrap_send(f, log, peer, dict_arg=patch.dict_arg)
    if patch.role == "send_recv":  # one call, recorded as the send and the receive it makes
        if patch.recv_peer is None:
            raise ValueError(f"{patch.cls}.{patch.method}: a send_recv needs a recv_peer decoder")
        source = patch.recv_peer
        return lambda f: wrap_send(wrap_recv(f, log, source), log, peer,
                                   dict_arg=patch.dict_arg, dict_name="send_tensor_dict")
    if patch.role == "irecv":
        from pptrace.record.message_async import wrap_irecv

        return lambda f: wrap_irecv(f, log, peer)
    raise ValueError(f"{patch.cls}.{patch.method}: unknown role {patch.role!r}")


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


def patch_class(cls: type, log: MessageLog, engine: Engine,
                patches: Sequence[MethodPatch] | None = None) -> Callable[[], None]:
    """Wrap ``cls``'s methods that ``engine`` names (or ``patches``) in place; return the exact
    restore (the engine's patches are matched to ``cls`` by its name; a method the class does
    not have, as in another version of the engine, is left out)."""
    chosen = list(patches) if patches is not None else [
        p for p in engine.messages if p.cls == cls.__name__]
    plan = []
    for p in chosen:
        if not hasattr(cls, p.method):  # another version of the engine: nothing to wrap
            continue
        make = wrapper_for(p, log)
        if make is not None:
            plan.append((cls, p.method, make))
    return _patch(plan)
