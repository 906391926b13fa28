"""The documentation's reference tables are what the code says today: regenerating them with
``scripts/gen_docs_tables.py`` changes nothing, and each page holds every item of the code it
restates (so a generator that silently dropped rows would fail too, not only a stale page)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs_tables",
                                                  ROOT / "scripts" / "gen_docs_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("path", sorted(GEN.render(), key=str), ids=lambda p: p.name)
def test_the_generated_page_is_fresh(path: Path) -> None:
    fresh = GEN.render()[path]
    assert path.exists(), (
        f"{path.relative_to(ROOT)} is missing: run python scripts/gen_docs_tables.py")
    assert path.read_text(encoding="utf-8") == fresh, (
        f"{path.relative_to(ROOT)} is stale: run python scripts/gen_docs_tables.py")


def test_the_check_mode_names_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(GEN, "REFERENCE", tmp_path)
    assert GEN.main(["--check"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said == [f"stale: {tmp_path / name}" for name in GEN.PAGES]
    assert not list(tmp_path.iterdir())  # --check writes nothing
    assert GEN.main([]) == 0 and GEN.main(["--check"]) == 0


def test_every_finding_kind_has_its_row() -> None:
    from pptrace.model.findings import FindingKind

    page = (REFERENCE / "findings.md").read_text(encoding="utf-8")
    for kind in FindingKind:
        row = (f"| `{kind.value}` | {kind.default_severity.name.lower()} | "
               f"{kind.category.value} | {kind.description} |")
        assert row in page, kind


def test_every_import_rule_is_listed_by_its_name() -> None:
    config = GEN.tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    page = (REFERENCE / "import-rules.md").read_text(encoding="utf-8")
    contracts = config["tool"]["importlinter"]["contracts"]
    assert contracts
    for contract in contracts:
        assert f"| {GEN.cell(contract['name'])} | `{contract['type']}` |" in page, contract["name"]


def test_every_schema_key_is_listed() -> None:
    from pptrace.model import messages, schema

    page = (REFERENCE / "schema-keys.md").read_text(encoding="utf-8")
    keys = {v for m in (schema, messages) for k, v in vars(m).items()
            if k.isupper() and isinstance(v, str) and v.startswith("pptrace.")
            and "{}" not in v and not v.endswith(".")}
    keys |= {schema.PP_RANK, schema.TP_RANK, schema.R_HOST, schema.R_PID, schema.R_INSTANCE}
    assert len(keys) > 50
    for key in sorted(keys):
        assert f"| `{key}` |" in page, key
