"""Patch the engine's transport functions wherever they are bound, and undo it exactly.

SGLang's consumer imports attach and extract by name (``from ... import ...``), so replacing the
module attribute alone misses the call site. ``EnginePatch.apply`` replaces the two functions in
their module and in every loaded module whose globals hold them; a meta-path hook does the same
for a transport module imported later (a consumer imported after that binds the wrappers by
itself). ``restore`` puts the originals back everywhere a wrapper is bound.

    patch = EnginePatch(make_wrappers)      # make_wrappers(attach, extract) -> (w_attach, w_ext)
    patch.apply()                            # now, and for modules imported later
    ...
    patch.restore()

When SGLang is absent, or installed without the module, ``apply`` says so once and does nothing
else. Nothing here imports torch: the wrappers are built only when the engine module loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pptrace.activation.sglang_module import ATTACH, EXTRACT, MODULE

__all__ = ["EnginePatch", "Site", "WrapperFactory", "module_status"]

log = logging.getLogger("pptrace")

#: ``(original attach, original extract) -> (wrapped attach, wrapped extract)``
WrapperFactory = Callable[[Any, Any], tuple[Any, Any]]
WRAPPED_ATTR = "__pptrace_wrapped__"  # the same marker pptrace.record.wrapper sets
_said: set[str] = set()


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        log.warning("pptrace: %s", message)


def module_status(name: str = MODULE) -> str | None:
    """Return why ``name`` cannot be patched ("absent", "missing"), or None when it may load.

    Looks at files only: importing SGLang's package would pull in its GPU dependencies.
    """
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


class _PatchingLoader(importlib.abc.Loader):
    """Run the real loader, then patch the module it produced (only for watched names)."""

    def __init__(self, real: Any, after: Callable[[types.ModuleType], None]) -> None:
        self._real = real
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._real, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        # The module's own loader is the real one: nothing downstream sees this proxy.
        module.__loader__ = self._real
        if module.__spec__ is not None:
            module.__spec__.loader = self._real
        self._real.exec_module(module)
        self._after(module)  # contains its own failures: the engine's import never fails

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Intercept the import of the transport module(s); everything else passes untouched."""

    def __init__(self, names: Iterable[str], after: Callable[[types.ModuleType], None]) -> None:
        self.names = frozenset(names)
        self._after = after
        self._busy = threading.local()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self._after)
        return spec


class EnginePatch:
    """Replace the transport functions of ``modules`` in every module that binds them."""

    def __init__(self, factory: WrapperFactory, modules: Sequence[str] = (MODULE,)) -> None:
        self.factory = factory
        self.modules = tuple(modules)
        self.sites: list[Site] = []
        self._wrappers: dict[int, tuple[Any, Any]] = {}  # id(original) -> (original, wrapper)
        self._finder: _Finder | None = None
        self._lock = threading.RLock()
        self.applied = False

    @property
    def patched(self) -> bool:
        """True once at least one transport module has been patched."""
        return bool(self.sites)

    def apply(self) -> bool:
        """Patch loaded modules now and watch for the transport module; False when impossible."""
        with self._lock:
            if self.applied:
                return True
            watch = []
            for name in self.modules:
                status = module_status(name)
                if status is None:
                    watch.append(name)
                elif name == MODULE:
                    why = ("SGLang is not installed" if status == "absent" else
                           f"this SGLang has no {MODULE} module")
                    _say_once(f"{name}:{status}", f"{why}; nothing to trace")
                else:
                    _say_once(f"{name}:{status}", f"{name} is {status}; nothing to trace")
            if not watch:
                return False
            self.applied = True
            self._finder = _Finder(watch, self._patch_module)
            sys.meta_path.insert(0, self._finder)
            for name in watch:
                mod = sys.modules.get(name)
                if mod is not None:
                    self._patch_module(mod)
            return True

    def _patch_module(self, mod: types.ModuleType) -> None:
        """Wrap ``mod``'s attach/extract and rebind them in every loaded module."""
        with self._lock:
            try:
                attach, extract = getattr(mod, ATTACH), getattr(mod, EXTRACT)
            except AttributeError:
                _say_once(f"{mod.__name__}:api", f"{mod.__name__} lacks {ATTACH} or {EXTRACT}; "
                          "nothing to trace")
                return
            originals = [_unwrap(attach), _unwrap(extract)]
            try:
                if id(originals[0]) not in self._wrappers or (
                        id(originals[1]) not in self._wrappers):
                    w_attach, w_extract = self.factory(originals[0], originals[1])
                    self._wrappers[id(originals[0])] = (originals[0], w_attach)
                    self._wrappers[id(originals[1])] = (originals[1], w_extract)
                self._rebind_everywhere()
            except Exception as exc:  # pptrace failing must never fail the engine
                _say_once(f"{mod.__name__}:patch", f"cannot patch {mod.__name__} "
                          f"({type(exc).__name__}: {exc}); not tracing")

    def _rebind_everywhere(self) -> None:
        """Point every module-level binding of an original (or foreign wrapper) at our wrapper."""
        table = self._wrappers
        for mod in list(sys.modules.values()):
            names = _module_dict(mod)
            if names is None:
                continue
            for name, value in list(names.items()):
                entry = table.get(id(value))
                # type(), not isinstance(): some module globals are proxies whose __class__
                # lookup has side effects (deprecation warnings, lazy imports).
                if entry is None and type(value) in _WRAPPER_TYPES and (
                        WRAPPED_ATTR in value.__dict__):
                    entry = table.get(id(_unwrap(value)))  # an older wrapper: replace it
                if entry is None or entry[1] is value:
                    continue
                names[name] = entry[1]
                self.sites.append(Site(mod, name, value, entry[1]))

    def restore(self) -> int:
        """Put every original back wherever our wrappers are bound; return how many bindings."""
        with self._lock:
            if self._finder is not None:
                try:
                    sys.meta_path.remove(self._finder)
                except ValueError:
                    pass
                self._finder = None
            back = {id(w): o for o, w in self._wrappers.values()}
            restored = 0
            for mod in list(sys.modules.values()):
                names = _module_dict(mod)
                if names is None:
                    continue
                for name, value in list(names.items()):
                    original = back.get(id(value))
                    if original is not None:
                        names[name] = original
                        restored += 1
            self.sites.clear()
            self._wrappers.clear()
            self.applied = False
            return restored


def _module_dict(mod: object) -> dict[str, Any] | None:
    if not isinstance(mod, types.ModuleType):
        return None
    try:
        names = mod.__dict__
    except Exception:  # lazy or exotic modules: not ours to touch
        return None
    return names if isinstance(names, dict) else None


class _WrapperTypes:
    """The types a pptrace wrapper has: a Python function, or the native reader's C wrapper
    (``pptrace_meta.Hot``), recognised by name so that patching never imports the reader."""

    def __contains__(self, tp: type) -> bool:
        if tp is types.FunctionType:
            return True
        # type's own getters: a metaclass's __getattribute__ (user code) never runs here.
        module: object = type.__getattribute__(tp, "__module__")
        name: object = type.__getattribute__(tp, "__qualname__")
        return (type(module) is str and module == "pptrace_meta"
                and type(name) is str and name == "Hot")


_WRAPPER_TYPES = _WrapperTypes()


def _unwrap(fn: Any) -> Any:
    while hasattr(fn, WRAPPED_ATTR):
        fn = getattr(fn, WRAPPED_ATTR)
    return fn
