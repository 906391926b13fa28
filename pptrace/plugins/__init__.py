"""Plugins: pptrace as part of other tools (``pytest --pptrace``).

Rule: the top of the house, beside ``cli``: may import ``model``, ``activation``, ``load``,
``analyze`` and ``report``, never ``cli``; nothing in pptrace imports it. Only this folder
imports pytest. A plugin is loaded by its tool in every session (pytest loads every ``pytest11``
entry point), so importing it loads nothing of pptrace's but the model, and nothing else at all
until it is asked to trace.
"""
