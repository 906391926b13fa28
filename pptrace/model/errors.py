"""pptrace's own errors, and the engine's messages that pptrace reproduces.

The hierarchy::

    PptraceError                 anything pptrace itself raises to a user
    ├── TraceInputError          a trace input that cannot be used (one line: what, where)
    │   └── SchemaVersionError   a pptrace span written by an unknown schema version
    └── ConfigError              a bad PPTRACE_* variable, flag or argument

Engine errors are never pptrace errors: the instrumented transport re-raises the engine's own
``RuntimeError`` object unchanged. The messages below are the engine's interface (users grep logs
for them); they are the engine adapter's (``pptrace.engines``), re-exported here, and tested for
string equality against SGLang's real module.

Trace text quoted in a message goes through ``pptrace.model.text.inert`` (the one escaper;
``inert`` is re-exported here for the readers that quote input problems).
"""

from __future__ import annotations

from pptrace.engines import DEFAULT_ERRORS
from pptrace.model.text import inert

__all__ = [
    "ATTACH_BAD_NAME",
    "ATTACH_DUPLICATE",
    "ATTACH_EMPTY",
    "ATTACH_NOT_PP",
    "ATTACH_NOT_TENSOR",
    "EXTRACT_NOT_PP",
    "EXTRACT_NOT_RECONSTRUCTED",
    "EXTRACT_NOT_TENSOR",
    "EXTRACT_NO_OBSERVER",
    "ConfigError",
    "PptraceError",
    "SchemaVersionError",
    "TraceInputError",
    "inert",
]

# The default transport's messages (its engine adapter declares them: pptrace.engines).
_ERRORS = DEFAULT_ERRORS
# Attach, in the order the engine checks.
ATTACH_NOT_PP = _ERRORS.attach_not_pp
ATTACH_EMPTY = _ERRORS.attach_empty
ATTACH_BAD_NAME = _ERRORS.attach_bad_name
ATTACH_NOT_TENSOR = _ERRORS.attach_not_tensor
ATTACH_DUPLICATE = _ERRORS.attach_duplicate
# Extract, in the order the engine checks.
EXTRACT_NO_OBSERVER = _ERRORS.extract_no_observer
EXTRACT_NOT_PP = _ERRORS.extract_not_pp
EXTRACT_NOT_TENSOR = _ERRORS.extract_not_tensor
EXTRACT_NOT_RECONSTRUCTED = _ERRORS.extract_not_reconstructed


class PptraceError(Exception):
    """Base of every error pptrace raises to a user."""


class TraceInputError(PptraceError):
    """A trace input that cannot be used; the message is one line naming the file and line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(inert(f"{where}{message}"))
        self.path = path
        self.line = line


class SchemaVersionError(TraceInputError):
    """A pptrace span written with a schema version this pptrace cannot read."""


class ConfigError(PptraceError):
    """A bad PPTRACE_* variable, flag or argument."""
