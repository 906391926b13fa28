"""The worked example ``docs/examples/own_pp``: a 2-rank torchrun (gloo, CPU) pipeline with a
transport module of its own, traced with ``pptrace run --target`` and from code, then analysed:
the README's commands, run exactly as written, find nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers_startup import PYTHON, REPO, child_env

EXAMPLE = REPO / "docs" / "examples" / "own_pp"
BIN = Path(PYTHON).parent  # pptrace and torchrun, as the venv installs them
STEPS = [f"step {s}: tokens [{s}, {s + 1}], scores sum {8.0 * s}" for s in range(4)]
# The example's README, as a user copies it.
RUN = ("pptrace run --target my_transport:attach_aux,pop_aux -- "
       "torchrun --standalone --nproc-per-node 2 pp_script.py")
FROM_CODE = "torchrun --standalone --nproc-per-node 2 pp_script_traced.py"
ANALYZE = "pptrace analyze pptrace-traces"


def _shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command.split(), cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    here = tmp_path / "own_pp"
    shutil.copytree(EXAMPLE, here)
    return here


def _env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    # PPTRACE_NATIVE=0: no background build of the native reader here (its own test builds one).
    return child_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", TMPDIR=str(tmp),
                     PPTRACE_NATIVE="0")


def _steps(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


def _assert_no_finding(folder: Path, env: dict[str, str]) -> None:
    analyzed = _shell(ANALYZE, folder, env)
    assert analyzed.returncode == 0, analyzed.stdout + analyzed.stderr
    assert analyzed.stdout.splitlines()[:2] == [
        "pptrace analyze: 2 processes, 8 pptrace events (4 attach, 4 extract)",
        "No findings: every attach and extract agrees with its other end."], analyzed.stdout


def test_the_readme_names_the_commands_this_test_runs() -> None:
    readme = (EXAMPLE / "README.md").read_text()
    for command in (RUN, FROM_CODE, ANALYZE):
        assert f"    {command}\n" in readme, command


@pytest.mark.slow
def test_pptrace_run_with_a_target_traces_the_script_unchanged(
    folder: Path, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    proc = _shell(RUN, folder, env)
    assert proc.returncode == 0, proc.stderr
    assert _steps(proc.stdout) == STEPS
    said = [line for line in proc.stderr.splitlines() if line.startswith("pptrace")]
    assert said == ["pptrace: 2 processes recorded; traces in pptrace-traces; "
                    "next: pptrace analyze pptrace-traces"], proc.stderr  # once for the run
    assert len(list((folder / "pptrace-traces").glob("pptrace-rank*-pid*.otlp.jsonl"))) == 2
    assert list((tmp_path / "tmp").glob("pptrace-run-*")) == []  # its bookkeeping is gone
    _assert_no_finding(folder, env)


@pytest.mark.slow
def test_instrument_with_a_target_traces_the_script_from_code(
    folder: Path, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    proc = _shell(FROM_CODE, folder, env)
    assert proc.returncode == 0, proc.stderr
    assert _steps(proc.stdout) == STEPS
    assert "pptrace" not in proc.stderr, proc.stderr  # nothing lost, nothing to say
    _assert_no_finding(folder, env)
