"""pptrace on vLLM 0.33.0's real ``GroupCoordinator``, on real gloo processes (PP=2 x TP=2).

The pipeline is ``tests.helpers_vllm``'s: the V1 worker's call pattern, traced with
``pptrace.instrument()`` and no option. A healthy run gives no finding; each injected bug class
is named by the analyzer: a buffer overwritten while its isend is in flight (vllm#54962,
``message-content-mismatch``, with fingerprints), a non-replicated residual sent as TP slices
(vllm#24021, ``message-slices-differ``), a lost send (``message-hang``). vLLM is installed by the
test command (``pip install --no-deps -r tests/engines.txt``: the wheel and the small packages its
``parallel_state`` and ``vllm.config`` import); without it these tests fail naming that line, as
SGLang's parity tests do: a real-class test that skips proves nothing.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pptrace.analyze.analyzer import analysis, analyze
from pptrace.load.loader import load_paths
from pptrace.model.findings import FindingKind, MessageId, Severity
from tests import helpers_vllm

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _vllm_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vLLM is not installed: pip install --no-deps -r tests/engines.txt")


def run_pipeline(tmp_path: Path, scenario: str, fingerprint: bool) -> list[str]:
    """Run the four ranks; return their trace files. A rank still waiting once the others have
    finished (the lost send) is stopped with SIGTERM, as a launcher stops a hung job."""
    trace_dir = tmp_path / "traces"
    os.environ["PPTRACE_FINGERPRINT"] = "1" if fingerprint else "0"
    ctx = mp.get_context("spawn")
    finished, release = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=helpers_vllm.rank_main,
                         args=(rank, str(tmp_path / "init"), str(trace_dir), scenario,
                               finished, release))
             for rank in range(4)]
    try:
        for p in procs:
            p.start()
        senders, receivers = procs[:2], procs[2:]
        if scenario == "lost-send":
            # Both senders have written their traces and will send nothing more: the
            # receivers wait for good, in a receive whose begin is in their traces.
            assert sorted(finished.get(timeout=120) for _ in senders) == [0, 1]
            for p in receivers:
                assert p.exitcode is None, "a receiver returned from a receive never sent"
                os.kill(p.pid, signal.SIGTERM)
            # A receiver blocked inside gloo's receive runs its SIGTERM handler only once the
            # receive returns, which it does when the senders exit and close the connections:
            # released at once (waiting for the receivers first cost a 120 s join timeout).
        # The senders stay alive until released (see helpers_vllm.rank_main): released here in
        # every scenario, not left to their own 120 s wait racing this join's.
        release.set()
        for p in senders:
            p.join(120)
            assert p.exitcode == 0, f"sender exited {p.exitcode}"
        for p in receivers:
            p.join(120)
            assert p.exitcode is not None, "a receiver did not stop"
            if scenario != "lost-send":
                assert p.exitcode == 0, f"receiver exited {p.exitcode}"
    finally:
        os.environ.pop("PPTRACE_FINGERPRINT", None)
        for p in procs:
            if p.is_alive():
                p.kill()
    return sorted(str(f) for f in trace_dir.iterdir())


def errors_of(files: list[str]) -> dict[FindingKind, int]:
    found: dict[FindingKind, int] = {}
    for finding in analyze(load_paths(files)):
        if finding.severity is Severity.ERROR:
            found[finding.kind] = found.get(finding.kind, 0) + 1
    return found


def test_a_healthy_vllm_pipeline_is_recorded_and_clean(tmp_path: Path) -> None:
    files = run_pipeline(tmp_path, "healthy", fingerprint=True)
    assert len(files) == 4  # every rank traced, with no option
    trace = load_paths(files)
    sent = [m for p in trace.processes for m in p.messages if m.op.value == "send"]
    got = [m for p in trace.processes for m in p.messages if m.op.value == "recv"
           and m.phase == "end"]
    # Recorded once each (the shells are not wrapped), the receive with what arrived: full
    # shapes after the TP all-gather, never the slices or empty buffers of irecv's return.
    assert len(sent) == len(got) == 2 * helpers_vllm.STEPS
    for m in got:
        assert m.keys == ("hidden_states", "residual")
        assert all(t.shape == (4, 6) and t.fingerprint for t in m.tensors)
    assert {(p.rank.pp_rank, p.rank.tp_rank) for p in trace.processes} == {
        (0, 0), (0, 1), (1, 0), (1, 1)}
    assert errors_of(files) == {}
    assert [f for f in analyze(trace) if f.severity is not Severity.INFO] == []


def test_a_vllm_broadcast_is_recorded_and_paired_with_every_member(tmp_path: Path) -> None:
    files = run_pipeline(tmp_path, "broadcast", fingerprint=True)
    trace = load_paths(files)
    judged = analysis(trace)
    assert [f for f in judged.findings if f.severity is not Severity.INFO] == []
    index = {p.rank.rank: i for i, p in enumerate(trace.processes)}
    for src, member in ((2, 0), (3, 1)):  # PP groups [0, 2] and [1, 3]: the last stage sources
        sent = [m for m in trace.processes[index[src]].messages if m.group]
        got = [m for m in trace.processes[index[member]].messages if m.group and m.phase == "end"]
        assert len(sent) == len(got) == helpers_vllm.STEPS
        assert all(m.group == (member, src) and m.peer == -1 for m in sent)
        assert all(e.peer == src and e.keys == ("sampled_token_ids",)
                   and e.tensors == m.tensors for m, e in zip(sent, got, strict=True))
        assert all(judged.broadcast_pairs[MessageId.of(index[src], m)] == (
            MessageId.of(index[member], e),) for m, e in zip(sent, got, strict=True))


@pytest.mark.parametrize(("scenario", "fingerprint", "kind"), [
    ("overwrite", True, FindingKind.MSG_CONTENT_MISMATCH),
    ("residual-slices", True, FindingKind.MSG_SLICES_DIFFER),
    ("lost-send", False, FindingKind.MSG_HANG),
])
def test_a_vllm_bug_class_is_named(tmp_path: Path, scenario: str, fingerprint: bool,
                                   kind: FindingKind) -> None:
    files = run_pipeline(tmp_path, scenario, fingerprint)
    errors = errors_of(files)
    assert kind in errors, errors


def test_pptrace_run_traces_vllm_with_no_option(tmp_path: Path) -> None:
    """``pptrace run`` with no --target: the ranks' start-up waits for vLLM's parallel_state too
    (a vLLM process never loads a transport module) and traces its messages."""
    trace_dir = tmp_path / "traces"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPTRACE_")}
    done = subprocess.run(
        [sys.executable, "-m", "pptrace", "run", "--dir", str(trace_dir), "--",
         sys.executable, "-m", "tests.helpers_vllm", str(trace_dir)],
        cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 processes recorded" in done.stderr, done.stderr[-3000:]
    files = sorted(str(f) for f in trace_dir.glob("*.jsonl*"))
    assert len(files) == 4
    assert errors_of(files) == {}
