"""The fast path by default: ``pptrace run`` builds the native reader by itself, off the engine's
path (``pptrace.activation.autobuild``).

With a compiler and no build for this torch and Python, the launcher starts a detached build,
said in one line, and the command runs at once; a process running when it lands hands its calls
to the C wrapper from then on, and processes started after it get the C wrapper.
``PPTRACE_NATIVE=0`` and ``--native-build off`` attempt nothing; a failed build is one line and
the Python wrapper; ``--native-build wait`` builds before the command. Each test has its own
``PPTRACE_NATIVE_DIR``; one of them compiles for real (about 25 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pptrace.activation import autobuild
from pptrace.load.loader import load_paths
from tests.helpers_startup import BARE_SGLANG, PYTHON, REPO, child_env, run_pptrace

HAS_COMPILER = bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))
AUTO = ["--native-build", "auto", "--"]  # the default (tests' run_pptrace says off)
FALSE = shutil.which("false") or "/bin/false"  # a "compiler" that fails at once
# A traced process: which wrapper did it get?
PROBE = BARE_SGLANG + """
import sglang.srt.sampling.sampling_observer_pp as mod
from pptrace.record import native
print(type(mod.add_auxiliary_output_to_pp_tensors).__name__, native.status().loaded)
"""


# A traced process that runs while the build goes on: it calls the transport until its wrapper
# hands its calls to the C wrapper (or argv[1] seconds pass), then five pairs more.
RUNNING = BARE_SGLANG + """
import sys, time, torch
import sglang.srt.sampling.sampling_observer_pp as mod
from pptrace.record import native
attach, extract = mod.add_auxiliary_output_to_pp_tensors, mod.pop_auxiliary_output_from_pp_tensors
print(type(attach).__name__, native.status().loaded, flush=True)
class Out:
    def to_pp_tensors(self):
        return {"a": torch.ones(2, 3)}
class Obs:
    def from_pp_tensors(self, tensors):
        return tensors
def handed_to():
    return dict(zip(attach.__code__.co_freevars, attach.__closure__))["native_hot"].cell_contents
def pair():
    d = {"next_token_ids": torch.zeros(1)}
    attach(d, Out())
    extract(d, Obs())
end = time.monotonic() + float(sys.argv[1])
while handed_to() is None and time.monotonic() < end:
    pair()
    time.sleep(0.02)  # about 50 pairs a second, as a slow engine step would make them
for _ in range(5):
    pair()
print(type(handed_to()).__name__, native.status().loaded,
      mod.add_auxiliary_output_to_pp_tensors is attach, flush=True)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return child_env(PYTHONPATH=str(REPO), PPTRACE_NATIVE_DIR=str(tmp_path / "native"),
                     **extra)


def _said(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("pptrace") and "native" in ln]


def _stamp(env: dict[str, str]) -> autobuild.Stamp | None:
    path = autobuild.stamp_path(env)
    assert path is not None  # torch is installed here
    return autobuild.read_stamp(path)


def _wait_for_stamp(env: dict[str, str], timeout: float) -> autobuild.Stamp:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stamp = _stamp(env)
        if stamp is not None:
            return stamp
        time.sleep(0.2)
    log = Path(env["PPTRACE_NATIVE_DIR"]) / "auto" / "build.log"
    raise AssertionError(f"no build finished in {timeout} s: "
                         f"{log.read_text() if log.exists() else 'no build.log'}")


@pytest.mark.parametrize("off", [{"PPTRACE_NATIVE": "0"}, {}])
def test_native_off_attempts_no_build(
    tmp_path: Path, off: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path, **off)
    args = ["--native-build", "off"] if not off else ["--native-build", "auto"]
    proc = run_pptrace([*args, "--", PYTHON, "-c", "print('ran')"], env, tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    assert _said(proc) == []
    # That no builder started is the launcher's decision, checked where it is made: a build
    # starts only through _spawn, so a launch that reaches it fails here at once (no waiting
    # for a folder that a detached builder might make later).
    spawned: list[object] = []
    monkeypatch.setattr(autobuild, "_spawn", spawned.append)
    autobuild.launch("off" if not off else "auto", env)
    assert spawned == []


def test_a_failed_build_is_one_line_and_the_python_wrapper(tmp_path: Path) -> None:
    env = _env(tmp_path, CXX=FALSE)
    waited = run_pptrace(["--native-build", "wait", "--", PYTHON, "-c", PROBE], env, tmp_path)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == "function False\n"  # the Python wrapper recorded
    (line,) = _said(waited)
    assert line.startswith("pptrace: building the native reader for torch ")
    assert "failed: pptrace native build: the compiler failed (exit 1)" in line
    assert line.endswith("the Python wrapper records instead")

    # In the background: the failure is said once, by the next start, then never again.
    bg = _env(tmp_path / "bg", CXX=FALSE)
    first = run_pptrace([*AUTO, PYTHON, "-c", "pass"], bg, tmp_path)
    assert first.returncode == 0, first.stderr
    stamp = _wait_for_stamp(bg, 120)
    assert not stamp.ok and "the compiler failed" in stamp.error and not stamp.reported
    second = run_pptrace([*AUTO, PYTHON, "-c", "pass"], bg, tmp_path)
    (told,) = _said(second)
    assert told.startswith("pptrace: the native reader's background build failed: ")
    third = run_pptrace([*AUTO, PYTHON, "-c", "pass"], bg, tmp_path)
    assert _said(third) == [] and third.returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: nothing is built without one")
def test_the_reader_is_built_in_the_background_and_used_from_the_next_start(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    first = run_pptrace([*AUTO, PYTHON, "-c", PROBE], env, tmp_path)
    # The command ran and ended while the build went on (a compile takes 20 s or more).
    assert list((tmp_path / "native").glob("*/*.so")) == []
    assert first.returncode == 0, first.stderr
    assert first.stdout == "function False\n"  # this start: the Python wrapper, not held up
    (line,) = _said(first)
    assert line.startswith("pptrace: building the native reader for torch ")
    assert "in the background" in line and str(tmp_path / "native") in line
    # A process started while the build goes on takes it up when it lands, in place.
    running = run_pptrace([PYTHON, "-c", RUNNING, "500"], {**env, "PPTRACE_DIR": str(
        tmp_path / "running")}, tmp_path, timeout=560)
    assert running.returncode == 0, running.stderr
    assert running.stdout == "function False\nHot True True\n", running.stderr
    trace = load_paths([str(tmp_path / "running")])
    (process,) = trace.processes
    assert process.stats is not None and process.stats.final
    assert process.stats.internal_errors == 0 and process.stats.dropped == 0
    assert process.stats.exported == process.stats.recorded == len(process.events)
    described = {(e.direction, e.names, tuple((t.shape, t.dtype, t.device, t.contiguous)
                                              for t in e.tensors)) for e in process.events}
    assert len(described) == 2 and len(process.events) >= 12  # the same events, both ways
    stamp = _wait_for_stamp(env, 500)
    assert stamp.ok and os.path.exists(stamp.library), stamp

    again = run_pptrace([*AUTO, PYTHON, "-c", PROBE], env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "Hot True\n"  # the next start: the C wrapper
    assert _said(again) == []  # built: nothing to say, nothing started
    waited = run_pptrace(["--native-build", "wait", "--", PYTHON, "-c", PROBE], env, tmp_path)
    assert waited.stdout == "Hot True\n" and _said(waited) == []
