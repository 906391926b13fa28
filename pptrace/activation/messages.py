"""Instrument an engine's PP message layer in the running process, and undo it exactly.

Which classes and methods is the engine adapter's (``pptrace.engines``: its ``MethodPatch``
records, e.g. SGLang's ``GroupCoordinator.send_tensor_dict``/``recv_tensor_dict`` and its mixin's
typed receive); the wrappers are ``pptrace.record.messages``' (put on by
``pptrace.record.message_patch``). Each class is patched the moment its module has executed, now
when it is loaded, or later through pptrace's import hook (``pptrace.activation.hook``, the one
the transport patch uses); ``stop`` puts the exact originals back.

A method marked ``late`` may belong to a class that is still executing when pptrace sees its
module (under ``pptrace run`` SGLang's mixin imports the transport module, whose load activates
pptrace, before it defines its class), so no import hook can see it appear. Therefore the other
methods are first patched with a one-time gate: the first message call of the process (the
engine is running by then) puts the wrappers in place, patches the late classes and arms the
recorder; later calls never pass the gate. A typed receive already in progress at that first
call is recorded untyped (no expected kind); every later one is typed.

Switched by ``Config.messages`` (``PPTRACE_MESSAGES``, on by default). Nothing here imports torch:
the wrappers are built only when the engine's module loads (it imports torch itself).

    patches = start(config, recorder, arm, engines)   # [] when off or no engine is installed
    ...
    stop(patches)
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pptrace.activation.hook import ImportHook
from pptrace.engines import Engine, MethodPatch
from pptrace.engines.select import module_status
from pptrace.model.config import Config
from pptrace.record.recorder import Recorder

__all__ = ["MessagePatch", "start", "stop"]

_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(f"pptrace: {message}", file=sys.stderr)


class MessagePatch:
    """One engine's message-layer classes, patched as their modules load (see the module doc)."""

    def __init__(self, recorder: Recorder, arm: Callable[[], None], engine: Engine) -> None:
        self.recorder = recorder
        self.engine = engine
        self._arm = arm
        self._log: Any = None
        self._restores: list[Callable[[], None]] = []
        self._hook: ImportHook | None = None
        self._lock = threading.RLock()
        self._modules = list(dict.fromkeys(p.module for p in engine.messages))
        self._early = [p for p in engine.messages if not p.late]
        self._late = [p for p in engine.messages if p.late]
        #: The classes patched, by name, once they are.
        self.patched: dict[str, type] = {}

    def apply(self) -> bool:
        """Patch what is loaded now and watch for the rest; False when the engine is absent."""
        with self._lock:
            if self._hook is not None:
                return True
            first = self._modules[0] if self._modules else None
            if first is None or (first not in sys.modules and module_status(first) is not None):
                return False
            self._hook = ImportHook(self._modules, self._loaded)
            self._hook.install()
            for name in self._modules:
                mod = sys.modules.get(name)
                if mod is not None:
                    self._loaded(mod)
            return True

    def restore(self) -> None:
        """The exact originals back on every class; the hook off (idempotent)."""
        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            for undo in reversed(self._restores):
                undo()
            self._restores.clear()
            self.patched.clear()

    # --- patching ------------------------------------------------------------------------------

    def _message_log(self) -> Any:
        if self._log is None:
            from pptrace.record.messages import MessageLog

            self._log = MessageLog(self.recorder)
        return self._log

    def _loaded(self, mod: types.ModuleType) -> None:
        with self._lock:
            if self._hook is None:  # restored meanwhile
                return
            try:
                self._patch_early(mod)
                self._patch_late(mod, said=False)  # a class still executing: the first call
            except Exception as exc:  # pptrace failing must never fail the engine
                _say_once(f"not tracing {self.engine.title}'s PP messages ({mod.__name__}): "
                          f"{type(exc).__name__}: {exc}")

    def _classes(self, mod: types.ModuleType,
                 patches: Sequence[MethodPatch]) -> dict[str, list[MethodPatch]]:
        found: dict[str, list[MethodPatch]] = {}
        for p in patches:
            if p.module == mod.__name__ and p.cls not in self.patched:
                found.setdefault(p.cls, []).append(p)
        return found

    def _patch_early(self, mod: types.ModuleType) -> None:
        from pptrace.record.message_patch import patch_class

        for name, patches in self._classes(mod, self._early).items():
            cls = mod.__dict__.get(name)
            if not isinstance(cls, type):
                _say_once(f"{mod.__name__} has no class {name}; not tracing its PP messages")
                continue
            self._restores.append(patch_class(cls, self._message_log(), self.engine, patches))
            self.patched[name] = cls
            wrappers = {p.method: cls.__dict__[p.method] for p in patches
                        if p.role != "shell" and p.method in cls.__dict__}
            for method, wrapper in wrappers.items():
                setattr(cls, method, self._gate(cls, name, wrapper, wrappers))

    def _patch_late(self, mod: types.ModuleType, said: bool) -> None:
        from pptrace.record.message_patch import patch_class

        for name, patches in self._classes(mod, self._late).items():
            cls = mod.__dict__.get(name)
            if not isinstance(cls, type):
                if said:
                    _say_once(f"{mod.__name__} has no class {name}; its PP receives are "
                              "recorded untyped")
                continue
            self._restores.append(patch_class(cls, self._message_log(), self.engine, patches))
            self.patched[name] = cls

    def _gate(self, cls: type, name: str, wrapper: Any, wrappers: dict[str, Any]) -> Any:
        """``wrapper`` behind a one-time gate: the first call opens it (``_first_call``)."""

        @functools.wraps(wrapper)
        def pptrace_first_call(*args: Any, **kwargs: Any) -> Any:
            self._first_call(cls, name, wrappers)
            return wrapper(*args, **kwargs)

        pptrace_first_call.__dict__["_pptrace_gate"] = True
        return pptrace_first_call

    def _first_call(self, cls: type, name: str, wrappers: dict[str, Any]) -> None:
        """Put the wrappers in the gates' place, patch the late classes, arm the recorder."""
        try:
            with self._lock:
                if self.patched.get(name) is not cls:  # restored meanwhile: originals stay
                    return
                for method, wrapper in wrappers.items():
                    if _gated(cls, method):
                        setattr(cls, method, wrapper)
                for module in {p.module for p in self._late}:
                    loaded = sys.modules.get(module)
                    if loaded is not None:
                        self._patch_late(loaded, said=True)
            self._arm()
        except Exception as exc:  # contained, counted: the engine's call goes on
            self.recorder.internal_error("message layer first call", exc)


