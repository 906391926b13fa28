"""Putting pptrace into a running engine: patching, start-up, the bootstrap, the instrumentor.

Rule: the only part that changes global state (module attributes, signal handlers, tracer
providers). Imports ``model``, ``record`` and ``export`` (the latter lazily); never the read side.
"""
