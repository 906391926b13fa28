"""pptrace's ``sitecustomize``: activate pptrace in this Python process before any user code.

``pptrace run`` puts this folder first on ``PYTHONPATH``, so every Python process of the command's
tree (``spawn`` children included, which inherit the environment) runs this file at start-up. It
first runs the ``sitecustomize`` that would otherwise have run (the environment's own). Then, when
``PPTRACE_ENABLED`` says so, it waits for SGLang's transport module with a one-name import hook and
activates pptrace (``pptrace.activation.startup.activate_from_env``) the moment that module has
loaded, before anything can import from it. A process that never loads it imports nothing of
pptrace. Nothing here may stop the process.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

# pptrace.activation.sglang_module.MODULE, repeated so that waiting for it imports nothing.
_MODULE = "sglang.srt.sampling.sampling_observer_pp"


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, as if this one were not there."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            print(f"Error in sitecustomize; {type(exc).__name__}: {exc}", file=sys.stderr)
    except Exception as exc:  # what site.py itself would do: say so, carry on
        print(f"Error in sitecustomize; {type(exc).__name__}: {exc}", file=sys.stderr)
    if "sitecustomize" not in sys.modules and mine is not None:
        sys.modules["sitecustomize"] = mine


def _activate() -> None:
    try:
        from pptrace.activation.startup import activate_from_env
    except Exception as exc:
        print(f"pptrace: cannot import pptrace in {sys.executable}: {exc}", file=sys.stderr)
        return
    activate_from_env()  # patches the module that has just loaded; never raises


class _Loader:
    """The real loader, then pptrace's activation."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._real, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._real
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._real
        self._real.exec_module(module)
        _activate()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _WaitForEngine:
    """A meta-path finder for one name; it steps aside once the module has been seen."""

    busy = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _MODULE or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self.busy = False
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        try:
            sys.meta_path.remove(self)  # pptrace's own hook takes over from here
        except ValueError:
            pass
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]  # a duck-typed Loader
        return spec


_chain()
if os.environ.get("PPTRACE_ENABLED", "").strip().lower() in ("1", "true", "yes", "on"):
    if _MODULE in sys.modules:  # loaded by an earlier sitecustomize: patch it now
        _activate()
    else:
        sys.meta_path.insert(0, _WaitForEngine())
