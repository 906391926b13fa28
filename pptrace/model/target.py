"""Transport targets: which module's attach and extract functions pptrace patches.

A target names a module and its two transport functions. The default is the engines' own
transport (``pptrace.engines.DEFAULT_TRANSPORT``, the first built-in adapter's); a target lets
pptrace trace a module that vendors, forks or renames the transport (a user's own engine,
pptrace's reference transport). One grammar, parsed here only, for
``pptrace run --target``, ``PPTRACE_TARGETS`` and ``pptrace.instrument(targets=...)``::

    MODULE                     the module, with the default transport's function names
    MODULE:ATTACH,EXTRACT      the module, with its own names (attach first)

    PPTRACE_TARGETS='mytransport;vendored.pp:attach_aux,pop_aux'   # ';' between targets

    targets = parse_targets("mytransport;vendored.pp:attach_aux,pop_aux")
    targets[1].module, targets[1].attach, targets[1].extract

``;`` separates targets because it cannot occur in a module or function name (``,`` and ``:``
already have a meaning inside one target). A bad spec raises ``ConfigError`` with one line.

Stdlib only and cheap to import: pptrace's bootstrap reads the modules to wait for from here in
every Python process of a traced run. ``Target`` is a NamedTuple rather than a frozen dataclass
for that reason (``dataclasses`` alone costs about 8 ms of start-up in every process).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pptrace.engines import DEFAULT_TRANSPORT
from pptrace.model.errors import ConfigError

__all__ = [
    "DEFAULT_ATTACH",
    "DEFAULT_EXTRACT",
    "DEFAULT_MODULE",
    "DEFAULT_TARGETS",
    "SEPARATOR",
    "Target",
    "as_targets",
    "format_targets",
    "parse_target",
    "parse_targets",
]

#: The default transport module and its two functions (the engine adapter's: pptrace.engines).
DEFAULT_MODULE = DEFAULT_TRANSPORT.module
DEFAULT_ATTACH = DEFAULT_TRANSPORT.attach
DEFAULT_EXTRACT = DEFAULT_TRANSPORT.extract
#: Between targets in ``PPTRACE_TARGETS``.
SEPARATOR = ";"
SYNTAX = "MODULE or MODULE:ATTACH,EXTRACT"


class Target(NamedTuple):
    """One transport to trace: a module and the names of its attach and extract functions."""

    module: str
    attach: str = DEFAULT_ATTACH
    extract: str = DEFAULT_EXTRACT

    @property
    def spec(self) -> str:
        """The target as it is written: ``MODULE``, or ``MODULE:ATTACH,EXTRACT``."""
        if (self.attach, self.extract) == (DEFAULT_ATTACH, DEFAULT_EXTRACT):
            return self.module
        return f"{self.module}:{self.attach},{self.extract}"

    @property
    def is_default(self) -> bool:
        """True for the default transport's own module with its own names."""
        return self == DEFAULT_TARGETS[0]


DEFAULT_TARGETS: tuple[Target, ...] = (Target(DEFAULT_MODULE),)


def parse_target(spec: str) -> Target:
    """Parse one ``MODULE[:ATTACH,EXTRACT]``; raise ``ConfigError`` when it is malformed."""
    text = spec.strip()
    module, colon, names = text.partition(":")
    module = module.strip()
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"target {spec!r}: {module!r} is not a module name (expected {SYNTAX})")
    if not colon:
        return Target(module)
    parts = [p.strip() for p in names.split(",")]
    if len(parts) != 2 or not all(p.isidentifier() for p in parts):
        raise ConfigError(f"target {spec!r}: expected {SYNTAX}, with two function names after "
                          "the colon (attach first)")
    if parts[0] == parts[1]:
        raise ConfigError(f"target {spec!r}: attach and extract must be two different functions")
    return Target(module, parts[0], parts[1])


def parse_targets(raw: str | None) -> tuple[Target, ...]:
    """Parse ``PPTRACE_TARGETS`` (targets separated by ``;``); unset or blank: the default."""
    if raw is None or not raw.strip():
        return DEFAULT_TARGETS
    return _unique(parse_target(item) for item in raw.split(SEPARATOR) if item.strip())


def as_targets(value: str | Target | Iterable[str | Target]) -> tuple[Target, ...]:
    """Targets from a spec string (``;`` allowed), a ``Target``, or several of either."""
    if isinstance(value, Target):
        return (parse_target(value.spec),)
    if isinstance(value, str):
        items: Iterable[str | Target] = [value]
    else:
        try:
            items = list(value)
        except TypeError:
            raise ConfigError(f"targets {value!r}: expected a spec string ({SYNTAX}), a Target, "
                              "or several of them") from None
    found: list[Target] = []
    for item in items:
        if isinstance(item, Target):
            found.append(parse_target(item.spec))  # a Target built by hand is checked too
        elif isinstance(item, str):
            found.extend(parse_targets(item) if item.strip() else ())
        else:
            raise ConfigError(f"target {item!r}: expected a spec string ({SYNTAX}) or a Target")
    if not found:
        raise ConfigError(f"targets: none given (expected {SYNTAX})")
    return _unique(found)


def format_targets(targets: Iterable[Target]) -> str:
    """The ``PPTRACE_TARGETS`` value for ``targets`` (what ``parse_targets`` reads back)."""
    return SEPARATOR.join(t.spec for t in targets)


def _unique(targets: Iterable[Target]) -> tuple[Target, ...]:
    return tuple(dict.fromkeys(targets))
