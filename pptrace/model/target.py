"""Transport targets: which module's attach and extract functions pptrace patches.

A target names a module and its two transport functions. The default is the engines' own
transport (``pptrace.engines.DEFAULT_TRANSPORT``, the first built-in adapter's); a target lets
pptrace trace a module that vendors, forks or renames the transport (a user's own engine,
pptrace's reference transport). One grammar, parsed here only, for
``pptrace run --target``, ``PPTRACE_TARGETS`` and ``pptrace.instrument(targets=...)``::

    MODULE                     the module, with the default transport's function names
    MODULE:ATTACH,EXTRACT      the module, with its own names (attach first)
    MODULE:ATTACH,EXTRACT@PREFIX   ... and the key prefix its attach inserts under

    PPTRACE_TARGETS='mytransport;vendored.pp:attach_aux,pop_aux@__aux__.'   # ';' between them

    targets = parse_targets("mytransport;vendored.pp:attach_aux,pop_aux@__aux__.")
    targets[1].module, targets[1].attach, targets[1].extract, targets[1].prefix

``;`` separates targets because it cannot occur in a module or function name (``,`` and ``:``
already have a meaning inside one target). ``@`` cannot occur in a name either: everything after
the first one is the prefix, verbatim (it may hold ``.``, ``:``, ``,`` or ``@``, never ``;``).

The key prefix (``prefix_of``): the one after ``@``; else, for an engine's own transport (the
default), the engine's; else none is given and each process learns it (``learn_prefix``) from
the first call that shows auxiliary keys: the keys an attach inserted, or the keys an extract
removed from the dict (a process that only extracts never sees an attach). A bad spec raises
``ConfigError`` with one line.

Stdlib only and cheap to import: pptrace's bootstrap reads the modules to wait for from here in
every Python process of a traced run. ``Target`` is a NamedTuple rather than a frozen dataclass
for that reason (``dataclasses`` alone costs about 8 ms of start-up in every process).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pptrace.engines import BUILTIN, DEFAULT_TRANSPORT
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
    "learn_prefix",
    "parse_target",
    "parse_targets",
    "prefix_of",
]

#: The default transport module and its two functions (the engine adapter's: pptrace.engines).
DEFAULT_MODULE = DEFAULT_TRANSPORT.module
DEFAULT_ATTACH = DEFAULT_TRANSPORT.attach
DEFAULT_EXTRACT = DEFAULT_TRANSPORT.extract
#: Between targets in ``PPTRACE_TARGETS``.
SEPARATOR = ";"
#: Between a target's functions and its key prefix.
AT = "@"
SYNTAX = "MODULE or MODULE:ATTACH,EXTRACT, optionally followed by @PREFIX"
#: Where a learnt prefix may end: the character that ends it is one of these.
PREFIX_ENDS = "./:"


class Target(NamedTuple):
    """One transport to trace: a module, the names of its attach and extract functions, and
    the key prefix its attach inserts under (None: not given, see ``prefix_of``)."""

    module: str
    attach: str = DEFAULT_ATTACH
    extract: str = DEFAULT_EXTRACT
    prefix: str | None = None

    @property
    def spec(self) -> str:
        """The target as it is written: ``MODULE``, or ``MODULE:ATTACH,EXTRACT``, then
        ``@PREFIX`` when one is given."""
        at = "" if self.prefix is None else AT + self.prefix
        if (self.attach, self.extract) == (DEFAULT_ATTACH, DEFAULT_EXTRACT):
            return self.module + at
        return f"{self.module}:{self.attach},{self.extract}{at}"

    @property
    def is_default(self) -> bool:
        """True for the default transport's own module with its own names."""
        return self == DEFAULT_TARGETS[0]


DEFAULT_TARGETS: tuple[Target, ...] = (Target(DEFAULT_MODULE),)


def prefix_of(target: Target) -> str | None:
    """The key prefix of ``target``'s transport: the one given, else the engine's own when the
    target is an engine's transport, else None (the recorder learns it)."""
    if target.prefix is not None:
        return target.prefix
    for engine in BUILTIN:
        t = engine.transport
        if t is not None and (t.module, t.attach, t.extract) == target[:3]:
            return t.prefix
    return None


def learn_prefix(keys: Iterable[object]) -> str | None:
    """The key prefix one call's auxiliary keys show: their longest common beginning, cut back
    to just after its last ``PREFIX_ENDS`` character; None when it holds none (or no str key).

    ``__aux__.scores``, ``__aux__.ids`` -> ``__aux__.``; one key ``__aux__.scores`` ->
    ``__aux__.``. A name that itself holds such a character, alone or shared by every name
    (``__aux__.layer.0``, ``__aux__.layer.1``), makes it too long: give ``@PREFIX`` then.
    """
    found: str | None = None
    for key in keys:
        if type(key) is not str:
            continue
        if found is None:
            found = key
            continue
        n = 0
        for a, b in zip(found, key, strict=False):
            if a != b:
                break
            n += 1
        found = found[:n]
    if not found:
        return None
    end = max(found.rfind(c) for c in PREFIX_ENDS)
    return found[:end + 1] if end >= 0 else None


def parse_target(spec: str) -> Target:
    """Parse one ``MODULE[:ATTACH,EXTRACT][@PREFIX]``; raise ``ConfigError`` when malformed."""
    text, at, prefix = spec.strip().partition(AT)
    if at and not prefix:
        raise ConfigError(f"target {spec!r}: nothing after {AT!r} (expected {SYNTAX}; the "
                          "prefix is the key prefix the attach inserts under, e.g. @__aux__.)")
    target = _names(spec, text)
    return target._replace(prefix=prefix) if at else target


def _names(spec: str, text: str) -> Target:
    """The module and function names of ``text`` (the spec up to any ``@``)."""
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
    found = tuple(dict.fromkeys(targets))
    for i, t in enumerate(found):  # one module's functions under two prefixes: say which
        for u in found[:i]:
            if t[:3] == u[:3]:
                raise ConfigError(f"targets {u.spec!r} and {t.spec!r}: one transport given "
                                  "twice with different prefixes")
    return found
