"""The dependency rules, each a named test that fails naming the rule it guards.

1. The import contracts in ``pyproject.toml`` (``[tool.importlinter]``): one contract per rule,
   named as the rule; ``lint-imports`` must keep them all, and a deliberately wrong import in a
   copy of the tree must break the rule by name.
2. No import cycle anywhere in ``pptrace``, the viewer or the samples (every import counts: lazy
   ones and ``TYPE_CHECKING`` ones too), each cycle listed by module names.
3. What each module loads *at import time*, in a fresh interpreter per module (an import anywhere
   in this test process would hide a violation): the recording path (``model``, ``record``,
   ``export``, ``activation``) loads no Textual, no read side and no network exporter; the read
   side (``model``, ``load``, ``analyze``, ``report`` and the reading commands) loads no torch and
   no OpenTelemetry. The module lists are computed from the folders, so a new module is covered
   by itself; a folder the rules name that is missing fails, it never skips.
4. ``pptrace`` never imports the viewer, even by a name given to ``importlib``; the network
   exporters are imported only inside functions of ``pptrace.export.otlp``;
   ``pptrace.__all__`` is sorted.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pptrace

ROOT = Path(__file__).resolve().parent.parent
# Each import package and the repository folder it is installed from (pyproject's package-dir).
PACKAGES = {"pptrace": ROOT / "pptrace", "pptrace_tui": ROOT / "tui",
            "pptrace_samples": ROOT / "samples"}


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: it is in the dev extra (pip install -e '.[dev]')")
    return path


# --- 1. the import contracts ---------------------------------------------------------------

CONTRACT_LINE = re.compile(r"^(?P<name>.+) (?P<state>KEPT|BROKEN)(?: \(.*\))?$")


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> tuple[int, str, dict[str, str]]:
    """Run lint-imports in ``cwd``: its exit status, its output, and each contract's state."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([_tool("lint-imports"), "--no-cache", "--no-logo"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    states = {m["name"]: m["state"] for line in output.splitlines()
              if (m := CONTRACT_LINE.match(line.strip()))}
    return done.returncode, output, states


def test_the_import_contracts_hold() -> None:
    status, output, states = lint_imports(ROOT)
    broken = sorted(name for name, state in states.items() if state == "BROKEN")
    assert broken == [], "broken rules: " + "; ".join(broken) + "\n" + output[-6000:]
    # Every rule was checked (a config error or a lost section would otherwise read as kept).
    assert len(states) >= 15, output[-6000:]
    assert status == 0, output[-6000:]


def copy_of_the_tree(into: Path) -> Path:
    """The three packages under their import names, and the contracts, in a folder of their own."""
    for package, folder in PACKAGES.items():
        shutil.copytree(folder, into / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


# (file in the copy, a wrong import appended to it, the rule it must break by name)
WRONG_IMPORTS = [
    ("pptrace/model/records.py", "import opentelemetry.trace",
     "model imports the standard library only"),
    ("pptrace/record/ranks.py", "import pptrace.export.file_sink",
     "the write side is layered: activation > export > record > model"),
    ("pptrace/analyze/scan.py", "import pptrace.report.text",
     "the read side is layered: cli > report > analyze | load > model"),
    ("pptrace/load/fast.py", "import pptrace.record.recorder",
     "the read side never imports the write side"),
    ("pptrace/analyze/pairing.py", "import torch",
     "loading and analyzing never import torch or OpenTelemetry"),
    ("pptrace/analyze/scan.py", "import logging", "analyze is pure: no I/O, no logging, no "
     "processes, no clock"),
    ("pptrace/record/wrapper.py", "import textual.app",
     "the recording path imports neither Textual nor the network"),
    ("pptrace/export/spans.py", "import pptrace_tui.app", "pptrace never imports the viewer"),
    ("pptrace_tui/index.py", "from pptrace.load import loader",
     "the viewer reads model, analyze and report only"),
    ("pptrace/export/spans.py", "import pptrace_samples.faults",
     "samples are imported only by the demo command"),
    ("pptrace/report/text.py", "import argparse", "only the command line uses argparse"),
    ("pptrace/analyze/pairing.py", "import pptrace.analyze.analyzer",
     "no import cycles: between folders, nor between the modules of a folder"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "line", "rule"), WRONG_IMPORTS,
                         ids=[f"{line} in {path}" for path, line, _ in WRONG_IMPORTS])
def test_a_wrong_import_breaks_its_rule_by_name(tmp_path: Path, path: str, line: str,
                                                rule: str) -> None:
    tree = copy_of_the_tree(tmp_path)
    target = tree / path
    before = lint_imports(tree, pythonpath=tree)[2]
    assert before.get(rule) == "KEPT", f"{rule!r} is not kept before the change: {before}"
    target.write_text(target.read_text("utf-8") + f"\n{line}  # deliberately wrong\n", "utf-8")
    status, output, after = lint_imports(tree, pythonpath=tree)
    assert status != 0, output[-4000:]
    assert after.get(rule) == "BROKEN", output[-4000:]
    assert f"{rule}\n" in output  # the broken contract's own section names it


# --- 3. fresh-interpreter probes (being rewritten) ---

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



# --- 4. what the folders import, read from the source ----------------------------------------

def tui_imports_in(path: Path, root: Path = ROOT) -> list[str]:
    """Every way a source file could import the viewer: import statements and literal names
    passed to ``importlib.import_module`` or ``__import__``."""
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
                  if n.split(".")[0] in ("tui", "pptrace_tui")]
    return found


def test_pptrace_never_imports_the_viewer() -> None:
    sources = sorted(PACKAGES["pptrace"].rglob("*.py"))
    assert len(sources) > 10
    offenders = [hit for path in sources for hit in tui_imports_in(path)]
    assert offenders == []


def test_the_viewer_rule_detects_an_import(tmp_path: Path) -> None:
    """The scanner above is not vacuous: it finds each form of import."""
    sample = tmp_path / "sample.py"
    sample.write_text("import pptrace_tui.app\nfrom tui import messages\nimport importlib\n"
                      "importlib.import_module('pptrace_tui.widgets')\nimport tuition\n", "utf-8")
    assert tui_imports_in(sample, tmp_path) == [
        "sample.py:1: pptrace_tui.app", "sample.py:2: tui", "sample.py:4: pptrace_tui.widgets"]


def test_public_names_are_sorted() -> None:
    assert pptrace.__all__ == sorted(pptrace.__all__)
