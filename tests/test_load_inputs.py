"""The commands' inputs (``pptrace.cli.inputs``): with no path, ``./pptrace-traces`` (its newest
run directory when it holds runs rather than traces), and a one-line error when it is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pptrace.cli.inputs import default_paths
from pptrace.cli.main import main
from pptrace.model.errors import TraceInputError

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"
MISSING = ("pptrace: error: no input: give trace files, directories or glob patterns, or "
           "--jaeger URL (./pptrace-traces, read by default, does not exist here)\n")


def test_analyze_without_a_path_reads_pptrace_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(GOLDEN, tmp_path / "pptrace-traces")
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "--format", "json"]) == 1  # the golden trace's error finding
    out = capsys.readouterr()
    assert out.err == ""
    assert '"events": 12' in out.out


def test_analyze_without_a_path_or_the_default_directory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["analyze"]) == 2
    assert capsys.readouterr().err == MISSING


def test_a_directory_of_runs_gives_its_newest_run_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "pptrace-traces"
    for i, name in enumerate(["demo-20261201-100000", "demo-20261201-090000"]):
        shutil.copytree(GOLDEN, root / name)
        os.utime(root / name, ns=(10**18 + i * 10**12,) * 2)  # the second is the newest
    (root / "empty-run").mkdir()
    assert default_paths(here=str(tmp_path)) == (str(root / "demo-20261201-090000"),)
    assert capsys.readouterr().err == (
        f"pptrace: reading {root / 'demo-20261201-090000'} (the newest run in ./pptrace-traces)\n")
    # --follow watches the directory itself, whatever it holds, and waits for a missing one.
    assert default_paths(here=str(tmp_path), follow=True) == (str(root),)
    shutil.rmtree(root)
    assert default_paths(here=str(tmp_path), follow=True) == (str(root),)
    with pytest.raises(TraceInputError):
        default_paths(here=str(tmp_path))
