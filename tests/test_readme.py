"""The README says what the code does: its commands are the ones CI runs, and every module,
attribute and file it names exists (a rename that forgets the docs fails here)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Span names, attribute keys and report schemas look like dotted module paths; they are not.
NOT_MODULES = re.compile(r"pptrace\.(attach|extract|recorder|send|recv|msg|viewers|stats|tensor|"
                         r"subject|error|extra|keys|seq|mono_ns|duration_ns|dropped_before|thread|run_id|rank|"
                         r"world_size|pp_size|tp_size|host|pid|schema_version|direction|"
                         r"returned_none|analyze/|diff/)")


def quickstart_commands() -> list[str]:
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for block in blocks[:2] for line in block.splitlines()
            if line and not line.startswith("#")]


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    demo, tests = quickstart_commands()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests in ci
    assert demo == "pip install torch==2.13.0 -e '.[view]' && pptrace demo"


def named_modules() -> list[str]:
    names = set()
    for ref in re.findall(r"`([^`\s]*pptrace[\w.]*(?::\w+)?)`", README):
        ref = ref.split(":")[0]
        # pptrace_tui and pptrace_samples are packages; other pptrace_* names are fixtures, or
        # the native reader's compiled module (pptrace_meta), built on demand.
        if ref.startswith(("pptrace.", "pptrace_tui", "pptrace_samples")) and (
                not NOT_MODULES.match(ref)):
            names.add(ref)
    return sorted(names)


@pytest.mark.parametrize("name", named_modules())
def test_every_module_and_attribute_the_readme_names_exists(name: str) -> None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"README names {name}: {'.'.join(parts[:cut])} has no {attr}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"README names {name}, which does not import")


def named_paths() -> list[str]:
    refs = re.findall(r"`((?:pptrace|tui|samples|tests|benchmarks|scripts|docs)/[\w./-]+)`", README)
    refs += re.findall(r"\]\(((?:docs)/[\w./-]+)\)", README)
    return sorted({r.rstrip(".") for r in refs if "*" not in r and "<" not in r})


@pytest.mark.parametrize("path", named_paths())
def test_every_file_the_readme_names_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"README names {path}, which does not exist"


def named_tests() -> list[str]:
    return sorted(set(re.findall(r"`(tests/[\w/]+\.py::[\w\[\]-]+)`", README)))


@pytest.mark.parametrize("ref", named_tests())
def test_every_test_the_readme_names_exists(ref: str) -> None:
    path, _, name = ref.partition("::")
    source = (ROOT / path).read_text(encoding="utf-8")
    assert re.search(rf"^(async )?def {re.escape(name.split('[')[0])}\(", source, re.M), (
        f"README names {ref}, which {path} does not define")
