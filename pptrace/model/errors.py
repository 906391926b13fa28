"""pptrace's own errors, and the engine's messages that pptrace reproduces.

The hierarchy::

    PptraceError                 anything pptrace itself raises to a user
    ├── TraceInputError          a trace input that cannot be used (one line: what, where)
    │   └── SchemaVersionError   a pptrace span written by an unknown schema version
    └── ConfigError              a bad PPTRACE_* variable, flag or argument

Engine errors are never pptrace errors: the instrumented transport re-raises the engine's own
``RuntimeError`` object unchanged. The messages below are the engine's interface (users grep logs
for them); they are tested for string equality against SGLang's real module.

Trace text quoted in a message goes through ``pptrace.model.text.inert`` (the one escaper;
``inert`` is re-exported here for the readers that quote input problems).
"""

from __future__ import annotations

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

# Attach ("add_auxiliary_output_to_pp_tensors"), in the order the engine checks.
ATTACH_NOT_PP = "auxiliary output does not support pipeline-parallel transport"
ATTACH_EMPTY = "auxiliary PP output must contain at least one tensor"
ATTACH_BAD_NAME = "auxiliary PP tensor names must be non-empty strings"
ATTACH_NOT_TENSOR = "auxiliary PP output {name!r} is not a tensor"
ATTACH_DUPLICATE = "duplicate auxiliary PP tensor {name!r}"

# Extract ("pop_auxiliary_output_from_pp_tensors"), in the order the engine checks.
EXTRACT_NO_OBSERVER = "received auxiliary PP output without a sampling observer"
EXTRACT_NOT_PP = "sampling observer does not support pipeline-parallel transport"
EXTRACT_NOT_TENSOR = "received a non-tensor auxiliary PP output"
EXTRACT_NOT_RECONSTRUCTED = "sampling observer did not reconstruct its PP output"


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
