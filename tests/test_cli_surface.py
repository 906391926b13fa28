"""What every ``pptrace`` command does at its edges: ``--version``, and a closed output pipe.

A user pipes into ``head`` all the time (``pptrace diff A B --format json | head``); a command
must then end quietly, with no ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = str(Path(__file__).parent / "data" / "golden-pp2")
PPTRACE = [sys.executable, "-m", "pptrace"]


def test_version_names_the_installed_distribution() -> None:
    from importlib.metadata import version

    done = subprocess.run([*PPTRACE, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == f"pptrace {version('pptrace')}"


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["analyze", GOLDEN],
    ["analyze", GOLDEN, "--format", "json"],
    ["diff", GOLDEN, GOLDEN, "--format", "json"],
    ["diff", GOLDEN, GOLDEN],
    ["demo", "--list-faults"],
    ["run", "--print-env"],
    ["--help"],
], ids=" ".join)
def test_a_closed_output_pipe_ends_the_command_quietly(args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    try:
        done = subprocess.run([*PPTRACE, *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode in (0, 1, 141)  # 141: as a shell reports a command ended by SIGPIPE
