"""The tooling holds on every change: ruff over the tree, mypy --strict on pptrace/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: it is in the dev extra (pip install -e '.[dev]')")
    return path


def test_ruff_is_clean() -> None:
    done = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mypy_strict_is_clean(tmp_path: Path) -> None:
    done = subprocess.run([_tool("mypy"), "--cache-dir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
