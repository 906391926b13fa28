"""Reading traces: every file format, Jaeger's query API, the second loader process.

Rule: imports ``pptrace.model`` only; never torch, OpenTelemetry, Textual, or the write side.
It takes paths or streams and returns a typed ``Trace``; it never sees command-line arguments.
"""
