"""pptrace: trace and debug auxiliary-output transport in pipeline-parallel sampling pipelines.

    import pptrace
    rec = pptrace.Recorder(pptrace.Config()).start()
    attach, extract = pptrace.wrap_transport(engine_attach, engine_extract, rec)

Importing ``pptrace`` is cheap: names are loaded on first use, so reading traces never imports
torch or OpenTelemetry's SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Config",
    "Direction",
    "Event",
    "RankInfo",
    "Recorder",
    "TensorMeta",
    "instrument",
    "uninstrument",
    "wrap_transport",
]

_WHERE = {
    "Config": "pptrace.model.config",
    "Direction": "pptrace.model.records",
    "Event": "pptrace.model.records",
    "RankInfo": "pptrace.model.records",
    "Recorder": "pptrace.record.recorder",
    "TensorMeta": "pptrace.model.records",
    "instrument": "pptrace.activation.startup",
    "uninstrument": "pptrace.activation.startup",
    "wrap_transport": "pptrace.record.wrapper",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pptrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
