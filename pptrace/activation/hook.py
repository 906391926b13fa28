"""pptrace's one meta-path import hook: call back the moment a watched module has executed.

The engine's consumer binds attach and extract by name when it imports them, so pptrace must
patch a transport module after its code ran and before anything can import from it. The hook
wraps the real loader of the watched names only; every other import passes untouched, and the
module keeps its real loader. Two users:

- the bootstrap (``_bootstrap/sitecustomize.py``), in every Python process of ``pptrace run``:
  waits for the first target module, activates pptrace, then steps aside (``once=True``);
- ``EnginePatch`` (``patch.py``): patches target modules imported after ``instrument()``.

    hook = ImportHook(["mytransport"], after=patch_module)   # after(module) -> None
    hook.install()                                           # first on sys.meta_path
    ...
    hook.remove()

Stdlib only and cheap to import, because the bootstrap imports it in every process: no
``importlib.abc`` (it pulls in ``importlib.resources``, about 7 ms), no ``threading``.
"""

from __future__ import annotations

import _thread
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Iterable, Sequence
    from importlib.machinery import ModuleSpec

__all__ = ["ImportHook"]


class _Loader:
    """The real loader, then the hook's callback (a duck-typed ``importlib.abc.Loader``)."""

    def __init__(self, real: Any, hook: ImportHook) -> None:
        self._real = real
        self._hook = hook

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._real, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        # The module's own loader is the real one: nothing downstream ever sees this proxy.
        module.__loader__ = self._real
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._real
        self._real.exec_module(module)
        self._hook._loaded(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class ImportHook:
    """A meta-path finder for ``names``: ``after(module)`` runs once each has executed.

    ``once``: leave ``sys.meta_path`` after the first watched module has loaded (the bootstrap,
    whose callback installs pptrace's own hook). ``after`` is expected to contain its failures;
    one that escapes is printed on one line, never raised into the importer.
    """

    def __init__(self, names: Iterable[str], after: Callable[[types.ModuleType], None],
                 *, once: bool = False) -> None:
        self.names = frozenset(names)
        self._after = after
        self._once = once
        self._busy: set[tuple[int, str]] = set()  # (thread, name) being looked up by us

    def install(self) -> None:
        """Put the hook first on ``sys.meta_path`` (once)."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Take the hook off ``sys.meta_path`` (idempotent)."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        """The spec the other finders give for a watched name, with the loader wrapped."""
        if fullname not in self.names:
            return None
        key = (_thread.get_ident(), fullname)
        if key in self._busy:  # another finder asked back for the same name: not us
            return None
        self._busy.add(key)
        try:
            spec: ModuleSpec | None = None
            for finder in list(sys.meta_path):
                find = None if finder is self else getattr(finder, "find_spec", None)
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self._busy.discard(key)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self)  # type: ignore[assignment]  # a duck-typed Loader
        return spec

    def _loaded(self, module: types.ModuleType) -> None:
        if self._once:
            self.remove()  # only after a successful import: a failed one is waited for again
        try:
            self._after(module)
        except Exception as exc:  # the engine's import never fails because of pptrace
            print(f"pptrace: not tracing {module.__name__}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
