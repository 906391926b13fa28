"""The README and the docs site say what the code does.

The README stays an overview (at most 180 lines) whose commands are the ones CI runs and whose
keys are the viewer's; every relative link in it and in ``docs/`` resolves; every page is in the
site's nav; and every module, attribute, file and test the pages name exists (a rename that
forgets the docs fails here). ``mkdocs build --strict`` in CI checks the anchors on top.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"
PAGES = sorted([README_PATH, *DOCS.rglob("*.md")])
MAX_README_LINES = 180
# Span names, attribute keys and report schemas look like dotted module paths; they are not.
NOT_MODULES = re.compile(r"pptrace\.(attach|extract|recorder|send|recv|msg|viewers|stats|tensor|"
                         r"subject|error|extra|keys|seq|mono_ns|duration_ns|dropped_before|thread|run_id|rank|"
                         r"world_size|pp_size|tp_size|host|pid|schema_version|direction|"
                         r"returned_none|analyze/|diff/)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def test_the_readme_is_an_overview() -> None:
    lines = README.count("\n")
    assert 60 <= lines <= MAX_README_LINES, f"README.md has {lines} lines"


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


def test_the_readmes_keys_are_the_viewers() -> None:
    section = README.split("## The five keys that matter", 1)[1].split("\n## ", 1)[0]
    keys = [k for row in section.splitlines() if row.startswith("| `")
            for k in re.findall(r"`([^`]+)`", row.split("|")[1])]
    assert len(keys) >= 5, keys
    bound = set(re.findall(r"^\| `([^`]+)` \|", _text(DOCS / "reference" / "keys.md"), re.M))
    assert set(keys) <= bound, set(keys) - bound


def relative_links() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", _text(page), flags=re.S)  # code shows links, never is one
        for target in LINK.findall(text):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
                found.append((_name(page), target))
    return found


@pytest.mark.parametrize(("page", "target"), relative_links())
def test_every_relative_link_resolves(page: str, target: str) -> None:
    path = (ROOT / page).parent / target.split("#", 1)[0]
    assert path.exists(), f"{page} links to {target}, which does not exist"
    if page != "README.md":  # the site links pages as pages, never out of docs/
        assert path.resolve().is_relative_to(DOCS), f"{page} links outside docs/: {target}"


def test_the_readme_links_the_site_and_every_page_is_in_the_nav() -> None:
    assert relative_links(), "no relative link found: the link pattern is broken"
    nav = set(re.findall(r"([\w./-]+\.md)\s*$", _text(ROOT / "mkdocs.yml"), re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav, (pages - nav, nav - pages)
    linked = {t for p, t in relative_links() if p == "README.md"}
    assert "docs/index.md" in linked and "docs/quickstart.md" in linked


def named_modules() -> list[tuple[str, str]]:
    names = set()
    for page in PAGES:
        for ref in re.findall(r"`([^`\s]*pptrace[\w.]*(?::\w+)?)`", _text(page)):
            ref = ref.split(":")[0]
            # pptrace_tui and pptrace_samples are packages; other pptrace_* names are fixtures,
            # or the native reader's compiled module (pptrace_meta), built on demand.
            if ref.startswith(("pptrace.", "pptrace_tui", "pptrace_samples")) and (
                    not NOT_MODULES.match(ref)):
                names.add((_name(page), ref))
    return sorted(names)


@pytest.mark.parametrize(("page", "name"), named_modules())
def test_every_module_and_attribute_the_docs_name_exists(page: str, name: str) -> None:
    if name.endswith(".__main__"):  # importing it would run the command line
        assert importlib.util.find_spec(name) is not None, f"{page} names {name}"
        return
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"{page} names {name}: {'.'.join(parts[:cut])} has no {attr}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{page} names {name}, which does not import")


def named_paths() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        refs = re.findall(r"`((?:pptrace|tui|samples|tests|benchmarks|scripts|docs)/[\w./-]+)`",
                          _text(page))
        found |= {(_name(page), r.rstrip(".")) for r in refs if "*" not in r and "<" not in r}
    return sorted(found)


@pytest.mark.parametrize(("page", "path"), named_paths())
def test_every_file_the_docs_name_exists(page: str, path: str) -> None:
    assert (ROOT / path).exists(), f"{page} names {path}, which does not exist"


def named_tests() -> list[tuple[str, str]]:
    return sorted({(_name(page), ref) for page in PAGES
                   for ref in re.findall(r"`(tests/[\w/]+\.py::[\w\[\]-]+)`", _text(page))})


@pytest.mark.parametrize(("page", "ref"), named_tests())
def test_every_test_the_docs_name_exists(page: str, ref: str) -> None:
    path, _, name = ref.partition("::")
    source = (ROOT / path).read_text(encoding="utf-8")
    assert re.search(rf"^(async )?def {re.escape(name.split('[')[0])}\(", source, re.M), (
        f"{page} names {ref}, which {path} does not define")


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """What CI's ``mkdocs build --strict`` checks, here too: links, anchors, the nav."""
    import subprocess
    import sys

    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: it is in the dev extra (pip install -e '.[dev]')")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                            "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "reference" / "findings" / "index.html").exists()
