"""Where recorded events go: the OTLP/JSON trace file, SDK spans, OTLP export.

Rule: imports ``pptrace.model`` and ``pptrace.record``'s raw-event reader only, and
OpenTelemetry; never torch, Textual or the read side.
"""
