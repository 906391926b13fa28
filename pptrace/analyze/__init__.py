"""Finding where the protocol broke: pairing, the per-process scan, rules, one payload comparison.

Rule: pure. Imports ``pptrace.model`` only: no I/O, no logging, no torch, no OpenTelemetry.
"""
