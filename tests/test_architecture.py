"""The dependency rules, each a named test that fails naming the rule it guards.

1. The import contracts in ``pyproject.toml`` (``[tool.importlinter]``): one contract per rule,
   named as the rule; ``lint-imports`` must keep them all, and a deliberately wrong import in a
   copy of the tree must break the rule by name.
2. No import cycle anywhere in ``pptrace``, the viewer or the samples (every import counts: lazy
   ones and ``TYPE_CHECKING`` ones too), each cycle listed by module names.
3. What each module loads *at import time*, in a fresh interpreter per module (an import anywhere
   in this test process would hide a violation): the recording path (``model``, ``record``,
   ``export``, ``activation``) loads no Textual, no read side and no network exporter (export
   loads no torch; activation loads export only when it starts exporting); the read side
   (``model``, ``load``, ``analyze``, ``report`` and the reading commands) loads no torch and no
   OpenTelemetry; a plugin (``plugins``, which pytest loads in every session) loads nothing of
   pptrace's but the model. The module lists are computed from the folders, so a new module is
   covered by itself; a folder the rules name that is missing fails, it never skips.
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

import grimp
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
    ("pptrace/record/wrapper.py", "import textual.app", "the recording path imports no Textual"),
    ("pptrace/ship/tail.py", "import torch",
     "the OTLP shipper imports no torch, activation, CLI or analysis"),
    ("pptrace/activation/hook.py", "import pptrace.ship.shipper",
     "the engine's process starts the shipper by name and never imports it"),
    ("pptrace/export/spans.py", "import urllib.request",
     "the recording path imports no network client, but export.otlp's lazy ones"),
    ("pptrace/export/spans.py", "import pptrace_tui.app", "pptrace never imports the viewer"),
    ("pptrace_tui/index.py", "from pptrace.load import loader",
     "the viewer reads model, analyze and report only"),
    ("pptrace_tui/index.py", "from pptrace.analyze.payload import same",
     "the grid paints the analyzer's verdicts: it imports no payload comparison"),
    ("pptrace/export/spans.py", "import pptrace_samples.faults",
     "samples are imported only by the demo command"),
    ("pptrace/report/text.py", "import argparse", "only the command line uses argparse"),
    ("pptrace/analyze/pairing.py", "import pptrace.analyze.analyzer",
     "no import cycles: between folders, nor between the modules of a folder"),
    ("pptrace/activation/patch.py", "import pptrace.analyze.analyzer",
     "the write side never imports the read side"),
    ("pptrace/report/text.py", "import pptrace.load.loader",
     "a report renders what it is given: it never loads"),
    ("pptrace/record/ranks.py", "import opentelemetry.trace",
     "recording imports no OpenTelemetry: sinks are handed in"),
    ("pptrace/export/otlp.py", "import torch",
     "export never imports torch, not even through record's raw-event reader"),
    ("pptrace_tui/export.py", "import pptrace.cli.main",
     "nothing imports the command line but `python -m pptrace`"),
    ("pptrace/cli/main.py", "import pptrace.plugins.pytest_plugin",
     "nothing imports the plugins, and only the plugins import pytest"),
    ("pptrace/report/text.py", "import pytest",
     "nothing imports the plugins, and only the plugins import pytest"),
    ("pptrace/analyze/rules.py", "import pptrace.engines.sglang",
     "the core never imports an engine adapter except through the registry"),
    ("pptrace/record/ranks.py", "from pptrace.engines import vllm",
     "the core never imports an engine adapter except through the registry"),
    ("pptrace/engines/vllm.py", "import pptrace.record.recorder",
     "engine adapters import nothing of pptrace's but the seam's own records"),
    ("pptrace/engines/sglang.py", "import torch",
     "engine adapters import nothing of pptrace's but the seam's own records"),
]


def test_every_rule_has_a_wrong_import_that_breaks_it() -> None:
    states = lint_imports(ROOT)[2]
    assert sorted(states) == sorted({rule for _, _, rule in WRONG_IMPORTS})


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


# --- 2. no import cycles ----------------------------------------------------------------------

def import_graph(*packages: str) -> grimp.ImportGraph:
    """Every import between the packages' modules (lazy and ``TYPE_CHECKING`` ones included)."""
    return grimp.build_graph(*packages, cache_dir=None)


