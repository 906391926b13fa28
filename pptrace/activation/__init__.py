"""Activation: putting pptrace into a running engine (patching, start-up, bootstrap, instrumentor).

Named ``activation`` rather than ``instrument`` so that the subpackage never shadows the public
``pptrace.instrument()`` function.

Rule: the only part that changes global state (module attributes, signal handlers, tracer
providers). Imports ``model``, ``record`` and ``export`` (the latter lazily); never the read side.
"""
