"""pptrace's ``sitecustomize``: activate pptrace in this Python process before any user code.

``pptrace run`` puts this folder first on ``PYTHONPATH``, so every Python process of the command's
tree (``spawn`` children included, which inherit the environment) runs this file at start-up.
It first runs the ``sitecustomize`` that would otherwise have run (the environment's own), then
activates pptrace when ``PPTRACE_ENABLED`` says so. Nothing here may stop the process.
"""

from __future__ import annotations

import importlib
import os
import sys


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
        from pptrace.startup import activate_from_env
    except Exception as exc:
        print(f"pptrace: cannot import pptrace in {sys.executable}: {exc}", file=sys.stderr)
        return
    activate_from_env()


_chain()
_activate()
