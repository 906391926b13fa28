"""What an engine adapter declares: the shape of ``pptrace.engines``' records.

An adapter is one module whose ``ENGINE`` is an ``Engine``: the modules that show the engine is
installed, its auxiliary transport (module, function names, key prefix, error texts), the methods
of its message layer to wrap (with the decoders that read each call's peer from its arguments,
as the method itself computes it), where its PP/TP groups live, its reserved keys and its message
kinds. Nothing here imports torch or the engine: the records are plain tuples of names, and a
decoder only reads the arguments a wrapper hands it.

NamedTuples rather than frozen dataclasses: the bootstrap reads the default transport from here
in every Python process of a traced run, and ``dataclasses`` alone costs milliseconds there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Engine", "Group", "GroupOf", "MethodPatch", "Payload", "Peer", "PeerOf",
           "RankSource", "Transport", "TransportErrors"]

#: A call's other end: (global rank or -1, the index in its group or None, all-gather size).
Peer = tuple[int, "int | None", int]
#: Reads a call's peer from its ``(args, kwargs)``; None: the call moves nothing (a group of one).
PeerOf = Callable[[tuple[Any, ...], dict[str, Any]], "Peer | None"]
#: A broadcast's group: (its members' global ranks in group order, the source's index in it,
#: the calling process's index in it).
Group = tuple[tuple[int, ...], int, int]
#: Reads a broadcast call's ``Group`` from its ``(args, kwargs)``; None: it moves nothing.
GroupOf = Callable[[tuple[Any, ...], dict[str, Any]], "Group | None"]
#: Reads what a call on bare tensors moves, as a dict named by the adapter (the same names on
#: both ends, so that a broadcast's source and members compare key by key).
Payload = Callable[[tuple[Any, ...], dict[str, Any]], "dict[str, Any]"]


class TransportErrors(NamedTuple):
    """The engine's messages for attach and extract failures, in the order it checks."""

    attach_not_pp: str
    attach_empty: str
    attach_bad_name: str
    attach_not_tensor: str  # formatted with name=
    attach_duplicate: str  # formatted with name=
    extract_no_observer: str
    extract_not_pp: str
    extract_not_tensor: str
    extract_not_reconstructed: str


class Transport(NamedTuple):
    """An auxiliary-output transport: a module with an attach and an extract function."""

    module: str
    attach: str
    extract: str
    prefix: str  # the key prefix attach inserts under
    errors: TransportErrors | None = None


class MethodPatch(NamedTuple):
    """One message-layer method to wrap.

    ``role``: ``send`` (a blocking send of the dict at ``dict_arg``), ``recv`` (a blocking
    receive returning the dict), ``typed_recv`` (a receive that knows the kind it expects:
    ``expected`` reads it), ``isend``/``irecv`` (an asynchronous pair: the record ends when the
    caller waits on what it returned), ``shell`` (a blocking wrapper around the async pair:
    recorded by the pair, never twice), ``broadcast`` (one source, every other group member
    receives: ``group`` reads the group, the source's dict is at ``dict_arg``), ``send_recv``
    (one call that sends the dict at ``dict_arg`` to ``peer`` and receives from ``recv_peer``:
    recorded as a send and a receive), ``broadcast_irecv`` (a member's asynchronous receive of
    a broadcast: the call posts it and leaves its work handle in the attribute ``work`` of its
    object, ``args[0]``; recorded begun when posted, ended when the caller waits that handle,
    with what the dict ``payload`` read when it was posted holds then). ``payload``: for a call
    on bare tensors, the dict it moves (a source's read before the call, a member's buffers
    after it) instead of the dict at ``dict_arg``. ``late``: the method's class may still be
    executing when its module is seen, so it is patched at the first call of a method that is
    not late.
    """

    module: str
    cls: str
    method: str
    role: str
    peer: PeerOf | None = None
    dict_arg: int = 1
    expected: Callable[[tuple[Any, ...], dict[str, Any]], str] | None = None
    late: bool = False
    group: GroupOf | None = None
    recv_peer: PeerOf | None = None
    payload: Payload | None = None
    work: str | None = None


class RankSource(NamedTuple):
    """Where the engine keeps its PP and TP groups (each with ``rank_in_group``/``world_size``)."""

    module: str
    pp_getter: str = "get_pp_group"
    tp_getter: str = "get_tp_group"


class Engine(NamedTuple):
    """One engine, as pptrace traces it (see the module doc)."""

    name: str  # what PPTRACE_ENGINE names it by
    title: str  # how messages name it ("SGLang")
    detect: tuple[str, ...]  # modules whose files show the engine is installed
    transport: Transport | None = None
    messages: tuple[MethodPatch, ...] = ()
    ranks: RankSource | None = None
    #: Keys the engine itself puts in its PP dicts: an auxiliary name equal to one collides.
    reserved_keys: frozenset[str] = frozenset()
    #: The key a dict's message kind is read from (None: the engine's dicts carry no kind).
    kind_key: str | None = None
    message_kinds: tuple[str, ...] = ()
    #: The kind a stage forwards to the next one when it receives it (the ring of outputs).
    forwarded_kind: str | None = None
