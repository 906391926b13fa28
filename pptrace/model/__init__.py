"""The vocabulary every other part speaks: records, the span schema, findings, config, errors.

Rule: imports the standard library only (never torch, OpenTelemetry, Textual or another
pptrace folder), so that anything may import it. Enforced by the import contracts in
``pyproject.toml`` and by ``tests/test_architecture.py``.
"""
