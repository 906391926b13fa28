"""``pytest --pptrace``: a test whose trace is incomplete never passes silently (real pytest runs).

The inner tests pass by their own checks, but each leaves pptrace less than the whole story:

- a forked child that calls the transport and leaves with ``os._exit`` (no exit flush);
- a test that calls ``pptrace.uninstrument()`` itself, then makes more calls;
- a test that calls ``pptrace.instrument(Config(trace_dir=...))`` itself while traced;
- a background child still recording after its test passed, which writes the removed folder
  again.

Each gets an ``IncompleteTrace`` warning naming why, and the session's summary lists them; a
healthy in-process test gets none.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

INNER = '''
import os
import subprocess
import sys

import pptrace
import torch
from pptrace.engines.sglang_load import load_transport_module
from pptrace.model.config import Config

mod = load_transport_module(allow_bare=True)
CHILD = """
import os, sys, time
folder = os.environ["PPTRACE_DIR"]
deadline = time.monotonic() + 60
while os.path.exists(folder) and time.monotonic() < deadline:  # until its test has ended
    time.sleep(0.05)
import torch
from pptrace.engines.sglang_load import load_transport_module
mod = load_transport_module(allow_bare=True)
class Out:
    def to_pp_tensors(self):
        return {"a": torch.ones(1)}
mod.add_auxiliary_output_to_pp_tensors({}, Out())
"""
BACKGROUND = []


class Output:
    def to_pp_tensors(self):
        return {"a": torch.ones(1)}


def attach(n):
    for _ in range(n):
        mod.add_auxiliary_output_to_pp_tensors({}, Output())


def test_forked_child_leaves_with_os_exit():
    attach(1)
    pid = os.fork()
    if pid == 0:
        attach(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0


def test_own_uninstrument():
    attach(1)
    pptrace.uninstrument()
    attach(2)


def test_own_instrument(tmp_path):
    pptrace.instrument(Config(trace_dir=str(tmp_path / "mine")))
    attach(2)


def test_healthy_in_process():
    attach(2)


def test_background_child_outlives_its_test():
    BACKGROUND.append(subprocess.Popen([sys.executable, "-c", CHILD]))


def test_zz_after_the_background_child():
    assert BACKGROUND[0].wait(120) == 0
'''


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose runs see no pptrace settings of this process (the native dir aside)."""
    for name in list(os.environ):
        if name.startswith(("PPTRACE_", "OTEL_")) and name != "PPTRACE_NATIVE_DIR":
            monkeypatch.delenv(name)
    # Its own temporary directory: the plugin keeps a failing test's traces in a folder made
    # there (the inner runs' failing tests are on purpose), removed with pytester's.
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return pytester


@pytest.mark.slow
def test_incomplete_traces_are_warned_and_summarised(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gaps=INNER)
    result = inner.runpytest_subprocess("--pptrace", "-v", "-p", "no:cacheprovider",
                                        "-W", "default", timeout=240)
    result.assert_outcomes(passed=6, warnings=3)
    text = result.stdout.str()
    warned = [ln for ln in result.outlines if "IncompleteTrace: pptrace: incomplete trace:" in ln]
    assert len(warned) == 3, text
    summary = text[text.index("- pptrace -"):]
    assert "pptrace: 3 tests with an incomplete trace:" in summary
    lines = {ln.split(": ", 1)[0].strip(): ln for ln in summary.splitlines() if "::" in ln}
    assert "called the transport but left no trace" in lines[
        "test_gaps.py::test_forked_child_leaves_with_os_exit"]
    assert "called pptrace.uninstrument() itself" in lines["test_gaps.py::test_own_uninstrument"]
    assert "called pptrace.instrument() itself while this process was traced" in lines[
        "test_gaps.py::test_own_instrument"]
    assert "test_healthy_in_process" not in summary and "test_zz" not in summary
    rewritten = [ln for ln in summary.splitlines() if "went on recording after it ended" in ln]
    assert len(rewritten) == 1 and "test_background_child_outlives_its_test" in rewritten[0]