def import_cycles(graph: grimp.ImportGraph) -> list[str]:
    """One cycle per group of modules that import each other, as ``a (l.3) -> b (l.9) -> a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group: list[str] = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(_one_cycle(graph, group) for group in groups)


def _one_cycle(graph: grimp.ImportGraph, group: list[str]) -> str:
    """The shortest way from the group's first module back to itself, with line numbers."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while start not in came_from:
        following = []
        for module in frontier:
            for imported in sorted(graph.find_modules_directly_imported_by(module) & members):
                if imported not in came_from:
                    came_from[imported] = module
                    following.append(imported)
        frontier = following
    path = [start]
    while len(path) == 1 or path[-1] != start:
        path.append(came_from[path[-1]])
    path.reverse()
    steps = []
    for importer, imported in zip(path, path[1:], strict=False):
        lines = sorted(d["line_number"] for d in graph.get_import_details(
            importer=importer, imported=imported))
        steps.append(f"{importer} (l.{','.join(map(str, lines))})")
    return " -> ".join([*steps, start])


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(*PACKAGES))
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_lists_a_cycle_by_module_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above is not vacuous: a ring of three modules is found, named, in order."""
    package = tmp_path / "ringpkg"
    package.mkdir()
    (package / "__init__.py").write_text("", "utf-8")
    (package / "a.py").write_text("from ringpkg import b\n", "utf-8")
    (package / "b.py").write_text("import os\n\ndef f():\n    from ringpkg import c\n", "utf-8")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    import ringpkg.a\n", "utf-8")
    (package / "d.py").write_text("import ringpkg.a\n", "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(import_graph("ringpkg")) == [
        "ringpkg.a (l.1) -> ringpkg.b (l.4) -> ringpkg.c (l.3) -> ringpkg.a"]


# --- 3. what each module loads at import time, in a fresh interpreter ------------------------

def modules_in(*folders: str) -> list[str]:
    """Every module under the given folders of ``pptrace`` (``"model"``: ``pptrace/model``)."""
    found: list[str] = []
    for folder in folders:
        sources = sorted((PACKAGES["pptrace"] / folder).rglob("*.py"))
        # A folder the rules name must exist: a rename must fail here, never pass as a skip.
        assert sources, f"pptrace/{folder} has no modules: the layout changed, update the rules"
        found += [".".join(("pptrace", *path.relative_to(PACKAGES["pptrace"]).with_suffix("")
                                       .parts)).removesuffix(".__init__") for path in sources]
    return found


# Imports one module and prints every module that importing it loaded.
PROBE = """
import importlib, json, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def loaded_by(module: str) -> list[str]:
    """Every module that importing ``module`` loads, in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PPTRACE_", "OTEL_"))}
    proc = subprocess.run([sys.executable, "-c", PROBE, module], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"importing {module} failed:\n{proc.stderr[-2000:]}"
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def forbidden_in(loaded: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden packages among the loaded modules."""
    return sorted(f for f in forbidden if any(m == f or m.startswith(f + ".") for m in loaded))


READ_SIDE = ("pptrace.load", "pptrace.analyze", "pptrace.report", "pptrace.cli")
VIEWER_AND_NETWORK = ("pptrace_tui", "textual", "rich", "grpc", "requests", "urllib3",
                      "opentelemetry.exporter.otlp.proto.grpc",
                      "opentelemetry.exporter.otlp.proto.http")
TORCH_AND_OTEL = ("torch", "opentelemetry")

MODEL = modules_in("model")
ENGINES = modules_in("engines")
RECORDING = modules_in("record", "export", "activation")
READING = modules_in("load", "analyze", "report")
PLUGINS = modules_in("plugins")
SHIPPING = modules_in("ship")
# The commands that only read traces (the viewer itself is checked below).
READING_COMMANDS = ["pptrace.cli.main", "pptrace.cli.inputs", "pptrace.cli.analyze",
                    "pptrace.cli.diff", "pptrace.cli.view", "pptrace.cli.export"]


