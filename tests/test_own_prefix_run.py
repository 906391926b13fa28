"""A transport of one's own with the prefix ``__aux__.``, traced by ``pptrace run --target`` on a
real 2-rank torchrun (gloo) job: a float16 cast on the way is a dtype-mismatch whether the
prefix is given (``@__aux__.``) or learnt, and a healthy run is clean."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers_own_prefix import SCRIPT, TRANSPORT
from tests.helpers_startup import PYTHON, child_env

BIN = Path(PYTHON).parent  # pptrace and torchrun, as the venv installs them
TARGET = "aux_transport:attach_aux,pop_aux"


def _run(folder: Path, target: str, cast: bool) -> dict[str, object]:
    """Run the job under ``pptrace run --target``; return ``pptrace analyze``'s JSON report."""
    (folder / "aux_transport.py").write_text(TRANSPORT)
    (folder / "pp_aux.py").write_text(SCRIPT)
    tmp = folder / "tmp"
    tmp.mkdir()
    env = child_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", TMPDIR=str(tmp),
                    PPTRACE_NATIVE="0", **({"PP_CAST": "1"} if cast else {}))
    run = subprocess.run([str(BIN / "pptrace"), "run", "--target", target, "--",
                          str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2",
                          "pp_aux.py"],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    analyzed = subprocess.run([str(BIN / "pptrace"), "analyze", "--format", "json",
                               "pptrace-traces"], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=120)
    assert analyzed.returncode in (0, 1), analyzed.stderr
    report: dict[str, object] = json.loads(analyzed.stdout)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("target", [f"{TARGET}@__aux__.", TARGET], ids=["given", "learnt"])
def test_a_cast_on_the_way_is_a_dtype_mismatch_under_the_transports_own_prefix(
    tmp_path: Path, target: str
) -> None:
    report = _run(tmp_path, target, cast=True)
    summary = report["summary"]
    assert isinstance(summary, dict) and summary["by_kind"] == {"dtype-mismatch": 1}, report
    (finding,) = report["findings"]  # type: ignore[misc]
    assert finding["message"].startswith(
        "rank 1 attached `scores` float32[2, 4]; rank 0 extracted float16[2, 4]"), finding
    assert (finding["microbatch"], finding["cascade"]) == (0, 2)  # all 3 microbatches


@pytest.mark.slow
def test_a_healthy_run_with_a_learnt_prefix_is_clean(tmp_path: Path) -> None:
    report = _run(tmp_path, TARGET, cast=False)
    summary = report["summary"]
    assert isinstance(summary, dict)
    assert (summary["events"], summary["findings"]) == (6, 0), report
