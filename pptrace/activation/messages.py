"""Instrument SGLang's PP message layer in the running engine, and undo it exactly.

The message layer's wrappers (``pptrace.record.messages``) go on SGLang's classes:
``GroupCoordinator.send_tensor_dict``/``recv_tensor_dict`` in
``sglang.srt.distributed.parallel_state`` and ``SchedulerPPMixin._pp_recv_typed_dict`` in
``sglang.srt.managers.scheduler_pp_mixin`` (``pptrace.record.message_patch``). Each is patched
the moment its module has executed, now when it is loaded, or later through pptrace's import
hook (``pptrace.activation.hook``, the one the transport patch uses); ``stop`` puts the exact
originals back.

Under ``pptrace run`` pptrace activates while the mixin is still executing (the mixin imports the
transport module, whose load activates pptrace, before it defines its class), so no import hook
can see the mixin's class appear. Then the coordinator's two methods are first patched with a
one-time gate: the first send or receive of the process (the engine is running by then) puts
the wrappers in place, patches the mixin's finished class and arms the recorder; later calls
never pass the gate. A typed receive already in progress at that first call is recorded
untyped (no expected kind); every later one is typed.

Switched by ``Config.messages`` (``PPTRACE_MESSAGES``, on by default). Nothing here imports torch:
the wrappers are built only when SGLang's module loads (it imports torch itself).

    patch = start(config, recorder, arm)   # None when off or SGLang is absent
    ...
    stop(patch)
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from pptrace.activation.hook import ImportHook
from pptrace.activation.patch import module_status
from pptrace.model.config import Config
from pptrace.record.recorder import Recorder

__all__ = ["MIXIN", "PARALLEL_STATE", "MessagePatch", "start", "stop"]

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
MIXIN = "sglang.srt.managers.scheduler_pp_mixin"
_COORDINATOR, _MIXIN_CLASS = "GroupCoordinator", "SchedulerPPMixin"
_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(f"pptrace: {message}", file=sys.stderr)


class MessagePatch:
    """SGLang's message-layer classes, patched as their modules load (see the module doc)."""

    def __init__(self, recorder: Recorder, arm: Callable[[], None] = lambda: None) -> None:
        self.recorder = recorder
        self._arm = arm
        self._log: Any = None
        self._restores: list[Callable[[], None]] = []
        self._hook: ImportHook | None = None
        self._lock = threading.RLock()
        self.coordinator: type | None = None  # the classes patched, once they are
        self.mixin: type | None = None

    def apply(self) -> bool:
        """Patch what is loaded now and watch for the rest; False when SGLang is absent."""
        with self._lock:
            if self._hook is not None:
                return True
            if PARALLEL_STATE not in sys.modules and module_status(PARALLEL_STATE) is not None:
                return False
            self._hook = ImportHook([PARALLEL_STATE, MIXIN], self._loaded)
            self._hook.install()
            for name in (PARALLEL_STATE, MIXIN):
                mod = sys.modules.get(name)
                if mod is not None:
                    self._loaded(mod)
            return True

    def restore(self) -> None:
        """The exact originals back on both classes; the hook off (idempotent)."""
        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            for undo in reversed(self._restores):
                undo()
            self._restores.clear()
            self.coordinator = self.mixin = None

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
                if mod.__name__ == PARALLEL_STATE:
                    self._patch_coordinator(mod)
                elif isinstance(mod.__dict__.get(_MIXIN_CLASS), type):
                    self._patch_mixin(mod)
                # else the mixin is still executing: the coordinator's first call patches it
            except Exception as exc:  # pptrace failing must never fail the engine
                _say_once(f"not tracing SGLang's PP messages ({mod.__name__}): "
                          f"{type(exc).__name__}: {exc}")

    def _patch_coordinator(self, mod: types.ModuleType) -> None:
        if self.coordinator is not None:
            return
        cls = getattr(mod, _COORDINATOR, None)
        if not isinstance(cls, type):
            _say_once(f"{mod.__name__} has no class {_COORDINATOR}; not tracing PP messages")
            return
        from pptrace.record.message_patch import COORDINATOR_METHODS, patch_coordinator

        self._restores.append(patch_coordinator(cls, self._message_log()))
        self.coordinator = cls
        wrappers = {name: cls.__dict__[name] for name in COORDINATOR_METHODS}
        for name, wrapper in wrappers.items():
            setattr(cls, name, self._gate(cls, wrapper, wrappers))

    def _gate(self, cls: type, wrapper: Any, wrappers: dict[str, Any]) -> Any:
        """``wrapper`` behind a one-time gate: the first call opens it (``_first_call``)."""

        @functools.wraps(wrapper)
        def pptrace_first_call(*args: Any, **kwargs: Any) -> Any:
            self._first_call(cls, wrappers)
            return wrapper(*args, **kwargs)

        pptrace_first_call.__dict__["_pptrace_gate"] = True
        return pptrace_first_call

    def _first_call(self, cls: type, wrappers: dict[str, Any]) -> None:
        """Put the wrappers in the gates' place, patch the mixin's class, arm the recorder."""
        try:
            with self._lock:
                if self.coordinator is not cls:  # restored meanwhile: the originals stay
                    return
                for name, wrapper in wrappers.items():
                    if _gated(cls, name):
                        setattr(cls, name, wrapper)
                mixin = sys.modules.get(MIXIN)
                if mixin is not None:
                    self._patch_mixin(mixin)
            self._arm()
        except Exception as exc:  # contained, counted: the engine's call goes on
            self.recorder.internal_error("message layer first call", exc)

    def _patch_mixin(self, mod: types.ModuleType) -> None:
        if self.mixin is not None:
            return
        cls = mod.__dict__.get(_MIXIN_CLASS)
        if not isinstance(cls, type):
            _say_once(f"{mod.__name__} has no class {_MIXIN_CLASS}; PP receives are recorded "
                      f"untyped")
            return
        from pptrace.record.message_patch import patch_mixin

        self._restores.append(patch_mixin(cls, self._message_log()))
        self.mixin = cls


def _gated(cls: type, name: str) -> bool:
    fn = cls.__dict__.get(name)
    return getattr(fn, "__dict__", {}).get("_pptrace_gate", False) is True


def start(config: Config, recorder: Recorder,
          arm: Callable[[], None] = lambda: None) -> MessagePatch | None:
    """Patch SGLang's message layer for ``recorder`` when ``config.messages`` asks for it;
    ``arm()`` runs at the first PP message (starts the recorder, registers its exit flush)."""
    if not config.messages:
        return None
    patch = MessagePatch(recorder, arm)
    try:
        return patch if patch.apply() else None
    except Exception as exc:
        _say_once(f"not tracing SGLang's PP messages: {type(exc).__name__}: {exc}")
        patch.restore()
        return None


def stop(patch: MessagePatch | None) -> None:
    """Undo ``start`` (None: nothing to undo); never raises."""
    if patch is None:
        return
    try:
        patch.restore()
    except Exception as exc:
        _say_once(f"cannot restore SGLang's PP message methods: {type(exc).__name__}: {exc}")