@pytest.mark.slow
@pytest.mark.parametrize("module", MODEL,
                         ids=[f"{m} loads the standard library only" for m in MODEL])
def test_a_model_module_loads_the_standard_library_only(module: str) -> None:
    loaded = loaded_by(module)
    foreign = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names)
                     - {"pptrace"})
    # The model reads engine data (prefix, error texts, kinds) from the seam's registry, which
    # is stdlib only too; never its selection (the environment, entry points).
    others = sorted(m for m in loaded if m.startswith("pptrace.")
                    and not m.startswith(("pptrace.model", "pptrace.engines"))
                    or m == "pptrace.engines.select")
    assert (foreign, others) == ([], []), f"importing {module} loads {foreign + others}"


@pytest.mark.slow
@pytest.mark.parametrize("module", ENGINES,
                         ids=[f"{m} loads the standard library only" for m in ENGINES])
def test_an_engine_adapter_loads_the_standard_library_and_the_seam_only(module: str) -> None:
    loaded = loaded_by(module)
    foreign = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names)
                     - {"pptrace"})
    others = sorted(m for m in loaded if m.startswith("pptrace.")
                    and not m.startswith("pptrace.engines"))
    assert (foreign, others) == ([], []), f"importing {module} loads {foreign + others}"


@pytest.mark.slow
@pytest.mark.parametrize("module", MODEL + RECORDING, ids=[
    f"{m} loads no viewer, no read side, no network exporter" for m in MODEL + RECORDING])
def test_the_recording_path_loads_no_viewer_no_read_side_and_no_network_exporter(
    module: str,
) -> None:
    loaded = loaded_by(module)
    found = forbidden_in(loaded, READ_SIDE + VIEWER_AND_NETWORK)
    if module.startswith("pptrace.export"):
        found += forbidden_in(loaded, ("torch",))  # export's rule: never torch
    if module.startswith("pptrace.activation"):
        found += forbidden_in(loaded, ("pptrace.export",))  # activation's: export only lazily
    assert found == [], f"importing {module} loads {found}"


@pytest.mark.slow
@pytest.mark.parametrize("module", MODEL + READING + READING_COMMANDS, ids=[
    f"{m} loads no torch and no OpenTelemetry" for m in MODEL + READING + READING_COMMANDS])
def test_reading_traces_loads_no_torch_and_no_opentelemetry(module: str) -> None:
    if importlib.util.find_spec(module) is None:  # a named command that was renamed
        pytest.fail(f"{module} does not exist: update READING_COMMANDS")
    found = forbidden_in(loaded_by(module), TORCH_AND_OTEL)
    assert found == [], f"importing {module} loads {found}"


def viewer_modules() -> list[str]:
    return sorted(
        ".".join(("pptrace_tui", *path.relative_to(PACKAGES["pptrace_tui"]).with_suffix("")
                  .parts)).removesuffix(".__init__")
        for path in PACKAGES["pptrace_tui"].rglob("*.py"))


# Imports the modules in turn, then prints the forbidden packages loaded by then.
PROBE_ALL = """
import importlib, json, sys
forbidden = json.loads(sys.argv[1])
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
print(json.dumps(sorted(f for f in forbidden
                        if any(m == f or m.startswith(f + ".") for m in sys.modules))))
"""


