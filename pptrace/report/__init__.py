"""Rendering findings for people and programs: text and JSON reports, run-to-run diffs, Perfetto.

Rule: imports ``pptrace.model`` and ``pptrace.analyze``; never the write side or ``load``.
"""
