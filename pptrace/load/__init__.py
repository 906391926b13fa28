"""Reading traces: every file format (plain or compressed, schema 1 or 2, a rotated trace's
segments as one process), Jaeger's query API, the second loader process.

Rule: imports ``pptrace.model`` only; never torch, OpenTelemetry, Textual, or the write side.
It takes paths or streams and returns a typed ``Trace``; it never sees command-line arguments.
"""
