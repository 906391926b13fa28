"""Imported once by the fork server, so that every rank process starts in milliseconds.

Rank processes are forked from a clean fork-server process (never from the launcher), so they
inherit these imports and nothing else: each rank still wires its own pptrace recorder.
"""

from __future__ import annotations

from .pipeline import transport_module

transport_module()
