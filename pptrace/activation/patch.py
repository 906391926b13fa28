"""Patch the engine's transport functions wherever they are bound, and undo it exactly.

The engine's consumer imports attach and extract by name (``from ... import ...``), so replacing
the module attribute alone misses the call site. ``EnginePatch.apply`` replaces each target's two
functions in their module and in every loaded module whose globals hold them; pptrace's import
hook (``pptrace.activation.hook``) does the same for a target module imported later (a consumer
imported after that binds the wrappers by itself). ``restore`` puts the originals back everywhere
a wrapper is bound. A function bound under several names or by several targets is wrapped once.

Other wrappers of the same functions (SGLang's plugin ``HookRegistry`` patches them the same
way) are kept, in any order. pptrace knows its own wrappers by identity
(``pptrace.record.wrapper.is_wrapped``), so a wrapper around one of them is never taken for
pptrace's, replaced or unwrapped: pptrace wraps whatever is bound when it patches. When
someone wrapped pptrace's wrapper after it was bound, ``restore`` takes it out of their chain:
a plain function whose ``__wrapped__`` is pptrace's wrapper and whose closure holds it (as
``functools.wraps`` wrappers do) gets the original in both places. Any other holder keeps
pptrace's wrapper as an inert pass-through (its recorder is shut down: it only calls the
original), counted in ``EnginePatch.inert``.

    patch = EnginePatch(make_wrappers)   # make_wrappers(attach, extract, target) -> (w_a, w_e)
    patch = EnginePatch(make_wrappers, parse_targets("mytransport:send_aux,recv_aux"))
    patch.apply()                            # now, and for modules imported later
    ...
    patch.restore()

A bad target (no such module, no such function, not callable) is said once, on one line, and
not traced; it never fails the engine. Nothing here imports torch: the wrappers are built only
when a target module loads.
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

from pptrace.activation.hook import ImportHook
from pptrace.engines import engine_of_module
from pptrace.engines.select import module_status
from pptrace.model.target import DEFAULT_TARGETS, Target, as_targets

__all__ = ["EnginePatch", "Site", "WrapperFactory", "module_status"]

log = logging.getLogger("pptrace")

#: ``(original attach, original extract, their target) -> (wrapped attach, wrapped extract)``
WrapperFactory = Callable[[Any, Any, Target], tuple[Any, Any]]
#: The module that makes (and so knows) pptrace's wrappers; none exists before it is loaded.
_WRAPPER_MODULE = "pptrace.record.wrapper"
_MAX_CHAIN = 64  # wrappers followed down one chain (a cycle or a freak stops there)
_said: set[str] = set()
#: How a user names another transport module (quoted where a target cannot be traced).
TARGET_HINT = "--target MODULE[:ATTACH,EXTRACT][@PREFIX] or PPTRACE_TARGETS"


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        log.warning("pptrace: %s", message)


class Site:
    """One binding of a wrapper: ``module.<name>`` (held until restored)."""

    __slots__ = ("module", "name", "original", "wrapper")

    def __init__(self, module: types.ModuleType, name: str, original: Any, wrapper: Any) -> None:
        self.module = module
        self.name = name
        self.original = original
        self.wrapper = wrapper

    def __repr__(self) -> str:
        return f"Site({self.module.__name__}.{self.name})"


class EnginePatch:
    """Replace the transport functions of ``targets`` in every module that binds them."""

    def __init__(self, factory: WrapperFactory,
                 targets: Sequence[Target | str] = DEFAULT_TARGETS) -> None:
        self.factory = factory
        self.targets = as_targets(targets)  # spec strings are parsed (ConfigError when bad)
        self.sites: list[Site] = []
        self.seen: list[Target] = []  # targets whose module loaded with both functions
        self._wrappers: dict[int, tuple[Any, Any]] = {}  # id(original) -> (original, wrapper)
        self._hook: ImportHook | None = None
        self._lock = threading.RLock()
        self.applied = False
        #: pptrace wrappers the last ``restore`` left inside someone else's wrapper, as inert
        #: pass-throughs (their holder did not let them be replaced).
        self.inert = 0

    @property
    def patched(self) -> bool:
        """True once at least one transport module has been patched."""
        return bool(self.sites)

    def apply(self) -> bool:
        """Patch loaded modules now and watch for the target modules; False when impossible."""
        with self._lock:
            if self.applied:
                return True
            watch = [name for name in dict.fromkeys(t.module for t in self.targets)
                     if self._may_load(name)]
            if not watch:
                return False
            self.applied = True
            self._hook = ImportHook(watch, self._patch_module)
            self._hook.install()
            for name in watch:
                mod = sys.modules.get(name)
                if mod is not None:
                    self._patch_module(mod)
            return True

    def _may_load(self, name: str) -> bool:
        status = module_status(name)
        if status is None:
            return True
        engine = engine_of_module(name)
        if engine is not None:
            why = (f"{engine.title} is not installed" if status == "absent" else
                   f"this {engine.title} has no {name} module")
            _say_once(f"{name}:{status}", f"{why}; nothing to trace (to trace another "
                      f"transport module: {TARGET_HINT})")
        else:
            where = "" if status == "absent" else " (its package has no such file)"
            _say_once(f"{name}:{status}", f"target module {name!r} cannot be found{where} "
                      f"for {sys.executable}; not tracing it")
        return False

    def _functions(self, mod: types.ModuleType, target: Target) -> tuple[Any, Any] | None:
        """The target's two functions in ``mod`` (unwrapped), or None after saying why not."""
        found = []
        for name in (target.attach, target.extract):
            try:
                fn = getattr(mod, name)
            except Exception:  # AttributeError, or a module __getattr__ failing its own way
                fn = _MISSING
            if fn is _MISSING:
                _say_once(f"{target.spec}:{name}", f"target {target.spec}: {mod.__name__} has "
                          f"no function {name!r}; not tracing it")
                return None
            if not callable(fn):
                _say_once(f"{target.spec}:{name}", f"target {target.spec}: {mod.__name__}."
                          f"{name} is not callable (a {type(fn).__name__}); not tracing it")
                return None
            found.append(_unwrap(fn))
        return found[0], found[1]

    def _patch_module(self, mod: types.ModuleType) -> None:
        """Wrap ``mod``'s targets and rebind them in every loaded module."""
        with self._lock:
            for target in self.targets:
                if target.module != mod.__name__:
                    continue
                functions = self._functions(mod, target)
                if functions is None:
                    continue
                try:
                    if any(id(fn) not in self._wrappers for fn in functions):
                        wrappers = self.factory(*functions, target)
                        for fn, wrapper in zip(functions, wrappers, strict=True):
                            # A function another target already wrapped keeps its wrapper.
                            self._wrappers.setdefault(id(fn), (fn, wrapper))
                    self._rebind_everywhere()
                except Exception as exc:  # pptrace failing must never fail the engine
                    _say_once(f"{target.spec}:patch", f"cannot patch {target.spec} "
                              f"({type(exc).__name__}: {exc}); not tracing it")
                    continue
                if target not in self.seen:
                    self.seen.append(target)

    def _rebind_everywhere(self) -> None:
        """Point every module-level binding of an original (or foreign wrapper) at our wrapper."""
        table = self._wrappers
        is_own, unwrap = _marks()
        for mod in list(sys.modules.values()):
            names = _module_dict(mod)
            if names is None:
                continue
            for name, value in list(names.items()):
                entry = table.get(id(value))
                if entry is None and is_own(value):
                    entry = table.get(id(unwrap(value)))  # an older wrapper: replace it
                if entry is None or entry[1] is value:
                    continue
                names[name] = entry[1]
                self.sites.append(Site(mod, name, value, entry[1]))

    def restore(self) -> int:
        """Put every original back wherever our wrappers are bound; return how many bindings."""
        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            back = {id(w): o for o, w in self._wrappers.values()}
            restored = 0
            is_own, unwrap = _marks()
            # Where someone else's wrapper may hold one of ours: what is bound now where ours
            # were bound, and any module function whose closure holds one of ours.
            starts: list[Any] = [_bound(site.module, site.name) for site in self.sites]
            for target in self.seen:
                mod = sys.modules.get(target.module)
                starts += [_bound(mod, target.attach), _bound(mod, target.extract)]
            for mod in list(sys.modules.values()):
                names = _module_dict(mod)
                if names is None:
                    continue
                for name, value in list(names.items()):
                    original = back.get(id(value))
                    if original is not None:
                        names[name] = original
                        restored += 1
                    elif type(value) is types.FunctionType and _holds_own(value, is_own):
                        starts.append(value)
            self.inert = 0
            done: set[int] = set()
            for start in starts:
                restored += self._splice(start, is_own, unwrap, done)
            self.sites.clear()
            self.seen.clear()
            self._wrappers.clear()
            self.applied = False
            return restored


    def _splice(self, fn: Any, is_own: Callable[[Any], bool], unwrap: Callable[[Any], Any],
                done: set[int]) -> int:
        """Take pptrace's wrappers out of the chain of wrappers from ``fn`` down; return how
        many were replaced by what they wrap (the others are counted in ``inert``)."""
        spliced = 0
        for _ in range(_MAX_CHAIN):
            if is_own(fn):
                fn = unwrap(fn)
                continue
            # type(), not isinstance(): some module globals are proxies whose __class__
            # lookup has side effects (deprecation warnings, lazy imports).
            if type(fn) is not types.FunctionType or id(fn) in done:
                break
            done.add(id(fn))
            inner = fn.__dict__.get("__wrapped__")
            if inner is None:
                break
            if is_own(inner):
                original = unwrap(inner)
                cells = [c for c in fn.__closure__ or () if _cell(c) is inner]
                for cell in cells:
                    cell.cell_contents = original
                if cells:
                    fn.__dict__["__wrapped__"] = original
                    spliced += 1
                else:
                    self.inert += 1
                inner = original
            fn = inner
        return spliced


_MISSING = object()


def _marks() -> tuple[Callable[[Any], bool], Callable[[Any], Any]]:
    """(is_wrapped, unwrap) of pptrace's wrapper module, asked only once it is loaded:
    importing it here would import torch, and no pptrace wrapper exists before it is."""
    wrapper = sys.modules.get(_WRAPPER_MODULE)
    if wrapper is None:
        return (lambda fn: False), (lambda fn: fn)
    return wrapper.is_wrapped, wrapper.unwrap


def _bound(mod: object, name: str) -> Any:
    names = _module_dict(mod)
    return None if names is None else names.get(name)


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _holds_own(fn: types.FunctionType, is_own: Callable[[Any], bool]) -> bool:
    """True when ``fn``'s closure holds one of pptrace's wrappers."""
    return any(is_own(_cell(c)) for c in fn.__closure__ or ())


def _module_dict(mod: object) -> dict[str, Any] | None:
    if not isinstance(mod, types.ModuleType):
        return None
    try:
        names = mod.__dict__
    except Exception:  # lazy or exotic modules: not ours to touch
        return None
    return names if isinstance(names, dict) else None


def _unwrap(fn: Any) -> Any:
    return _marks()[1](fn)
