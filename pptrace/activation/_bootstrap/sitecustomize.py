"""pptrace's ``sitecustomize``: activate pptrace in this Python process before any user code.

``pptrace run`` puts this folder first on ``PYTHONPATH``, so every Python process of the command's
tree (``spawn`` children included, which inherit the environment) runs this file at start-up. It
first runs the ``sitecustomize`` that would otherwise have run (the environment's own). Then, when
``PPTRACE_ENABLED`` says so, it waits for the target modules (``PPTRACE_TARGETS``; the default
transport module otherwise) and for the message layer of each engine that has no transport
(vLLM's ``parallel_state``: its processes never load a transport module) with pptrace's
import hook (``pptrace.activation.hook``) and activates pptrace
(``pptrace.activation.startup.activate_from_env``) the moment the first has loaded, before
anything can import from it. A process that never loads one imports only the hook, the target
grammar and the engine registry (stdlib only: no torch, no OpenTelemetry, no thread). Nothing
here may stop the process.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


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


def _activate(module: Any = None) -> None:
    try:
        from pptrace.activation.startup import activate_from_env
    except Exception as exc:
        print(f"pptrace: cannot import pptrace in {sys.executable}: {exc}", file=sys.stderr)
        return
    activate_from_env()  # patches the module that has just loaded; never raises


def _message_layers() -> tuple[str, ...]:
    """The message-layer modules of the engines with no transport of their own (the registry's,
    narrowed by ``PPTRACE_ENGINE``); none when ``PPTRACE_MESSAGES`` is off."""
    if os.environ.get("PPTRACE_MESSAGES", "1").strip().lower() in ("0", "false", "no", "off"):
        return ()
    from pptrace import engines

    named = [n for n in os.environ.get("PPTRACE_ENGINE", "").split(",") if n.strip()]
    chosen = [e for e in (engines.engine_named(n) for n in named) if e is not None] if named \
        else list(engines.BUILTIN)
    return tuple(e.messages[0].module for e in chosen if e.transport is None and e.messages)


def _start() -> None:
    """Wait for the target modules (or activate now if one is loaded already)."""
    root = os.environ.get("PPTRACE_RUN_PID", "") == str(os.getpid())
    try:
        from pptrace.activation.hook import ImportHook
        from pptrace.model.errors import ConfigError
        from pptrace.model.target import parse_targets
    except Exception as exc:  # another interpreter than pptrace's: said once, by the root
        if root:
            print(f"pptrace: cannot import pptrace in {sys.executable} ({type(exc).__name__}: "
                  f"{exc}); its processes are not traced", file=sys.stderr)
        return
    raw = os.environ.get("PPTRACE_TARGETS")
    try:
        modules = tuple(dict.fromkeys(t.module for t in parse_targets(raw))) + _message_layers()
    except ConfigError as exc:
        print(f"pptrace: not tracing {sys.executable}: PPTRACE_TARGETS={raw!r}: {exc}",
              file=sys.stderr)
        return
    if root:
        try:
            from pptrace.activation.run_notes import root_started

            root_started()  # the run's closing line, at this process's exit
        except Exception as exc:
            print(f"pptrace: {type(exc).__name__}: {exc}", file=sys.stderr)
    if any(name in sys.modules for name in modules):  # loaded by an earlier sitecustomize
        _activate()
    else:
        ImportHook(modules, _activate, once=True).install()


_chain()
if os.environ.get("PPTRACE_ENABLED", "").strip().lower() in ("1", "true", "yes", "on"):
    _start()
