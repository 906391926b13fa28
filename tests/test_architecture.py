"""The dependency rules, each a named test.

1. Loading and analyzing traces never imports torch or the OpenTelemetry SDK (checked in a fresh
   interpreter per module, since an import anywhere in this test process would hide a violation).
2. ``tui/`` imports ``pptrace``, never the reverse.
3. ``import pptrace`` alone is cheap: no torch.
4. The recording path imports neither Textual nor an OTLP network exporter.
5. ``pptrace.__all__`` is sorted.

Modules that do not exist yet are skipped by name (they are being built in parallel).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pptrace

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "opentelemetry.sdk")
UI_AND_NETWORK = ("textual", "grpc", "opentelemetry.exporter.otlp.proto.grpc",
                  "opentelemetry.exporter.otlp.proto.http")

# Imports each module in turn and reports which forbidden packages each one brought in.
PROBE = """
import importlib, json, sys
forbidden = json.loads(sys.argv[1])
found = {}
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    found[name] = sorted(f for f in forbidden
                         if any(m == f or m.startswith(f + ".") for m in sys.modules))
print(json.dumps(found))
"""


def imported_in_fresh_interpreter(
    modules: list[str], forbidden: tuple[str, ...]
) -> dict[str, list[str]]:
    """For each module (imported in order), the forbidden packages loaded by then."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(forbidden), json.dumps(modules)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def require(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} does not exist yet (being built in parallel)")


READERS = ["pptrace.model.records", "pptrace.model.schema", "pptrace.model.trace",
           "pptrace.model.findings", "pptrace.model.errors", "pptrace.load.loader",
           "pptrace.load.otlp", "pptrace.load.jaeger", "pptrace.analyze.analyzer",
           "pptrace.analyze.pairing", "pptrace.report.text", "pptrace.report.diff",
           "pptrace.load.jaeger_fetch", "pptrace.cli.main", "pptrace.cli.analyze",
           "pptrace.cli.diff"]


@pytest.mark.slow
@pytest.mark.parametrize("module", READERS,
                         ids=[f"{m} never imports torch or the OpenTelemetry SDK" for m in READERS])
def test_reading_traces_never_imports_torch_or_the_otel_sdk(module: str) -> None:
    require(module)
    found = imported_in_fresh_interpreter([module], HEAVY)
    assert found[module] == [], f"importing {module} loads {found[module]}"


def tui_modules() -> list[str]:
    package = ROOT / "tui"
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in package.rglob("*.py")
    )


@pytest.mark.slow
def test_the_tui_never_imports_torch_or_the_otel_sdk() -> None:
    require("tui")
    modules = tui_modules()
    found = imported_in_fresh_interpreter(modules, HEAVY)
    offenders = {m: f for m, f in found.items() if f}
    # Report the first module that brought each package in, not everything imported after it.
    assert offenders == {}, f"first offender: {next(iter(offenders.items()))}"


@pytest.mark.slow
def test_import_pptrace_alone_imports_no_torch() -> None:
    assert imported_in_fresh_interpreter(["pptrace"], HEAVY)["pptrace"] == []


@pytest.mark.slow
def test_the_recording_path_imports_no_textual_and_no_network_exporter() -> None:
    modules = ["pptrace.record.wrapper", "pptrace.record.recorder", "pptrace.export.spans"]
    found = imported_in_fresh_interpreter(modules, UI_AND_NETWORK)
    assert found == {m: [] for m in modules}


def tui_imports_in(path: Path, root: Path = ROOT) -> list[str]:
    """Every way a source file could import ``tui``: import statements and literal names passed
    to ``importlib.import_module`` or ``__import__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if callee in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                  if n == "tui" or n.startswith("tui.")]
    return found


def test_pptrace_never_imports_tui() -> None:
    sources = sorted((ROOT / "pptrace").rglob("*.py"))
    assert len(sources) > 10
    offenders = [hit for path in sources for hit in tui_imports_in(path)]
    assert offenders == []


def test_the_tui_rule_detects_an_import(tmp_path: Path) -> None:
    """The scanner above is not vacuous: it finds each form of import."""
    sample = tmp_path / "sample.py"
    sample.write_text("import pptrace_tui.app\nfrom tui import messages\nimport importlib\n"
                      "importlib.import_module('pptrace_tui.widgets')\nimport tuition\n", "utf-8")
    assert tui_imports_in(sample, tmp_path) == [
        "sample.py:1: pptrace_tui.app", "sample.py:2: tui", "sample.py:4: pptrace_tui.widgets"]


def test_public_names_are_sorted() -> None:
    assert pptrace.__all__ == sorted(pptrace.__all__)


def test_the_probe_sees_what_a_module_imports() -> None:
    """The fresh-interpreter probe is not vacuous: it reports a package a module pulls in."""
    assert imported_in_fresh_interpreter(["email.message"], ("email", "torch")) == {
        "email.message": ["email"]}