@pytest.mark.slow
def test_the_viewer_loads_no_torch_and_no_opentelemetry() -> None:
    modules = viewer_modules()
    assert len(modules) > 10, modules
    proc = subprocess.run([sys.executable, "-c", PROBE_ALL, json.dumps(TORCH_AND_OTEL),
                           json.dumps(modules)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.slow
@pytest.mark.parametrize("module", PLUGINS, ids=[
    f"{m} loads nothing of pptrace's but the model" for m in PLUGINS])
def test_a_plugin_loads_nothing_until_it_traces(module: str) -> None:
    """pytest loads its plugins in every session: pptrace installed must cost nothing there."""
    loaded = loaded_by(module)
    found = forbidden_in(loaded, TORCH_AND_OTEL + ("numpy",) + READ_SIDE + (
        "pptrace.record", "pptrace.export", "pptrace.activation"))
    assert found == [], f"importing {module} loads {found}"


@pytest.mark.slow
@pytest.mark.parametrize("module", SHIPPING, ids=[
    f"{m} loads no torch and nothing of the engine's side" for m in SHIPPING])
def test_the_shipper_loads_no_torch(module: str) -> None:
    """The shipper runs beside the engine on its node: it must not pay torch's import."""
    found = forbidden_in(loaded_by(module), ("torch", "numpy", "pptrace.activation"))
    assert found == [], f"importing {module} loads {found}"


@pytest.mark.slow
def test_import_pptrace_alone_imports_no_torch() -> None:
    assert forbidden_in(loaded_by("pptrace"), TORCH_AND_OTEL) == []


@pytest.mark.slow
def test_the_probe_sees_what_a_module_imports() -> None:
    """The fresh-interpreter probe is not vacuous: it reports a package a module pulls in."""
    assert forbidden_in(loaded_by("email.message"), ("email", "torch")) == ["email"]


def test_every_folder_has_its_rule_and_every_module_is_probed() -> None:
    """The lists above are read from the folders; a new folder must be given a rule here."""
    folders = sorted(p.name for p in PACKAGES["pptrace"].iterdir() if (p / "__init__.py").exists())
    assert folders == ["activation", "analyze", "cli", "engines", "export", "load", "model",
                       "plugins", "record", "report", "ship"], ("a folder was added or renamed: "
                                                                "give it its rules")
    assert "pptrace.ship.shipper" in SHIPPING
    assert "pptrace.engines.sglang" in ENGINES and "pptrace.engines.vllm" in ENGINES
    assert "pptrace.record" in RECORDING and "pptrace.record.wrapper" in RECORDING
    assert "pptrace.activation._bootstrap.sitecustomize" in RECORDING
    assert "pptrace.load.loader" in READING and "pptrace.model.records" in MODEL
    assert "pptrace.plugins.pytest_plugin" in PLUGINS
    in_folders = [p.relative_to(PACKAGES["pptrace"]).parts for p in
                  PACKAGES["pptrace"].rglob("*.py")]
    assert len(MODEL + ENGINES + RECORDING + READING + PLUGINS + SHIPPING) == len(
        [parts for parts in in_folders if len(parts) > 1 and parts[0] != "cli"])


# --- 4. what the folders import, read from the source ----------------------------------------

def tui_imports_in(path: Path, root: Path = ROOT) -> list[str]:
    """Every way a source file could import the viewer: import statements and literal names
    passed to ``importlib.import_module`` or ``__import__``."""
    found: list[str] = []
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
        found += [f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}: {n}" for n in names
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


#: The payload comparison's verdicts on a pair. The viewer paints the analyzer's
#: (``PairRun.differs``) and makes none (issue 21); ``compare_events`` may still describe a
#: pair's fields in the detail pane.
VERDICTS = frozenset({"same", "FAST_KEY"})
PAYLOAD = "pptrace.analyze.payload"


def verdict_uses_in(path: Path, root: Path = ROOT) -> list[str]:
    """Every place a source file imports a payload verdict by name (or ``*``) or reads one
    off the payload module (``payload.same``)."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    modules = set()  # the names the payload module is bound to here
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == PAYLOAD}
        elif isinstance(node, ast.ImportFrom) and node.module == "pptrace.analyze":
            modules |= {a.asname or a.name for a in node.names if a.name == "payload"}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == PAYLOAD:
            found += [f"{node.lineno}: {a.name}" for a in node.names
                      if a.name in VERDICTS or a.name == "*"]
        elif isinstance(node, ast.Attribute) and node.attr in VERDICTS:
            base = ast.unparse(node.value)
            if base in modules:
                found.append(f"{node.lineno}: {base}.{node.attr}")
    return [f"{path.relative_to(root)}:{hit}" for hit in found]


def test_the_viewer_judges_no_pair_it_paints() -> None:
    sources = sorted(PACKAGES["pptrace_tui"].rglob("*.py"))
    assert len(sources) > 10
    assert [hit for path in sources for hit in verdict_uses_in(path)] == []


def test_the_verdict_rule_detects_each_use(tmp_path: Path) -> None:
    """The scanner above is not vacuous: it finds each way to reach a verdict."""
    sample = tmp_path / "sample.py"
    sample.write_text("from pptrace.analyze.payload import FAST_KEY, compare_events, same\n"
                      "from pptrace.analyze import payload as p\nimport pptrace.analyze.payload\n"
                      "p.same(a, b)\npptrace.analyze.payload.FAST_KEY(t)\np.compare(a, b)\n"
                      "from pptrace.analyze.payload import *\n", "utf-8")
    assert verdict_uses_in(sample, tmp_path) == [
        "sample.py:1: FAST_KEY", "sample.py:1: same", "sample.py:7: *", "sample.py:4: p.same",
        "sample.py:5: pptrace.analyze.payload.FAST_KEY"]


NETWORK_EXPORTERS = ("grpc", "requests", "urllib3", "opentelemetry.exporter.otlp.proto.grpc",
                     "opentelemetry.exporter.otlp.proto.http")


def network_imports_in(path: Path, root: Path = ROOT) -> list[str]:
    """Each import of a network exporter in a source file, and whether a function makes it."""
    found: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        where = "in a function" if in_function else "at import"
        found.extend(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}: {n} ({where})"
                     for n in names if any(n == e or n.startswith(e + ".")
                                           for e in NETWORK_EXPORTERS))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                 ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text("utf-8"), str(path)), False)
    return found


def test_only_export_otlp_imports_the_network_exporters_and_only_when_called() -> None:
    """An engine that records to a file never pays for gRPC or HTTP: the exporters and the HTTP
    client are imported inside functions of ``pptrace.export.otlp``, when OTLP export is
    configured. The OTLP shipper (``pptrace.ship``) is a process of its own, which the engine's
    never imports (an import-linter contract): its gRPC client is its own business."""
    hits = [hit for path in sorted(PACKAGES["pptrace"].rglob("*.py"))
            for hit in network_imports_in(path)]
    assert hits, "pptrace.export.otlp no longer imports a network exporter: update this rule"
    assert [h for h in hits if not (h.startswith("pptrace/export/otlp.py:")
                                    and h.endswith("(in a function)"))
            and not h.startswith("pptrace/ship/")] == []


def test_the_network_rule_tells_a_lazy_import_from_an_eager_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import grpc\n\ndef f():\n    from opentelemetry.exporter.otlp.proto.http"
                      ".trace_exporter import X\nimport grpcio_tools\n", "utf-8")
    assert network_imports_in(sample, tmp_path) == [
        "sample.py:1: grpc (at import)",
        "sample.py:4: opentelemetry.exporter.otlp.proto.http.trace_exporter (in a function)"]


def test_public_names_are_sorted() -> None:
    assert pptrace.__all__ == sorted(pptrace.__all__)


#: The most lines a module may have (issue 13): past it, a module holds more than one concept.
MAX_MODULE_LINES = 500


def _long_modules(root: Path) -> list[str]:
    return sorted(f"{p.relative_to(root)}: {n} lines"
                  for folder in ("pptrace", "tui", "samples") for p in (root / folder).rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES)


def test_no_module_is_over_500_lines() -> None:
    assert _long_modules(ROOT) == []


def test_a_long_module_is_named_with_its_length(tmp_path: Path) -> None:
    (tmp_path / "pptrace" / "model").mkdir(parents=True)
    (tmp_path / "pptrace" / "model" / "big.py").write_text("x = 1\n" * 501)
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "ok.py").write_text("x = 1\n" * 500)
    (tmp_path / "samples").mkdir()
    assert _long_modules(tmp_path) == ["pptrace/model/big.py: 501 lines"]
