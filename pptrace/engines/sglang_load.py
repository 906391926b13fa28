"""Find SGLang's transport module (``sglang.srt.sampling.sampling_observer_pp``): SGLang's adapter.

    mod = load_transport_module()                  # the engine's module, or None
    mod = load_transport_module(allow_bare=True)   # also without SGLang's heavy dependencies

``allow_bare`` is for tests and the sample pipeline: when ``import sglang`` fails for want of its
GPU dependencies, a bare package object pointing at the installed folder is registered so that the
transport module (which needs only torch) loads on its own. Never use it inside a real engine.
To trace a transport module of one's own, name it as a target instead (``pptrace run --target``,
``pptrace.instrument(targets=...)``; see ``pptrace.model.target``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from pptrace.engines.sglang import TRANSPORT

MODULE, ATTACH, EXTRACT = TRANSPORT.module, TRANSPORT.attach, TRANSPORT.extract

__all__ = ["ATTACH", "EXTRACT", "MODULE", "load_transport_module"]


def load_transport_module(allow_bare: bool = False) -> types.ModuleType | None:
    """Return SGLang's transport module, or None when it is not installed or lacks the API."""
    mod: types.ModuleType | None
    try:
        mod = importlib.import_module(MODULE)
    except Exception:
        if not allow_bare:
            return None
        mod = _load_bare()
    if mod is None or not (hasattr(mod, ATTACH) and hasattr(mod, EXTRACT)):
        return None
    return mod


def _load_bare() -> types.ModuleType | None:
    if isinstance(sys.modules.get("sglang"), types.ModuleType) and MODULE in sys.modules:
        return sys.modules[MODULE]
    # Drop half-imported leftovers of the failed real import first.
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    bare = types.ModuleType("sglang")
    bare.__path__ = list(spec.submodule_search_locations)
    # The spec the real package has: importlib.util.find_spec("sglang") keeps answering.
    bare.__spec__ = spec
    sys.modules["sglang"] = bare
    try:
        return importlib.import_module(MODULE)
    except Exception:
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
        return None
