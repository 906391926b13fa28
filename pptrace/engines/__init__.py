"""The engine seam: what is an engine's lives in its adapter; the core asks this registry.

Each adapter is one module of this package (or a third party's, by the entry point group
``pptrace.engines``) whose ``ENGINE`` is a ``pptrace.engines.spec.Engine``: the modules that show
the engine is installed, its auxiliary transport, the message-layer methods to wrap with their
argument decoders, where its PP/TP groups live, its reserved keys, error texts and message
kinds. The core (model, record, activation, analyze, the viewer) imports this package, never an
adapter: a new engine is one adapter module plus its tests, and one line in ``BUILTIN`` (or none,
by entry point). Which engines a process traces is chosen by ``pptrace.engines.select``
(``PPTRACE_ENGINE``, else whichever engine's modules are installed).

Stdlib only and pure (no I/O, no environment: the analyzer imports it):

    from pptrace import engines
    engines.DEFAULT_TRANSPORT.module      # the transport a bare --target MODULE defaults to
    engines.reserved_keys()               # every built-in engine's reserved keys
    engines.engine_named("vllm")          # a built-in engine, or None
"""

from __future__ import annotations

from collections.abc import Iterable

from pptrace.engines import sglang as _sglang
from pptrace.engines import vllm as _vllm
from pptrace.engines.spec import Engine, MethodPatch, RankSource, Transport, TransportErrors

__all__ = [
    "BUILTIN",
    "DEFAULT_ERRORS",
    "DEFAULT_TRANSPORT",
    "Engine",
    "MethodPatch",
    "RankSource",
    "Transport",
    "TransportErrors",
    "engine_named",
    "engine_of_module",
    "forwarded_kinds",
    "kind_keys",
    "message_kinds",
    "reserved_keys",
]

#: The engines pptrace ships adapters for, in detection order.
BUILTIN: tuple[Engine, ...] = (_sglang.ENGINE, _vllm.ENGINE)

#: The transport whose function names a bare ``--target MODULE`` takes, whose prefix a trace
#: without a recorded prefix was written with, and whose error texts the reference transport
#: (``pptrace.record.engine``) raises: the first built-in engine that has one.
DEFAULT_TRANSPORT: Transport = next(e.transport for e in BUILTIN
                                    if e.transport is not None and e.transport.errors is not None)
#: The default transport's error texts.
DEFAULT_ERRORS: TransportErrors = DEFAULT_TRANSPORT.errors or next(
    e.transport.errors for e in BUILTIN if e.transport is not None and e.transport.errors)


def engine_named(name: str, engines: Iterable[Engine] = BUILTIN) -> Engine | None:
    """The engine called ``name`` (case-insensitive) among ``engines``, or None."""
    wanted = name.strip().lower()
    return next((e for e in engines if e.name == wanted), None)


def engine_of_module(module: str, engines: Iterable[Engine] = BUILTIN) -> Engine | None:
    """The engine whose transport or detection module ``module`` is, or None."""
    for e in engines:
        if module in e.detect or (e.transport is not None and e.transport.module == module):
            return e
    return None


def reserved_keys(engines: Iterable[Engine] = BUILTIN) -> frozenset[str]:
    """Every key the engines themselves put in their PP dicts (their kind keys included)."""
    found: set[str] = set()
    for e in engines:
        found |= e.reserved_keys
        if e.kind_key is not None:
            found.add(e.kind_key)
    return frozenset(found)


def kind_keys(engines: Iterable[Engine] = BUILTIN) -> tuple[str, ...]:
    """The keys a dict's message kind is read from, first found wins."""
    return tuple(dict.fromkeys(e.kind_key for e in engines if e.kind_key is not None))


def message_kinds(engines: Iterable[Engine] = BUILTIN) -> tuple[str, ...]:
    """The message kinds the engines name, in their order (the viewer's colours)."""
    return tuple(dict.fromkeys(k for e in engines for k in e.message_kinds))


def forwarded_kinds(engines: Iterable[Engine] = BUILTIN) -> frozenset[str]:
    """The kinds a stage that receives them forwards to the next stage."""
    return frozenset(e.forwarded_kind for e in engines if e.forwarded_kind is not None)
