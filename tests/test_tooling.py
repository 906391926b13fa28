"""The tooling holds on every change: ruff over the tree, mypy --strict on pptrace/ and tui/, and
the tests import their helper modules one way (``from tests.helpers_x import ...``).

The import contracts (``lint-imports``) and the cycle check are in ``tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
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


def local_imports_by_bare_name(path: Path, local: set[str]) -> list[str]:
    """Imports in a test file that name a module of tests/ without the ``tests.`` package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] in local]
    return found


def test_the_tests_import_their_helpers_one_way() -> None:
    """``from tests.helpers_x import`` everywhere: a module imported both as ``helpers_x`` and as
    ``tests.helpers_x`` is loaded twice, and its classes then differ (``isinstance`` fails, and
    the qualified names that span attributes record change)."""
    tests = ROOT / "tests"
    local = {p.stem for p in tests.glob("*.py") if not p.stem.startswith(("test_", "conftest"))}
    assert {"doubles", "helpers_core", "helpers_recorder"} <= local, local
    offenders = [hit for path in sorted(tests.glob("*.py"))
                 for hit in local_imports_by_bare_name(path, local)]
    assert offenders == [], "import these as tests.<module>: " + "; ".join(offenders)
