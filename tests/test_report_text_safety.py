"""Hostile trace text in every rendered path: a lone surrogate never stops a report, and a huge
name or run id is clipped at one place (``model.text.clip_name``) with a visible marker.

The commands run in a child process, so that stdout is a real UTF-8 pipe (pytest's capture
would accept what a terminal or a file cannot take).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).parent / "data" / "golden-pp2"
RANK0, RANK1 = sorted(GOLDEN.iterdir())


def _pptrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pptrace", *args, "--no-progress"],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"})


def _edited(tmp: Path, old: str, new: str) -> Path:
    path = tmp / RANK0.name
    text = RANK0.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    (tmp / RANK1.name).write_bytes(RANK1.read_bytes())
    return path


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["analyze", "diff"])
@pytest.mark.parametrize("form", ["text", "json"])
def test_a_lone_surrogate_in_a_tensor_name_is_shown_as_its_escape(
    tmp_path: Path, command: str, form: str
) -> None:
    # JSON's "\ud800" escape decodes to a lone surrogate, which UTF-8 cannot encode.
    path = _edited(tmp_path, '"entropy"', '"entropy\\ud800"')
    args = [str(tmp_path)] if command == "analyze" else [str(path), str(GOLDEN)]
    proc = _pptrace(command, *args, "--format", form)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # findings or none: never a crash
    if form == "json":
        doc = json.loads(proc.stdout)
        for s in _strings(doc):
            s.encode("utf-8")  # strict: no lone surrogate left in any string
        assert any("entropy\\ud800" in s for s in _strings(doc))
    else:
        assert "entropy\\ud800" in proc.stdout


@pytest.mark.slow
def test_a_huge_tensor_name_and_run_id_are_clipped_in_every_report(tmp_path: Path) -> None:
    """A 300,000-character name gave 11.7 MB of diff (every row padded to its width), and a
    200,000-character run id 200 k-character finding lines."""
    path = _edited(tmp_path, '"entropy"', '"entropy' + "n" * 300_000 + '"')
    text = path.read_text().replace('"golden"', '"' + "R" * 200_000 + '"')
    path.write_text(text)
    for args in (["analyze", str(tmp_path)], ["analyze", str(tmp_path), "--format", "json"],
                 ["diff", str(path), str(GOLDEN)],
                 ["diff", str(path), str(GOLDEN), "--format", "json"]):
        proc = _pptrace(*args)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
        assert "more characters cut)" in proc.stdout, args
        assert max(map(len, proc.stdout.splitlines())) < 2_500, args
        assert len(proc.stdout) < 64_000, (args, len(proc.stdout))
