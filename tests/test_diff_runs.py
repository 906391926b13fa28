"""``pptrace diff A B``: names per direction, dtype and shape per name, bytes per step, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analyze
from pptrace.cli.main import main
from pptrace.model import errors
from pptrace.report.diff import diff, profile
from tests.helpers_analyze import Run, meta, write_run

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"


def _good(pp: int = 2) -> Run:
    run = Run(pp_size=pp)
    for k in range(4):
        run.step([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,))])
    return run


def _bad() -> Run:
    run = Run(pp_size=4)
    for k in range(4):
        run.attach([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,)), meta("extra", (2,))])
        run.extract([meta("topk", (k + 1, 4)), meta("entropy", (k + 1,), "float16"),
                     meta("extra", (2,))])
    run.attach([], error=("RuntimeError", errors.ATTACH_EMPTY))
    return run


def _rows(a: Run, b: Run) -> dict[tuple[str, str], tuple[str, str, bool]]:
    ta, tb = a.trace(), b.trace()
    return {(r.section, r.subject): (r.a, r.b, r.changed)
            for r in diff(profile(ta, analyze(ta)), profile(tb, analyze(tb)))}


def test_same_run_has_no_difference() -> None:
    rows = _rows(_good(), _good())
    assert not any(changed for _, _, changed in rows.values())
    assert rows[("per name (attach)", "topk")] == ("float32 [*, 4]", "float32 [*, 4]", False)


def test_pp2_against_pp4_with_a_regression() -> None:
    rows = _rows(_good(), _bad())
    assert rows[("run", "layout")] == ("pp 2, tp 1", "pp 4, tp 1", True)
    assert rows[("names", "attached")] == ("topk, entropy", "topk, entropy, extra", True)
    assert rows[("per name (attach)", "extra")] == ("absent", "float32 [2]", True)
    assert rows[("per name (attach)", "entropy")][2] is False
    assert rows[("per name (extract)", "entropy")] == ("float32 [*]", "float16 [*]", True)
    assert rows[("bytes per step", "attach")] == ("50.0", "58.0 (x1.16)", True)
    assert rows[("engine errors", "attach-empty")] == ("0", "1", True)
    assert rows[("findings", "dtype-mismatch")] == ("0", "4", True)


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(_good(), str(tmp_path / "a"))
    write_run(_bad(), str(tmp_path / "b"))
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 differences."
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "  entropy" in out and "float16 [*]  << changed" in out
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pptrace.diff/1"
    assert doc["differences"] == sum(r["changed"] for r in doc["rows"]) > 5
    assert set(doc["rows"][0]) == {"section", "subject", "a", "b", "changed"}


def test_cli_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["diff", str(GOLDEN), str(tmp_path / "empty.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty.jsonl:1: empty file" in err
