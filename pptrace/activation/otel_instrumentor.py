"""pptrace as an OpenTelemetry instrumentor, so that ``opentelemetry-instrument`` picks it up.

Registered under the ``opentelemetry_instrumentor`` entry point (``pptrace``). Under
``opentelemetry-instrument`` every process that imports a target module (SGLang's transport
module, or those ``PPTRACE_TARGETS`` names) is patched,
and pptrace's spans go through the tracer provider OpenTelemetry configured (or the one passed
as ``tracer_provider``), beside pptrace's own trace files.

    from pptrace.activation.otel_instrumentor import PptraceInstrumentor
    PptraceInstrumentor().instrument(tracer_provider=provider)
    ...
    PptraceInstrumentor().uninstrument()
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from pptrace.activation.startup import activate, uninstrument
from pptrace.model.config import Config

__all__ = ["PptraceInstrumentor"]


class PptraceInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Patch the engine's attach/extract; spans through OpenTelemetry's pipeline."""

    def instrumentation_dependencies(self) -> Collection[str]:
        # None on purpose: pptrace checks for SGLang's module itself and says once when it is
        # missing; a version pin here would silently skip engines that ship the module.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        config = kwargs.get("config")
        if not isinstance(config, Config):
            config = Config.from_env()
            if "PPTRACE_EXPORT" not in os.environ:
                # Asked for through OpenTelemetry: export through it, and keep the files.
                config = Config.from_env(exporters=("file", "otlp"))
        activate(config, tracer_provider=kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        uninstrument()