def _gated(cls: type, name: str) -> bool:
    fn = cls.__dict__.get(name)
    return getattr(fn, "__dict__", {}).get("_pptrace_gate", False) is True


def start(config: Config, recorder: Recorder, arm: Callable[[], None] = lambda: None,
          engines: Iterable[Engine] = ()) -> list[MessagePatch]:
    """Patch each engine's message layer for ``recorder`` when ``config.messages`` asks for it;
    ``arm()`` runs at the first PP message (starts the recorder, registers its exit flush)."""
    if not config.messages:
        return []
    started = []
    for engine in engines:
        if not engine.messages:
            continue
        patch = MessagePatch(recorder, arm, engine)
        try:
            if patch.apply():
                started.append(patch)
        except Exception as exc:
            _say_once(f"not tracing {engine.title}'s PP messages: {type(exc).__name__}: {exc}")
            patch.restore()
    return started


def stop(patches: Iterable[MessagePatch] | MessagePatch | None) -> None:
    """Undo ``start`` (None or empty: nothing to undo); never raises."""
    if patches is None:
        return
    for patch in [patches] if isinstance(patches, MessagePatch) else list(patches):
        try:
            patch.restore()
        except Exception as exc:
            _say_once(f"cannot restore {patch.engine.title}'s PP message methods: "
                      f"{type(exc).__name__}: {exc}")
