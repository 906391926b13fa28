"""Session-wide test settings.

The native metadata reader (``pptrace.record.native``) is used whenever a build for this torch and
Python exists in ``PPTRACE_NATIVE_DIR``. The tests point it at a folder that does not exist, so
that a reader built on the developer's machine never decides which path a test takes: the Python
reads are the default here, and ``tests/test_native.py`` builds the reader and runs both paths.
``PPTRACE_TEST_NATIVE_DIR=DIR`` runs the whole suite with the reader built in DIR instead.
"""

from __future__ import annotations

import os
import tempfile

os.environ["PPTRACE_NATIVE_DIR"] = os.environ.get("PPTRACE_TEST_NATIVE_DIR") or os.path.join(
    tempfile.gettempdir(), f"pptrace-tests-no-native-{os.getpid()}")


def pytest_sessionstart(session: object) -> None:
    """With PPTRACE_TEST_NATIVE_DIR, refuse to run unless the reader really loads."""
    if os.environ.get("PPTRACE_TEST_NATIVE_DIR"):
        from pptrace.record import native

        if native.reader() is None:
            raise RuntimeError(f"PPTRACE_TEST_NATIVE_DIR: {native.status().reason}")
