"""What an install puts into site-packages: pptrace's own names only, and no Textual by default.

Builds the real wheel (``pip wheel --no-deps``) and reads its file list and metadata: the
distribution must not install generic top-level import names (``tui``, ``samples``), must ship
the viewer's styles and the native reader's source, and must require Textual only through the
``view`` extra, so that an engine's ranks that only record never install it.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pptrace.record import native_files

ROOT = Path(__file__).resolve().parent.parent


SOURCES = ("pyproject.toml", "README.md", "pptrace", "tui", "samples")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # Built from a copy: setuptools writes build/ beside the sources it builds.
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(src)], check=True, capture_output=True,
                   timeout=300)
    (path,) = out.glob("pptrace-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_wheel_installs_only_pptrace_names(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()
            if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"pptrace", "pptrace_tui", "pptrace_samples"}


@pytest.mark.slow
def test_the_wheel_ships_what_runs_outside_python(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "pptrace_tui/app.tcss" in names
    assert {f"pptrace/record/{p.name}" for p in native_files()} <= names
    assert len(native_files()) == 3  # the reader, the renderer, their header
    assert "pptrace/activation/_bootstrap/sitecustomize.py" in names


@pytest.mark.slow
def test_textual_is_only_in_the_view_extra(wheel: zipfile.ZipFile) -> None:
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = email.message_from_bytes(wheel.read(meta)).get_all("Requires-Dist") or []
    textual = [r for r in requires if r.lower().startswith("textual")]
    assert textual and all("extra == \"view\"" in r or "extra == 'view'" in r or
                           "extra == \"dev\"" in r for r in textual), textual
    assert any("extra == \"view\"" in r for r in textual)
    base = [r for r in requires if "extra ==" not in r]
    assert not any(r.lower().startswith(("textual", "rich")) for r in base), base


@pytest.mark.slow
def test_the_entry_points_name_modules_that_exist(wheel: zipfile.ZipFile) -> None:
    import importlib

    (eps,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    targets = [line.split("=", 1)[1].strip() for line in wheel.read(eps).decode().splitlines()
               if "=" in line]
    assert len(targets) >= 3
    for target in targets:
        module, _, attr = target.partition(":")
        loaded = importlib.import_module(module)
        assert not attr or hasattr(loaded, attr), target  # pytest11's names a module only
