"""Session-wide test settings.

The native metadata reader (``pptrace.record.native``) is used whenever a build for this torch and
Python exists in ``PPTRACE_NATIVE_DIR``. The tests point it at a folder that does not exist, so
that a reader built on the developer's machine never decides which path a test takes: the Python
reads are the default here, and ``tests/test_native.py`` builds the reader and runs both paths.
``PPTRACE_TEST_NATIVE_DIR=DIR`` runs the whole suite with the reader built in DIR instead.

Nothing outside a test decides its result: each test starts in an empty working directory of its
own (``pptrace demo`` leaves ``./pptrace-traces`` in a clone, which ``pptrace analyze`` with no
path would read), and the variables pptrace and OpenTelemetry read from a developer's shell
(``PPTRACE_*``, ``OTEL_*``; not the suite's own ``PPTRACE_TEST_*``) are cleared for the
session; a test sets what it needs itself.

Two tiers: ``pytest`` runs the fast tier (a developer's default, a few minutes); ``pytest --slow``
adds the tests marked ``slow`` (real multi-process gloo pipelines, subprocesses, real terminals,
the type checker), which the README's test command and CI run. ``-m`` still selects as usual.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

for _name in [n for n in os.environ if n.startswith(("PPTRACE_", "OTEL_"))]:
    if not _name.startswith("PPTRACE_TEST_"):  # the suite's own knobs stay
        del os.environ[_name]

if os.environ.get("PPTRACE_TEST_NATIVE_DIR"):
    os.environ["PPTRACE_NATIVE_DIR"] = os.environ["PPTRACE_TEST_NATIVE_DIR"]
else:  # a folder of this session's own, with no build in it: removed when the session ends
    os.environ["PPTRACE_NATIVE_DIR"] = _NO_NATIVE = os.path.join(
        tempfile.gettempdir(), f"pptrace-tests-no-native-{os.getpid()}")
    atexit.register(shutil.rmtree, _NO_NATIVE, ignore_errors=True)


def pytest_sessionstart(session: object) -> None:
    """With PPTRACE_TEST_NATIVE_DIR, refuse to run unless the reader really loads."""
    if os.environ.get("PPTRACE_TEST_NATIVE_DIR"):
        from pptrace.record import native

        if native.reader() is None:
            raise RuntimeError(f"PPTRACE_TEST_NATIVE_DIR: {native.status().reason}")


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Each test runs in an empty directory of its own, never in the checkout."""
    here = os.getcwd()
    cwd = tmp_path_factory.mktemp("cwd")
    os.chdir(cwd)
    try:
        yield cwd
    finally:
        os.chdir(here)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="also run the slow tier (tests marked slow), as CI does")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --slow (or an explicit -m), the slow tier is deselected, and counted as such."""
    if config.getoption("--slow") or config.getoption("markexpr"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
