"""The engine's side: the transparent wrapper, the recorder's buffer and thread, the native reader.

Rule: imports ``pptrace.model`` and torch; never OpenTelemetry, Textual, or the read side
(``load``, ``analyze``, ``report``, ``cli``). Sinks are handed in (see ``pptrace.record.recorder``).
"""

from pathlib import Path

__all__ = ["native_files"]


def native_files() -> tuple[Path, ...]:
    """The native library's files, in a fixed order: its C++ sources (``native_*.cpp``, compiled
    together by ``pptrace.record.native``) and their header. What its build key and the
    auto-build's stamp hash (``pptrace.activation.autobuild``), and what the package ships."""
    here = Path(__file__).parent
    return tuple(sorted(p for p in here.glob("native_*") if p.suffix in (".cpp", ".h")))
