"""Which engines a process traces: ``PPTRACE_ENGINE``, else whichever are installed.

``PPTRACE_ENGINE`` names engines (comma list) among the built-in adapters and the third-party
ones registered under the entry point group ``pptrace.engines`` (each entry point names an
``Engine`` or a module whose ``ENGINE`` is one); unset, every such engine whose modules'
files are installed is traced (files only: importing an engine's package would pull in its GPU
dependencies). Only the write side (activation) selects; the analyzer reads the registry.

    engines = selected(os.environ.get("PPTRACE_ENGINE", ""))
    module_status("vllm.distributed.parallel_state")   # None, "absent" or "missing"
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable

from pptrace.engines import BUILTIN, Engine, engine_named

__all__ = ["ENTRY_POINTS", "UnknownEngineError", "installed", "module_status", "registered",
           "selected"]

ENTRY_POINTS = "pptrace.engines"


class UnknownEngineError(ValueError):
    """``PPTRACE_ENGINE`` names no engine (the model imports this package, so pptrace's own
    ``ConfigError`` cannot be raised from here; activation reports it as one)."""


def module_status(name: str) -> str | None:
    """Return why ``name`` cannot load ("absent", "missing"), or None when it may load."""
    if name in sys.modules:
        return None
    top = name.split(".", 1)[0]
    locations: list[str] | None
    if top in sys.modules:  # possibly a bare package object (no __spec__): use its path
        locations = list(getattr(sys.modules[top], "__path__", None) or [])
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return "absent"
        locations = list(spec.submodule_search_locations or [])
    if "." not in name:
        return None
    rest = name.split(".")[1:]
    for base in locations:
        path = os.path.join(base, *rest)
        if os.path.exists(path + ".py") or os.path.isdir(path):
            return None
    return "missing"


def installed(engine: Engine) -> bool:
    """True when one of the engine's detection modules may load."""
    return any(module_status(m) is None for m in engine.detect)


def registered(on_error: Callable[[str], None] = lambda _: None) -> tuple[Engine, ...]:
    """The built-in engines, then the third-party ones of the ``pptrace.engines`` entry points
    (one that fails to load is reported to ``on_error`` and skipped)."""
    found = list(BUILTIN)
    try:
        from importlib.metadata import entry_points

        points = list(entry_points(group=ENTRY_POINTS))
    except Exception as exc:  # a broken installation never stops the engine
        on_error(f"cannot list the {ENTRY_POINTS} entry points: {type(exc).__name__}: {exc}")
        points = []
    for point in points:
        try:
            value = point.load()
            engine = getattr(value, "ENGINE", value)
            if not isinstance(engine, Engine):
                raise TypeError(f"{point.value} is not a pptrace.engines.Engine")
        except Exception as exc:
            on_error(f"engine {point.name!r} ({ENTRY_POINTS}): {type(exc).__name__}: {exc}")
            continue
        if engine_named(engine.name, found) is None:
            found.append(engine)
    return tuple(found)


def selected(names: str | tuple[str, ...] = "",
             on_error: Callable[[str], None] = lambda _: None) -> tuple[Engine, ...]:
    """The engines named (``PPTRACE_ENGINE``'s comma list), else every installed one; an
    unknown name raises ``UnknownEngineError`` with the names known."""
    wanted = names.split(",") if isinstance(names, str) else list(names)
    wanted = [n.strip().lower() for n in wanted if n.strip()]
    engines = registered(on_error)
    if not wanted:
        return tuple(e for e in engines if installed(e))
    chosen = []
    for name in wanted:
        engine = engine_named(name, engines)
        if engine is None:
            known = ", ".join(e.name for e in engines)
            raise UnknownEngineError(f"PPTRACE_ENGINE={name!r}: no such engine (known: {known})")
        chosen.append(engine)
    return tuple(dict.fromkeys(chosen))
