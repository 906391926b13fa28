"""The engine's side: the transparent wrapper, the recorder's buffer and thread, the native reader.

Rule: imports ``pptrace.model`` and torch; never OpenTelemetry, Textual, or the read side
(``load``, ``analyze``, ``report``, ``cli``). Sinks are handed in (see ``pptrace.record.recorder``).
"""
