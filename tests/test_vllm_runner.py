"""vLLM 0.33.0's V1 model runner's sampled-token broadcast, traced on two real gloo processes.

The pipeline is ``tests.helpers_vllm_runner``'s (which says what is the wheel's own code and what
stands in for the runner's state): ``pptrace.instrument()`` with no option records the last
stage's ``_pp_broadcast_prev_sampled_token_ids`` as a broadcast's source and the other stage's
``_pp_receive_prev_sampled_token_ids_to_input_batch`` as a receive begun when it is posted and
ended when the runner waits its work. A healthy run is paired one-to-many with no finding (a
step the runner skips leaves nothing on either end); a broadcast the source skipped while the
member waits for it is a ``message-hang``; a dtype the member does not allocate (gloo moves the
bytes) is a ``message-dtype-mismatch``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import signal
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analysis
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, MessageId, Severity
from tests import helpers_vllm_runner as h

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _vllm_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vLLM is not installed: pip install --no-deps -r tests/engines.txt")


def run_stages(tmp_path: Path, scenario: str) -> list[str]:
    """Run the two stages; return their trace files. A member still waiting once the source
    has finished (the lost broadcast) is stopped with SIGTERM, as a launcher stops a hung job."""
    trace_dir = tmp_path / "traces"
    os.environ["PPTRACE_FINGERPRINT"] = "1"
    ctx = mp.get_context("spawn")
    finished, release = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=h.rank_main, args=(rank, str(tmp_path / "init"),
                                                   str(trace_dir), scenario, finished, release))
             for rank in range(2)]
    member, source = procs
    try:
        for p in procs:
            p.start()
        if scenario == "lost":
            assert finished.get(timeout=120) == 1  # the source traced all it did
            assert member.exitcode is None, "the member returned from a broadcast never made"
            os.kill(member.pid, signal.SIGTERM)
        release.set()
        for p in procs:
            p.join(120)
        assert source.exitcode == 0, f"source exited {source.exitcode}"
        assert member.exitcode is not None, "the member did not stop"
        if scenario != "lost":
            assert member.exitcode == 0, f"member exited {member.exitcode}"
    finally:
        os.environ.pop("PPTRACE_FINGERPRINT", None)
        for p in procs:
            if p.is_alive():
                p.kill()
    return sorted(str(f) for f in trace_dir.iterdir())


def test_the_sampled_token_broadcast_is_recorded_and_paired(tmp_path: Path) -> None:
    files = run_stages(tmp_path, "healthy")
    trace = load_paths(files)
    judged = analysis(trace)
    assert [f for f in judged.findings if f.severity is not Severity.INFO] == []
    index = {p.rank.rank: i for i, p in enumerate(trace.processes)}
    sent = [m for m in trace.processes[index[1]].messages if m.group]
    got = [m for m in trace.processes[index[0]].messages if m.group and m.phase == "end"]
    begun = [m for m in trace.processes[index[0]].messages if m.group and m.phase == "begin"]
    # Steps 0 and 2 (the runner skips step 1's broadcast on both ends: nothing recorded).
    assert len(sent) == len(got) == len(begun) == 2
    assert all(m.group == (0, 1) and m.peer == -1 for m in sent)
    for m, e in zip(sent, got, strict=True):
        assert e.peer == 1 and e.keys == m.keys == ("sampled_token_ids",)
        # What arrived, after the wait: the shape, dtype and content the source sent.
        assert e.tensors == m.tensors and e.tensors[0].shape == (h.NUM_REQS, 1)
        assert e.tensors[0].dtype == "int32" and e.tensors[0].fingerprint
        assert judged.broadcast_pairs[MessageId.of(index[1], m)] == (
            MessageId.of(index[0], e),)
    assert len({m.tensors[0].fingerprint for m in sent}) == 2  # the two steps' ids differ


def test_a_skipped_sampled_token_broadcast_is_a_hang_on_the_member(tmp_path: Path) -> None:
    files = run_stages(tmp_path, "lost")
    hangs = [f for f in analysis(load_paths(files)).findings if f.kind is FindingKind.MSG_HANG]
    assert len(hangs) == 1, hangs
    assert hangs[0].severity is Severity.ERROR and "rank 1" in hangs[0].message, hangs[0].message


def test_a_sampled_token_dtype_the_member_does_not_allocate_is_named(tmp_path: Path) -> None:
    files = run_stages(tmp_path, "dtype")
    errors = {f.kind for f in analysis(load_paths(files)).findings
              if f.severity is Severity.ERROR}
    assert FindingKind.MSG_DTYPE_MISMATCH in errors, errors
