"""Rendering findings for people and programs: the text and JSON reports, run-to-run diffs.

Rule: imports ``pptrace.model`` and ``pptrace.analyze``; never the write side or ``load``.
"""
